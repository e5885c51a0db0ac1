// The property maps::BuildAllowEntries promises, as a checker: for every
// probe (address, port), a longest-prefix match over the entries it built,
// answered as the kernel's LPM trie answers (the longest matching prefix of
// the probe's family, and that entry's port ranges alone), allows exactly
// what ANY of the input entries allows.  Or it refused the input with its
// documented error, and the refusal is true: the prefix it names would need
// more than EGR_MAX_PORT_RANGES disjoint ranges.
//
// Shared by the fuzz target (tests/fuzz/allow_entries_fuzz.cc) and the
// deterministic unit test (tests/unit/allow_entries_oracle_test.cc).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "maps/lpm_keys.h"

namespace egressd::maps::oracle {

struct Probe {
  net::IpAddr addr;
  uint32_t port;  // 0-65535
};

inline bool InRanges(const std::vector<policy::PortRange>& ranges, uint32_t port) {
  for (const policy::PortRange& r : ranges) {
    if (r.first <= port && port <= r.last) return true;
  }
  return false;
}

// What the inputs allow: any entry that contains the address and allows the
// port (no ports: every port).
inline bool InputAllows(const std::vector<policy::AllowedCidr>& in, const Probe& p) {
  for (const policy::AllowedCidr& a : in) {
    if (a.cidr.Contains(p.addr) && (a.ports.empty() || InRanges(a.ports, p.port))) return true;
  }
  return false;
}

// What the kernel's LPM lookup over the built entries allows.
inline bool LpmAllows(const std::vector<AllowEntry>& out, const Probe& p) {
  const AllowEntry* best = nullptr;
  for (const AllowEntry& e : out) {
    if (!e.cidr.Contains(p.addr)) continue;
    if (best == nullptr || e.cidr.prefix_len() > best->cidr.prefix_len()) best = &e;
  }
  if (best == nullptr) return false;
  if (best->value.nranges == 0) return true;
  for (uint32_t i = 0; i < best->value.nranges; ++i) {
    if (best->value.ranges[i].first <= p.port && p.port <= best->value.ranges[i].last) return true;
  }
  return false;
}

// The number of disjoint ranges (adjacent ones joined) the union of every
// input entry covering `cidr` needs; nullopt when one of them allows every
// port.
inline std::optional<size_t> CoveringRanges(const std::vector<policy::AllowedCidr>& in,
                                            const net::Cidr& cidr) {
  std::vector<policy::PortRange> all;
  for (const policy::AllowedCidr& a : in) {
    if (!a.cidr.Contains(cidr)) continue;
    if (a.ports.empty()) return std::nullopt;
    all.insert(all.end(), a.ports.begin(), a.ports.end());
  }
  std::sort(all.begin(), all.end());
  size_t n = 0;
  uint32_t last = 0;
  for (const policy::PortRange& r : all) {
    if (n == 0 || r.first > last + 1) {
      ++n;
      last = r.last;
    } else {
      last = std::max<uint32_t>(last, r.last);
    }
  }
  return n;
}

// The address at the start or the end of a prefix, or one past either end
// (nullopt past the ends of the address space).
inline std::optional<net::IpAddr> Edge(const net::Cidr& c, bool end, int step) {
  std::array<uint8_t, 16> b = c.addr().bytes();
  const int bits = c.addr().bits();
  if (end) {
    for (int bit = c.prefix_len(); bit < bits; ++bit) b[bit / 8] |= static_cast<uint8_t>(0x80 >> (bit % 8));
  }
  // step -1 or +1 as a big-endian integer of `bits` bits.
  for (int i = bits / 8 - 1; step != 0 && i >= 0; --i) {
    const int v = b[i] + step;
    b[i] = static_cast<uint8_t>(v & 0xff);
    if (v >= 0 && v <= 0xff) {
      step = 0;
    }
  }
  if (step != 0) return std::nullopt;  // wrapped
  if (c.addr().is_v4()) return net::IpAddr::V4({b[0], b[1], b[2], b[3]});
  net::IpAddr v6 = net::IpAddr::V6(b);
  // ::ffff:a.b.c.d folds to IPv4, a different trie: not a probe of this one.
  if (v6.is_v4()) return std::nullopt;
  return v6;
}

// Probes at every boundary the inputs define: each prefix's first and last
// address and the addresses just outside them, each at every port edge of
// every input (first-1, first, last, last+1) and the ends of the port space.
inline std::vector<Probe> BoundaryProbes(const std::vector<policy::AllowedCidr>& in) {
  std::set<uint32_t> ports = {0, 1, 65535};
  for (const policy::AllowedCidr& a : in) {
    for (const policy::PortRange& r : a.ports) {
      for (int64_t p : {int64_t{r.first} - 1, int64_t{r.first}, int64_t{r.last}, int64_t{r.last} + 1}) {
        if (p >= 0 && p <= 65535) ports.insert(static_cast<uint32_t>(p));
      }
    }
  }
  std::set<net::IpAddr> addrs;
  for (const policy::AllowedCidr& a : in) {
    for (bool end : {false, true}) {
      for (int step : {-1, 0, 1}) {
        if (auto ip = Edge(a.cidr, end, step)) addrs.insert(*ip);
      }
    }
  }
  std::vector<Probe> out;
  for (const net::IpAddr& ip : addrs) {
    for (uint32_t port : ports) out.push_back({ip, port});
  }
  return out;
}

// "" when `built` (what BuildAllowEntries returned for `in`) keeps the
// property over `probes`, else what broke.
inline std::string CheckBuilt(const std::vector<policy::AllowedCidr>& in,
                              const absl::StatusOr<std::vector<AllowEntry>>& built,
                              const std::vector<Probe>& probes) {
  if (!built.ok()) {
    // The documented refusal: "\"<cidr>\": N disjoint port ranges; ...".
    const std::string msg(built.status().message());
    if (built.status().code() != absl::StatusCode::kInvalidArgument) return "unexpected status: " + msg;
    const size_t close = msg.find('"', 1);
    if (msg.empty() || msg[0] != '"' || close == std::string::npos) return "unnamed refusal: " + msg;
    auto cidr = net::Cidr::Parse(msg.substr(1, close - 1));
    if (!cidr.ok()) return "refusal names no CIDR: " + msg;
    const std::optional<size_t> need = CoveringRanges(in, *cidr);
    if (!need || *need <= EGR_MAX_PORT_RANGES) {
      return "refused " + cidr->ToString() + ", which needs " +
             (need ? std::to_string(*need) : std::string("no")) + " ranges: " + msg;
    }
    return "";
  }

  std::set<net::Cidr> distinct;
  for (const policy::AllowedCidr& a : in) distinct.insert(a.cidr);
  std::set<net::Cidr> built_cidrs;
  for (const AllowEntry& e : *built) {
    if (!built_cidrs.insert(e.cidr).second) return "two entries for " + e.cidr.ToString();
    if (e.value.nranges > EGR_MAX_PORT_RANGES) return "too many ranges in " + e.cidr.ToString();
    for (uint32_t i = 0; i < e.value.nranges; ++i) {
      if (e.value.ranges[i].first > e.value.ranges[i].last) return "inverted range in " + e.cidr.ToString();
    }
  }
  if (built_cidrs != distinct) return "entries are not one per distinct input CIDR";

  for (const Probe& p : probes) {
    const bool want = InputAllows(in, p);
    if (LpmAllows(*built, p) != want) {
      return p.addr.ToString() + " port " + std::to_string(p.port) + ": the inputs " +
             (want ? "allow" : "deny") + " it, the longest match " + (want ? "denies" : "allows") + " it";
    }
  }
  return "";
}

inline std::string Check(const std::vector<policy::AllowedCidr>& in,
                         const std::vector<Probe>& probes) {
  return CheckBuilt(in, BuildAllowEntries(in), probes);
}

}  // namespace egressd::maps::oracle
