// The shared world of the privileged tests: one lab (tests/lab) and one
// egressd instance loaded under a pin root unique to this run, unloaded (with
// every pin removed) at exit even when tests fail.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lab.h"

namespace egressd::test {

// Skips, or fails when REQUIRE_BPF=1 (CI), if we cannot load BPF here.
#define EGR_REQUIRE_PRIVILEGES()                                                 \
  do {                                                                           \
    if (!::egressd::lab::RunningAsRootWithSysAdmin()) {                          \
      if (::egressd::test::BpfRequired()) FAIL() << "REQUIRE_BPF=1 but not root"; \
      GTEST_SKIP() << "needs root with CAP_SYS_ADMIN (set REQUIRE_BPF=1 to fail)"; \
    }                                                                            \
  } while (0)

bool BpfRequired();

// Multiplier for time limits in tests: EGR_TIME_SCALE (vmtests sets it under
// software emulation, where programs run several times slower); 1 if unset.
double TimeScale();

class Egressd {
 public:
  // Builds a lab and loads egressd under /sys/fs/bpf/egr-test-<lab id>.
  static absl::StatusOr<std::unique_ptr<Egressd>> Start();
  ~Egressd();

  lab::Lab& lab() { return *lab_; }
  const std::string& pin_root() const { return pin_root_; }

  // egressctl with this instance's pin root, in `netns` (empty: ours).
  lab::RunResult Ctl(const std::vector<std::string>& args, const std::string& netns = "") const;

  // `egressctl run POLICY... -- <hostile> egressd-probe PROBE...` in the lab's
  // client netns: the probe runs as root with only CAP_NET_RAW.
  lab::RunResult RunSandboxed(const std::vector<std::string>& policy,
                              const std::vector<std::string>& probe) const;
  absl::StatusOr<lab::Background> StartSandboxed(const std::vector<std::string>& policy,
                                                 const std::vector<std::string>& probe) const;

  std::vector<std::string> SandboxedArgv(const std::vector<std::string>& policy,
                                         const std::vector<std::string>& probe) const;

 private:
  std::unique_ptr<lab::Lab> lab_;
  std::string pin_root_;
};

// The one instance of a test binary (created on first use, torn down at exit).
Egressd& Shared();

// Result helpers over egressd-probe's JSON lines.
std::vector<lab::ProbeLine> Lines(const lab::RunResult& r);
// The single attempt line (fails the test if there is not exactly one).
lab::ProbeLine Only(const lab::RunResult& r);
bool Ok(const lab::ProbeLine& l);
std::string Errno(const lab::ProbeLine& l);

}  // namespace egressd::test
