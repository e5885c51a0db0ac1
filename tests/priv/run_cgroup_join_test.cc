// How `egressctl run` puts its command in the sandbox's cgroup
// (userspace/sandbox/isolation.cc): a child cloned into it (clone3 with
// CLONE_INTO_CGROUP), so nothing is moved there; a move (a write to
// cgroup.procs) waits out an RCU grace period, 7-16 ms of every run here.
// Where clone3 is refused (a container runtime's seccomp profile answers
// ENOSYS), run moves its child by cgroup.procs as before. Either way the
// command is in the sandbox's cgroup (the root of its cgroup namespace) and
// judged by its policy: the allowed address connects and arrives, the
// denied one is refused at connect and nothing of it arrives.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "egressd_env.h"
#include "lab.h"

namespace egressd::test {
namespace {

using lab::BinaryPath;
using lab::kPublicA4;
using lab::kPublicD4;
using lab::ProbeLine;
using lab::RunResult;
using lab::RunSpec;

class RunCgroupJoin : public testing::TestWithParam<bool> {};

TEST_P(RunCgroupJoin, TheCommandIsInTheSandboxsCgroupAndJudgedByItsPolicy) {
  EGR_REQUIRE_PRIVILEGES();
  const bool refuse_clone3 = GetParam();
  lab::Lab& lab = Shared().lab();
  lab.ResetCounters();
  const std::string probe = BinaryPath("egressd-probe");
  std::vector<std::string> argv;
  if (refuse_clone3) argv = {probe, "refuse-clone3", "--then", "exec", "--"};
  for (const std::string& a :
       std::vector<std::string>{BinaryPath("egressctl"), "run", "--host-root", "--egress", kPublicA4, "--", probe,
                                "info", "--then", "tcp", kPublicA4, "80", "--then", "tcp", kPublicD4, "80"}) {
    argv.push_back(a);
  }
  RunSpec spec;
  spec.argv = argv;
  spec.netns = lab.client_netns();
  spec.env = Shared().CtlEnv();
  spec.timeout = std::chrono::milliseconds(static_cast<int64_t>(30000 * TimeScale()));
  RunResult r = lab::Run(spec);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  std::vector<ProbeLine> lines = Lines(r);
  if (refuse_clone3) {
    ASSERT_FALSE(lines.empty()) << r.Describe();
    EXPECT_EQ(lines.front().at("op"), "refuse-clone3");
    ASSERT_TRUE(Ok(lines.front())) << "clone3 refused for egressctl and all below it: " << r.Describe();
    lines.erase(lines.begin());
  }
  ASSERT_EQ(lines.size(), 3u) << r.Describe();
  EXPECT_EQ(lines[0].at("op"), "info");
  EXPECT_EQ(lines[0].at("cgroup"), "/") << "the command sits at the root of its cgroup namespace: the sandbox's cgroup";
  EXPECT_TRUE(Ok(lines[1])) << "allowed: " << r.Describe();
  EXPECT_EQ(lines[2].at("errno"), "EPERM") << "denied: " << r.Describe();
  ASSERT_TRUE(lab.Drain().ok());
  EXPECT_EQ(lab.TcpAccepts(kPublicA4, 80), 1u) << lab.CountersSummary();
  EXPECT_EQ(lab.FlowsOpenedTo(kPublicD4), 0u) << "nothing of the denied connect arrived: " << lab.CountersSummary();
}

INSTANTIATE_TEST_SUITE_P(Join, RunCgroupJoin, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool>& i) {
                           return i.param ? std::string("ByCgroupProcsWhereClone3IsRefused")
                                          : std::string("ClonedIntoTheCgroup");
                         });

}  // namespace
}  // namespace egressd::test
