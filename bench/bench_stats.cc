#include "bench_stats.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>

namespace egressd::bench {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Quantile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * v.size()));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

Interval MedianCi(std::vector<double> v) {
  if (v.empty()) return {0, 0, 0};
  std::sort(v.begin(), v.end());
  const int n = static_cast<int>(v.size());
  std::vector<double> cdf(n + 1);
  double acc = 0;
  for (int k = 0; k <= n; ++k) {
    acc += std::exp(std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1) - n * std::log(2.0));
    cdf[k] = acc;
  }
  // Largest j with P(X < j) <= 2.5%: interval [v[j], v[n-1-j]].
  int j = 0;
  while (j + 1 < n / 2 && cdf[j] <= 0.025) ++j;
  const double coverage = 1 - 2 * (j == 0 ? 0 : cdf[j - 1]);
  return {v[j], v[n - 1 - j], j == 0 ? 1 - 2 * std::pow(0.5, n) : coverage};
}

json Summary(const std::vector<double>& v, bool with_p99) {
  const Interval ci = MedianCi(v);
  json j = {{"median", Median(v)}, {"ci95", {ci.lo, ci.hi}}, {"coverage", ci.coverage}, {"samples", v}};
  if (with_p99) j["p99"] = Quantile(v, 0.99);
  return j;
}

Interleaved Interleave(int rounds, const std::vector<std::string>& names,
                       const std::function<Measured(int enforcer)>& run) {
  Interleaved r;
  const int n = static_cast<int>(names.size());
  for (int round = 0; round < rounds; ++round) {
    std::vector<Measured> m(n);
    for (int k = 0; k < n; ++k) {
      const int idx = (k + round) % n;  // rotated order
      m[idx] = run(idx);
      if (!m[idx].ok) r.all_ok = false;
      r.value[names[idx]].push_back(m[idx].value);
      r.cpu[names[idx]].push_back(m[idx].cpu);
    }
    for (int idx = 1; idx < n; ++idx) {
      r.value_ratio[names[idx]].push_back(m[0].value > 0 ? m[idx].value / m[0].value : 0);
      r.cpu_ratio[names[idx]].push_back(m[0].cpu > 0 ? m[idx].cpu / m[0].cpu : 0);
    }
  }
  return r;
}

void Store(const Interleaved& r, const std::vector<std::string>& names, json& cell, const std::string& value_key,
           const std::string& cpu_key) {
  for (size_t i = 0; i < names.size(); ++i) {
    cell[value_key][names[i]] = Summary(r.value.at(names[i]));
    cell[cpu_key][names[i]] = Summary(r.cpu.at(names[i]));
    if (i == 0) continue;
    cell[value_key + "_ratio"][names[i]] = Summary(r.value_ratio.at(names[i]));
    cell[cpu_key + "_ratio"][names[i]] = Summary(r.cpu_ratio.at(names[i]));
  }
}

namespace {
const std::vector<std::string> kThree(std::begin(kEnforcers), std::end(kEnforcers));
}  // namespace

Interleaved Interleave(int rounds, const std::function<Measured(int enforcer)>& run) {
  return Interleave(rounds, kThree, run);
}

void Store(const Interleaved& r, json& cell, const std::string& value_key, const std::string& cpu_key) {
  Store(r, kThree, cell, value_key, cpu_key);
}

}  // namespace egressd::bench
