#include "maps/lpm_keys.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace egressd::maps {
namespace {

using Ranges = std::vector<policy::PortRange>;

// Sorted, merged (adjacent and overlapping ranges joined).
Ranges Normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& x : r) {
    if (!out.empty() && static_cast<uint32_t>(x.first) <= static_cast<uint32_t>(out.back().last) + 1) {
      out.back().last = std::max(out.back().last, x.last);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

// nullopt in the map value means "every port".
using PortSet = std::optional<Ranges>;

void Merge(PortSet& into, const PortSet& from) {
  if (!into || !from) {
    into.reset();
    return;
  }
  into->insert(into->end(), from->begin(), from->end());
}

// The prefix of length len that contains ip.
absl::StatusOr<net::Cidr> NetworkOf(const net::IpAddr& ip, int len) {
  auto b = ip.bytes();
  for (int bit = len; bit < ip.bits(); ++bit) b[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  net::IpAddr masked = ip.is_v4() ? net::IpAddr::V4({b[0], b[1], b[2], b[3]}) : net::IpAddr::V6(b);
  return net::Cidr::Make(masked, len);
}

}  // namespace

uint32_t LpmPlenFlags(const net::Cidr& cidr) {
  return EGR_LPM_PLEN_SET | (static_cast<uint32_t>(cidr.prefix_len()) & EGR_LPM_PLEN_MASK);
}

egr_prot_val MakeProtVal(const net::Cidr& cidr) {
  egr_prot_val v{};
  v.flags = LpmPlenFlags(cidr);
  return v;
}

egr_lpm4_key MakeLpm4Key(PolicyId id, const net::Cidr& cidr) {
  egr_lpm4_key k{};
  k.prefixlen = 32 + cidr.prefix_len();
  k.policy_id = htonl(id);
  std::memcpy(k.addr, cidr.addr().bytes().data(), 4);
  return k;
}

egr_lpm6_key MakeLpm6Key(PolicyId id, const net::Cidr& cidr) {
  egr_lpm6_key k{};
  k.prefixlen = 32 + cidr.prefix_len();
  k.policy_id = htonl(id);
  std::memcpy(k.addr, cidr.addr().bytes().data(), 16);
  return k;
}

absl::StatusOr<std::vector<AllowEntry>> BuildAllowEntries(
    const std::vector<policy::AllowedCidr>& allowed) {
  std::map<net::Cidr, PortSet> by_cidr;  // ordered: shorter prefixes of a net first
  bool any_ports = false;
  for (const auto& a : allowed) {
    PortSet ports = a.ports.empty() ? PortSet() : PortSet(a.ports);
    any_ports |= !a.ports.empty();
    auto [it, inserted] = by_cidr.emplace(a.cidr, ports);
    if (!inserted) Merge(it->second, ports);
  }

  if (any_ports) {
    // Fold covering entries' ports into each port-limited entry.  Looking up
    // every shorter prefix of the entry is O(bits) per entry, fine at 100k.
    for (auto& [cidr, ports] : by_cidr) {
      if (!ports) continue;
      for (int len = 0; len < cidr.prefix_len() && ports; ++len) {
        auto shorter = NetworkOf(cidr.addr(), len);
        if (!shorter.ok()) continue;
        auto cover = by_cidr.find(*shorter);
        if (cover != by_cidr.end()) Merge(ports, cover->second);
      }
    }
  }

  std::vector<AllowEntry> out;
  out.reserve(by_cidr.size());
  for (const auto& [cidr, ports] : by_cidr) {
    AllowEntry e{cidr, {}};
    e.value.flags = LpmPlenFlags(cidr);
    if (ports) {
      Ranges r = Normalize(*ports);
      if (r.size() > EGR_MAX_PORT_RANGES) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", cidr.ToString(), "\": ", r.size(),
                         " disjoint port ranges; at most ", EGR_MAX_PORT_RANGES,
                         " fit one entry"));
      }
      e.value.nranges = static_cast<uint32_t>(r.size());
      for (size_t i = 0; i < r.size(); ++i) e.value.ranges[i] = {r[i].first, r[i].last};
    }
    out.push_back(e);
  }
  return out;
}

absl::Status CheckFitsMaps(const policy::CompiledPolicy& p) {
  auto entries = BuildAllowEntries(p.allowed);
  if (!entries.ok()) return entries.status();
  size_t v4 = 0, v6 = 0, prot4 = 0, prot6 = 0;
  for (const auto& e : *entries) (e.cidr.addr().is_v4() ? v4 : v6)++;
  for (const auto& pc : p.protected_cidrs) (pc.cidr.addr().is_v4() ? prot4 : prot6)++;
  auto too_many = [](size_t n, size_t max, const char* what) {
    return absl::InvalidArgumentError(absl::StrCat(n, " ", what, "; the kernel map holds at most ", max,
                                                   " for all sandboxes together"));
  };
  if (v4 > EGR_MAX_ALLOW4) return too_many(v4, EGR_MAX_ALLOW4, "allowed IPv4 prefixes");
  if (v6 > EGR_MAX_ALLOW6) return too_many(v6, EGR_MAX_ALLOW6, "allowed IPv6 prefixes");
  if (prot4 > EGR_MAX_PROT) return too_many(prot4, EGR_MAX_PROT, "protected IPv4 prefixes");
  if (prot6 > EGR_MAX_PROT) return too_many(prot6, EGR_MAX_PROT, "protected IPv6 prefixes");
  return absl::OkStatus();
}

egr_policy_val MakePolicyHeader(const policy::CompiledPolicy& p) { return MakePolicyHeader(p, p.ContentHash()); }

egr_policy_val MakePolicyHeader(const policy::CompiledPolicy& p, uint64_t content_hash) {
  egr_policy_val v{};
  v.default_verdict = p.default_verdict == policy::Verdict::kAllow ? EGR_VERDICT_ALLOW
                                                                   : EGR_VERDICT_DENY;
  v.deny_action = p.deny_action == policy::DenyAction::kDrop ? EGR_ACTION_DROP
                                                             : EGR_ACTION_REJECT;
  v.flags = (p.audit.audit_only ? EGR_POLICY_AUDIT_ONLY : 0) | (p.audit.strict ? EGR_POLICY_STRICT_AUDIT : 0);
  v.content_hash = content_hash;
  return v;
}

}  // namespace egressd::maps
