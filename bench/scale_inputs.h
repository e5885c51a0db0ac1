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

}  // namespace egressd::bench
