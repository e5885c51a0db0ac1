// How long the compiler takes on 100,000 CIDRs, against the budget the
// README states ("compiles in well under a second"): the figures the unit
// test no longer asserts, because a loaded CI host would fail a wall-clock
// bound with no change in egressd.  Run by hand on a quiet machine, from an
// optimized build:
//
//   cmake --build build --target policy_bench && build/bench/policy_bench [runs]
//
// Prints each stage's best and median of `runs` (default 5); exits 1 when the
// best whole path (YAML text to compiled policy) is over the budget.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench/scale_inputs.h"
#include "userspace/policy/compiler.h"
#include "userspace/policy/declarations.h"
#include "userspace/policy/deployment_config.h"
#include "userspace/policy/policy_inputs.h"

namespace {

using namespace egressd;
using Clock = std::chrono::steady_clock;

constexpr double kBudgetSeconds = 1.0;

struct Figure {
  double best;
  double median;
};

// Runs `stage` `runs` times; a stage that fails ends the benchmark.
Figure Measure(int runs, const std::function<bool()>& stage) {
  std::vector<double> s;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = Clock::now();
    if (!stage()) std::exit(2);
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(s.begin(), s.end());
  return {s.front(), s[s.size() / 2]};
}

void Print(const char* what, const Figure& f) {
  std::printf("%-44s best %.3f s, median %.3f s\n", what, f.best, f.median);
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const int n = bench::kScaleCidrs;
  const std::string yaml = bench::TaskYaml(n);

  policy::SandboxInputs in;
  in.task = policy::Declaration{};
  for (int i = 0; i < n; ++i) {
    in.task->allow.push_back({bench::CidrText(i), "egress.allow[" + std::to_string(i) + "]"});
  }
  const policy::DeploymentConfig deployment = policy::DefaultDeployment();

  std::printf("%d CIDRs, %zu bytes of task.yaml, %d runs\n", n, yaml.size(), runs);
  Print("compile (declaration already parsed)", Measure(runs, [&] {
          auto p = policy::Compile(deployment, in);
          if (!p.ok()) std::fprintf(stderr, "policy_bench: %s\n", std::string(p.status().message()).c_str());
          return p.ok() && p->allowed.size() == static_cast<size_t>(n);
        }));
  Print("parse task.yaml", Measure(runs, [&] {
          auto d = policy::ParseTaskDeclaration(yaml, "task.yaml");
          return d.ok() && d->has_value();
        }));
  policy::PolicyInputs whole;
  whole.task = policy::InputText::Inline("task.yaml", yaml);
  const Figure f = Measure(runs, [&] {
    auto p = policy::CompileInputs(whole);
    if (!p.ok()) std::fprintf(stderr, "policy_bench: %s\n", std::string(p.status().message()).c_str());
    return p.ok() && p->allowed.size() == static_cast<size_t>(n);
  });
  Print("CompileInputs (task.yaml text to policy)", f);
  if (f.best >= kBudgetSeconds) {
    std::printf("over budget: %.3f s >= %.1f s\n", f.best, kBudgetSeconds);
    return 1;
  }
  std::printf("within budget (%.1f s)\n", kBudgetSeconds);
  return 0;
}
