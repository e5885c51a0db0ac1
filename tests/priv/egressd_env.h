// The shared world of the privileged tests: one lab (tests/lab) and one
// egressd instance loaded under a pin root and a runtime directory unique to
// this run, unloaded (every pin and the runtime directory removed) at exit
// even when tests fail.  egressd's node is the lab's node netns: it is loaded
// from there with EGRESSD_NODE_NETNS naming it, egressctl runs there, and
// sandboxes run in a pod's netns (or the node's, where a test says so).
#pragma once

#include <map>
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

using ::egressd::lab::TimeScale;

// Where an egressd instance keeps its pins and its runtime state.
struct InstanceDirs {
  std::string pin_root;     // /sys/fs/bpf/egr-test-<lab id>[-<suffix>]
  std::string runtime_dir;  // /run/egressd-test-<lab id>[-<suffix>]
};

// Unloads instances and removes runtime directories left by test runs whose
// process is gone (a run killed before its teardown). Returns how many.
int SweepStaleInstances();

class Egressd {
 public:
  // Builds a lab and loads egressd from its node netns under dirs().
  static absl::StatusOr<std::unique_ptr<Egressd>> Start();
  ~Egressd();

  lab::Lab& lab() { return *lab_; }
  const std::string& pin_root() const { return dirs_.pin_root; }
  const std::string& runtime_dir() const { return dirs_.runtime_dir; }
  // Another instance of this run's own (a test loads and unloads it itself);
  // swept like this one if the run dies, its runtime dir removed at exit.
  InstanceDirs Other(const std::string& suffix) const;

  // egressctl on this instance (EGRESSD_PIN_ROOT, EGRESSD_RUNTIME_DIR,
  // EGRESSD_NODE_NETNS set), run in the node netns as egressd's operator is.
  lab::RunResult Ctl(const std::vector<std::string>& args) const;
  // The same in another netns (a pod's).
  lab::RunResult CtlIn(const std::string& netns, const std::vector<std::string>& args) const;
  // egressctl on another instance: --pin-root/--runtime-dir given, in the node netns.
  static lab::RunResult CtlAt(const lab::Lab& lab, const InstanceDirs& dirs,
                              const std::vector<std::string>& args);

  // `egressctl run --host-root POLICY... -- <hostile> egressd-probe PROBE...`
  // in pod 0's netns (or `netns`): the probe runs as the node's root with
  // only CAP_NET_RAW.
  lab::RunResult RunSandboxed(const std::vector<std::string>& policy,
                              const std::vector<std::string>& probe) const;
  lab::RunResult RunSandboxedIn(const std::string& netns, const std::vector<std::string>& policy,
                                const std::vector<std::string>& probe) const;
  absl::StatusOr<lab::Background> StartSandboxed(const std::vector<std::string>& policy,
                                                 const std::vector<std::string>& probe) const;

  std::vector<std::string> SandboxedArgv(const std::vector<std::string>& policy,
                                         const std::vector<std::string>& probe) const;
  // The environment every egressctl of this instance gets.
  std::map<std::string, std::string> CtlEnv() const;

 private:
  lab::RunSpec CtlSpec(const std::string& netns, std::vector<std::string> argv) const;

  std::unique_ptr<lab::Lab> lab_;
  InstanceDirs dirs_;
  mutable std::vector<InstanceDirs> others_;
};

// The one instance of a test binary (created on first use, torn down at exit).
Egressd& Shared();

// Result helpers over egressd-probe's JSON lines.
std::vector<lab::ProbeLine> Lines(const lab::RunResult& r);
// The single attempt line (fails the test if there is not exactly one).
lab::ProbeLine Only(const lab::RunResult& r);
bool Ok(const lab::ProbeLine& l);
// A raw or packet attack was really made: its socket was created and its
// send returned (whatever it returned). Without this a refused socket()
// would pass for a defended destination ("nothing arrived"). `line` is a
// ProbeLine variable (evaluated more than once).
bool SocketMadeAndSent(const lab::ProbeLine& l);
#define EXPECT_ATTEMPTED(line, context)                                           \
  EXPECT_TRUE(::egressd::test::SocketMadeAndSent(line))                          \
      << "the attack never reached a send (socket " << (line)["socket"] << ", stage " \
      << (line)["stage"] << ", errno " << (line)["errno"] << "): " << (context)
std::string Errno(const lab::ProbeLine& l);

// The MAC of the node's end of pod 0's veth (where a pod's frames go), read
// with `ip -n` (a /sys path read through nsenter would show the caller's
// namespace); empty, with a test failure, when it cannot be read.
std::string PodRouterMac(lab::Lab& lab);

// The program id behind each pinned link under `pins`/links, by link name:
// all of them, or only those in `names` (read with bpftool from the kernel).
std::map<std::string, uint32_t> LinkPrograms(const std::string& pins,
                                             const std::vector<std::string>& names = {});

}  // namespace egressd::test
