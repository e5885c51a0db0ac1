#include "userspace/policy/nft_render.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace egressd::policy {
namespace {

using U128 = unsigned __int128;

// An inclusive address range of one family, as an integer.
struct Range {
  U128 lo;
  U128 hi;
  bool operator<(const Range& o) const { return lo != o.lo ? lo < o.lo : hi < o.hi; }
};

U128 AddrValue(const net::IpAddr& a) {
  U128 v = 0;
  const int n = a.is_v4() ? 4 : 16;
  for (int i = 0; i < n; ++i) v = (v << 8) | a.bytes()[i];
  return v;
}

U128 MaxValue(bool v4) { return v4 ? U128{0xffffffffu} : ~U128{0}; }

Range ToRange(const net::Cidr& c) {
  const int host_bits = c.addr().bits() - c.prefix_len();
  const U128 lo = AddrValue(c.addr());
  const U128 span = host_bits == 128 ? ~U128{0} : (U128{1} << host_bits) - 1;
  return {lo, lo + span};
}

std::string AddrText(U128 v, bool v4) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (v4) {
    const uint32_t be = htonl(static_cast<uint32_t>(v));
    inet_ntop(AF_INET, &be, buf, sizeof(buf));
  } else {
    // Written byte by byte rather than through net::IpAddr, which would show
    // an address inside ::ffff:0:0/96 as IPv4.
    uint8_t b[16];
    for (int i = 15; i >= 0; --i, v >>= 8) b[i] = static_cast<uint8_t>(v);
    inet_ntop(AF_INET6, b, buf, sizeof(buf));
  }
  return buf;
}

// A prefix where the range is one ("10.0.0.0/8"), else "lo-hi".
std::string RangeText(const Range& r, bool v4) {
  if (r.lo == r.hi) return AddrText(r.lo, v4);
  const U128 diff = r.lo ^ r.hi;
  const bool aligned = (diff & (diff + 1)) == 0 && (r.lo & diff) == 0;
  if (aligned) {
    int host_bits = 0;
    for (U128 d = diff; d != 0; d >>= 1) ++host_bits;
    return AddrText(r.lo, v4) + "/" + std::to_string((v4 ? 32 : 128) - host_bits);
  }
  return AddrText(r.lo, v4) + "-" + AddrText(r.hi, v4);
}

// Sorted, overlapping and adjacent ranges merged: nft refuses overlapping
// interval elements, and merged elements are what its auto-merge would keep.
std::vector<Range> Merge(std::vector<Range> v, bool v4) {
  std::sort(v.begin(), v.end());
  std::vector<Range> out;
  for (const Range& r : v) {
    if (!out.empty() && (out.back().hi == MaxValue(v4) || r.lo <= out.back().hi + 1)) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<PortRange> UnionPorts(std::vector<PortRange> ports) {
  std::sort(ports.begin(), ports.end());
  std::vector<PortRange> out;
  for (const PortRange& p : ports) {
    if (!out.empty() && static_cast<int>(p.first) <= out.back().last + 1) {
      out.back().last = std::max(out.back().last, p.last);
    } else {
      out.push_back(p);
    }
  }
  return out;
}

struct PortEntry {
  Range range;
  std::vector<PortRange> ports;
};

// The port-restricted entries of one family as disjoint (range, ports)
// elements: each address gets the union of the ports of every entry that
// contains it (egressd's folded LPM entries allow exactly that union), and
// nft refuses two concatenated interval elements that overlap.
std::vector<PortEntry> Disjoint(const std::vector<PortEntry>& entries, bool v4) {
  std::vector<U128> points;
  // Entries starting at each point, and entries ending just before it.
  std::vector<std::pair<U128, size_t>> starts, ends;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Range& r = entries[i].range;
    points.push_back(r.lo);
    starts.push_back({r.lo, i});
    if (r.hi != MaxValue(v4)) {
      points.push_back(r.hi + 1);
      ends.push_back({r.hi + 1, i});
    }
  }
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  std::sort(starts.begin(), starts.end());
  std::sort(ends.begin(), ends.end());

  std::vector<PortEntry> out;
  std::set<size_t> active;
  size_t si = 0, ei = 0;
  for (size_t p = 0; p < points.size(); ++p) {
    const U128 at = points[p];
    while (ei < ends.size() && ends[ei].first == at) active.erase(ends[ei++].second);
    while (si < starts.size() && starts[si].first == at) active.insert(starts[si++].second);
    if (active.empty()) continue;
    const U128 hi = p + 1 < points.size() ? points[p + 1] - 1 : MaxValue(v4);
    std::vector<PortRange> ports;
    for (size_t i : active) ports.insert(ports.end(), entries[i].ports.begin(), entries[i].ports.end());
    ports = UnionPorts(std::move(ports));
    if (!out.empty() && out.back().range.hi + 1 == at && out.back().ports == ports) {
      out.back().range.hi = hi;
    } else {
      out.push_back({{at, hi}, std::move(ports)});
    }
  }
  return out;
}

void AppendSet(std::string& out, const std::string& name, const std::string& type,
               const std::string& flags, const std::vector<std::string>& elements) {
  out += "  set " + name + " {\n    type " + type + ";\n    flags " + flags + ";\n";
  if (!elements.empty()) {
    out += "    elements = {\n";
    for (size_t i = 0; i < elements.size(); ++i) {
      out += "      " + elements[i] + (i + 1 < elements.size() ? ",\n" : "\n");
    }
    out += "    }\n";
  }
  out += "  }\n";
}

std::vector<std::string> RangeElements(const std::vector<Range>& ranges, bool v4) {
  std::vector<std::string> out;
  out.reserve(ranges.size());
  for (const Range& r : ranges) out.push_back(RangeText(r, v4));
  return out;
}

std::vector<std::string> PortElements(const std::vector<PortEntry>& entries, bool v4) {
  std::vector<std::string> out;
  for (const PortEntry& e : entries) {
    const std::string addr = RangeText(e.range, v4);
    for (const PortRange& p : e.ports) out.push_back(addr + " . " + ToString(p));
  }
  return out;
}

// 64:ff9b::/96 + the IPv4 range: egressd applies protected IPv4 ranges to the
// NAT64 addresses a translator would turn into them.
Range Nat64(const Range& v4) {
  const U128 prefix = U128{0x0064ff9bu} << 96;
  return {prefix | v4.lo, prefix | v4.hi};
}

}  // namespace

