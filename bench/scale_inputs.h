// The large declaration the scale test and the benchmark share: distinct
// prefixes of mixed lengths in both families, none of them protected.
#pragma once

#include <cstdio>
#include <string>

namespace egressd::bench {

inline constexpr int kScaleCidrs = 100'000;

// The i-th prefix: /24, host, /64, host, in turn.
inline std::string CidrText(int i) {
  const int a = 11 + i / 65536, b = (i / 256) % 256, c = i % 256;
  switch (i % 4) {
    case 0:
      return std::to_string(a) + "." + std::to_string(b) + "." + std::to_string(c) + ".0/24";
    case 1:
      return std::to_string(a) + "." + std::to_string(b) + "." + std::to_string(c) + ".7";
    case 2: {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "2001:db8:%x:%x::/64", i / 65536, i % 65536);
      return buf;
    }
    default: {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "2001:db8:%x:%x::1", i / 65536, i % 65536);
      return buf;
    }
  }
}

// task.yaml allowing the first n prefixes.
inline std::string TaskYaml(int n) {
  std::string yaml = "egress:\n  allow:\n";
  for (int i = 0; i < n; ++i) yaml += "    - " + CidrText(i) + "\n";
  return yaml;
}

// The stress point's generator: 15 of every 16 prefixes IPv4 (/24 and host in
// turn), the 16th IPv6, so 1,000,000 entries fit egressd's capacities
// (EGR_MAX_ALLOW4 = 1<<20 IPv4 and EGR_MAX_ALLOW6 = 1<<18 IPv6 entries:
// 937,500 and 62,500).  Every prefix distinct, none protected (11.x-26.x).
inline std::string CidrTextV4Heavy(int i) {
  if (i % 16 == 15) return CidrText(4 * (i / 32) + 2 + i / 16 % 2);  // CidrText: i % 4 == 2 or 3 is IPv6
  const int a = 11 + i / 65536, b = (i / 256) % 256, c = i % 256;
  const std::string net = std::to_string(a) + "." + std::to_string(b) + "." + std::to_string(c);
  return i % 2 ? net + ".7" : net + ".0/24";
}

inline std::string TaskYamlV4Heavy(int n) {
  std::string yaml = "egress:\n  allow:\n";
  for (int i = 0; i < n; ++i) yaml += "    - " + CidrTextV4Heavy(i) + "\n";
  return yaml;
}

}  // namespace egressd::bench
