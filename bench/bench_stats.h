// Statistics and small helpers shared by enforcer_bench's files: medians with
// a distribution-free 95% interval, and the rotated interleaving of the three
// enforcers every measurement uses.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace egressd::bench {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
std::string Slurp(const std::string& path);

double Median(std::vector<double> v);
// The p-th quantile (0..1) by nearest rank.
double Quantile(std::vector<double> v, double p);

// The distribution-free interval for the median: order statistics (l, u) of
// n samples such that P(l <= median <= u) >= 95% under Binomial(n, 1/2); with
// fewer than 6 samples no such pair exists and the full range is given with
// its real coverage.
struct Interval {
  double lo, hi, coverage;
};
Interval MedianCi(std::vector<double> v);

// {"median", "ci95", "coverage", "samples"}; with_p99 adds "p99".
json Summary(const std::vector<double>& v, bool with_p99 = false);

// The three enforcers, in the order their pods are indexed.
inline constexpr const char* kEnforcers[] = {"none", "nftables", "egressd"};

// One measurement under one enforcer: a figure (higher or lower is better,
// the caller knows) and the CPU it cost per unit.
struct Measured {
  double value = 0;
  double cpu = 0;
  bool ok = false;
};

// `rounds` rounds of the three enforcers, the order rotated every round; the
// ratios are to the no-filter run of the same round, because the machine is
// shared and only a round's own floor is comparable.
struct Interleaved {
  std::map<std::string, std::vector<double>> value, cpu, value_ratio, cpu_ratio;
  bool all_ok = true;
};
Interleaved Interleave(int rounds, const std::function<Measured(int enforcer)>& run);
// Writes <value_key>, <cpu_key> (per enforcer) and <value_key>_ratio,
// <cpu_key>_ratio (nftables, egressd) into cell.
void Store(const Interleaved& r, json& cell, const std::string& value_key, const std::string& cpu_key);
// The same over other enforcers (bench/veth_bench.cc): `names` in pod order,
// names[0] the no-filter floor every ratio is to.
Interleaved Interleave(int rounds, const std::vector<std::string>& names,
                       const std::function<Measured(int enforcer)>& run);
void Store(const Interleaved& r, const std::vector<std::string>& names, json& cell, const std::string& value_key,
           const std::string& cpu_key);

}  // namespace egressd::bench