std::string RenderNft(const CompiledPolicy& policy, const std::string& table) {
  std::vector<Range> prot4, prot6, all4, all6;
  std::vector<PortEntry> ports4, ports6;
  for (const ProtectedCidr& p : policy.protected_cidrs) {
    const Range r = ToRange(p.cidr);
    if (p.cidr.addr().is_v4()) {
      prot4.push_back(r);
      prot6.push_back(Nat64(r));
    } else {
      prot6.push_back(r);
    }
  }
  for (const AllowedCidr& a : policy.allowed) {
    const bool v4 = a.cidr.addr().is_v4();
    const Range r = ToRange(a.cidr);
    if (a.ports.empty()) {
      (v4 ? all4 : all6).push_back(r);
    } else {
      (v4 ? ports4 : ports6).push_back({r, a.ports});
    }
  }

  // Protected and every-port entries are judged first; a port-restricted
  // element that one of them also covers is harmless (the earlier rule wins).
  // Rejecting: a TCP reset for TCP (the client fails at once; an ICMPv6
  // error for a locally sent SYN reaches the socket only with the SYN's
  // retransmit, a second later), ICMP admin-prohibited for the rest.
  const bool reject = policy.deny_action == DenyAction::kReject;
  const std::string deny = reject ? "goto deny" : "drop";
  const bool default_allow = policy.default_verdict == Verdict::kAllow;

  std::string out;
  out += "# egressd policy " + std::to_string(policy.allowed.size()) + " allowed CIDRs, " +
         std::to_string(policy.protected_cidrs.size()) + " protected; default " +
         std::string(ToString(policy.default_verdict)) + ", on deny " +
         std::string(ToString(policy.deny_action)) + "\n";
  out += "table inet " + table + " {}\n";
  out += "delete table inet " + table + "\n";
  out += "table inet " + table + " {\n";
  AppendSet(out, "protected4", "ipv4_addr", "interval", RangeElements(Merge(prot4, true), true));
  AppendSet(out, "protected6", "ipv6_addr", "interval", RangeElements(Merge(prot6, false), false));
  AppendSet(out, "allow4", "ipv4_addr", "interval", RangeElements(Merge(all4, true), true));
  AppendSet(out, "allow6", "ipv6_addr", "interval", RangeElements(Merge(all6, false), false));
  AppendSet(out, "allow4_ports", "ipv4_addr . inet_service", "interval",
            PortElements(Disjoint(ports4, true), true));
  AppendSet(out, "allow6_ports", "ipv6_addr . inet_service", "interval",
            PortElements(Disjoint(ports6, false), false));
  AppendSet(out, kNftResolved4Set, "ipv4_addr", "timeout", {});
  AppendSet(out, kNftResolved6Set, "ipv6_addr", "timeout", {});
  if (reject) {
    out += "  chain deny {\n";
    out += "    meta l4proto tcp reject with tcp reset\n";
    out += "    reject with icmpx admin-prohibited\n";
    out += "  }\n";
  }
  out += "  chain output {\n";
  out += std::string("    type filter hook output priority filter; policy ") +
         (default_allow ? "accept" : "drop") +
         ";\n";
  out += "    ct state established,related accept\n";
  // The pod's own loopback, as egressd allows it in a sandbox's netns.
  out += "    ip daddr 127.0.0.0/8 accept\n";
  out += "    ip6 daddr ::1 accept\n";
  // The pod's own neighbour discovery (the kernel's, which egressd never
  // judges: it is no sandbox's socket); without it no IPv6 packet leaves.
  // Hop limit 255 is what ND requires; a raw-socket sender could forge it
  // (a weakness of this incumbent, not of egressd, which judges raw sockets).
  out += "    icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit } "
         "ip6 hoplimit 255 accept\n";
  out += "    ip daddr @protected4 " + deny + "\n";
  out += "    ip6 daddr @protected6 " + deny + "\n";
  out += "    ip daddr @allow4 accept\n";
  out += "    ip6 daddr @allow6 accept\n";
  // Only protocols with ports: ICMP and others match every-port entries only,
  // as egressd's port 0 does.
  out += "    meta l4proto { tcp, udp, udplite, sctp, dccp } ip daddr . th dport @allow4_ports accept\n";
  out += "    meta l4proto { tcp, udp, udplite, sctp, dccp } ip6 daddr . th dport @allow6_ports accept\n";
  out += "    ip daddr @resolved4 accept\n";
  out += "    ip6 daddr @resolved6 accept\n";
  // A chain's policy can only accept or drop: a rejecting default is the
  // last rule.
  if (!default_allow && reject) out += "    " + deny + "\n";
  out += "  }\n}\n";
  return out;
}

std::string RenderNftAddResolved(const net::IpAddr& addr, unsigned timeout_s, const std::string& table) {
  return "add element inet " + table + " " + (addr.is_v4() ? kNftResolved4Set : kNftResolved6Set) +
         " { " + addr.ToString() + " timeout " + std::to_string(timeout_s) + "s }\n";
}

}  // namespace egressd::policy
