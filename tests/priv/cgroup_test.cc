// Test 6 of the foundation issue, plus loopback: who is a sandbox.  A child
// cgroup a sandbox makes is still the sandbox; an unregistered cgroup is
// untouched; below a contained root an unregistered cgroup gets nothing until
// a policy arrives.  Loopback is free inside a sandbox's own netns and
// governed in the node's.
#include <string>
#include <vector>

#include "egressd_env.h"
#include "loopback_listener.h"

namespace egressd::test {
namespace {

using lab::Lab;
using namespace egressd::lab;

class Cgroups : public testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    Shared().lab().ResetCounters();
  }
  void TearDown() override {
    for (const auto& cg : registered_) Shared().Ctl({"sandbox", "remove", "--cgroup", cg});
  }
  Lab& lab() { return Shared().lab(); }
  std::string Cgroup(const std::string& rel) {
    auto cg = lab().MakeCgroup(rel + "-" + std::to_string(counter_++));
    EXPECT_TRUE(cg.ok()) << cg.status();
    return cg.ok() ? *cg : "";
  }
  void Register(const std::string& cg, std::vector<std::string> policy, const char* verb = "add") {
    std::vector<std::string> args = {"sandbox", verb, "--cgroup", cg};
    args.insert(args.end(), policy.begin(), policy.end());
    RunResult r = Shared().Ctl(args);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    registered_.push_back(cg);
  }
  ProbeLine ProbeIn(const std::string& cg, const std::vector<std::string>& args) {
    RunResult r = lab().Probe(args, cg, /*hostile=*/true);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? ProbeLine{} : lines[0];
  }
  std::vector<std::string> registered_;
  static inline int counter_ = 0;
};

TEST_F(Cgroups, ChildCgroupMadeInsideTheSandboxIsStillEnforced) {
  std::string inside = Lab::cgroup2_root() + "/escape-attempt";
  RunResult r = Shared().RunSandboxed(
      {"--egress", kPublicA4},
      {"mkdir", inside, "--then", "join-cgroup", inside, "--then", "tcp", kImds4, "80", "--then",
       "raw-icmp", kImds4, "--then", "tcp", kPublicA4, "80"});
  auto lines = Lines(r);
  ASSERT_EQ(lines.size(), 5u) << r.Describe();
  EXPECT_EQ(lines[0]["result"], "ok") << "mkdir: " << r.Describe();
  EXPECT_EQ(lines[1]["result"], "ok") << "join: " << r.Describe();
  EXPECT_EQ(lines[2]["errno"], "EPERM") << r.Describe();
  EXPECT_ATTEMPTED(lines[3], r.Describe());
  EXPECT_EQ(lines[4]["result"], "ok") << r.Describe();  // positive control, same child cgroup
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().PacketsTo(kImds4), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(kPublicA4, 80), 1u) << lab().CountersSummary();
}

TEST_F(Cgroups, UnregisteredCgroupIsUntouched) {
  std::string free_cg = Cgroup("free");
  EXPECT_TRUE(Ok(ProbeIn(free_cg, {"tcp", kImds4, "80"})));
  ProbeLine raw = ProbeIn(free_cg, {"raw-icmp", kImds6});
  EXPECT_ATTEMPTED(raw, "raw-icmp from an unregistered cgroup");
  EXPECT_EQ(raw["echo"], "true");
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kImds4, 80) == 1; })) << lab().CountersSummary();
}

TEST_F(Cgroups, RegisteredCgroupAndItsDescendantsAreJudged) {
  std::string sb = Cgroup("sb");
  Register(sb, {"--floor", "airgapped", "--egress", kPublicD4});
  auto child = lab().MakeCgroup(sb.substr(lab().cgroup_base().size() + 1) + "/deep/deeper");
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(ProbeIn(*child, {"tcp", kPublicA4, "80"})["errno"], "EPERM");
  EXPECT_TRUE(Ok(ProbeIn(*child, {"tcp", kPublicD4, "80"})));
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().PacketsTo(kPublicA4), 0u);
}

TEST_F(Cgroups, UnregisteredCgroupBelowContainedRootGetsNoEgressUntilAPolicyArrives) {
  std::string root = Cgroup("contained");
  Register(root, {}, "contain");
  auto worker = lab().MakeCgroup(root.substr(lab().cgroup_base().size() + 1) + "/worker");
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_EQ(ProbeIn(*worker, {"tcp", kPublicA4, "80"})["errno"], "EPERM");
  EXPECT_EQ(ProbeIn(*worker, {"udp-sendto", kPublicA6, "7000"})["errno"], "EPERM");
  ProbeLine raw = ProbeIn(*worker, {"raw-icmp", kPublicB4});
  EXPECT_ATTEMPTED(raw, "raw-icmp below a contained root");
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().PacketsTo(kPublicA4), 0u);
  EXPECT_EQ(lab().PacketsTo(kPublicA6), 0u);
  EXPECT_EQ(lab().PacketsTo(kPublicB4), 0u);

  // The policy arrives: the worker now gets exactly what it declares.
  Register(*worker, {"--egress", kPublicA4});
  EXPECT_TRUE(Ok(ProbeIn(*worker, {"tcp", kPublicA4, "80"})));
  EXPECT_EQ(ProbeIn(*worker, {"tcp", kPublicB4, "80"})["errno"], "EPERM");
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kPublicA4, 80) == 1; }));
}

TEST_F(Cgroups, LoopbackInsideTheSandboxNetnsIsAlwaysAllowed) {
  LoopbackListener lo(lab().client_netns());
  ASSERT_TRUE(lo.ready());
  const std::string tcp = std::to_string(lo.tcp_port()), udp = std::to_string(lo.udp_port());
  RunResult r = Shared().RunSandboxed({"--floor", "airgapped"},
                                      {"tcp", "127.0.0.1", tcp, "--then", "tcp", "::1", tcp, "--then",
                                       "udp-sendto", "127.0.0.1", udp, "--then", "udp-connected", "::1", udp,
                                       "--then", "tcp", kPublicA4, "80"});
  auto lines = Lines(r);
  ASSERT_EQ(lines.size(), 5u) << r.Describe();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(lines[i]["result"], "ok") << r.Describe();
  EXPECT_EQ(lines[4]["errno"], "EPERM") << "airgapped still denies the lab host: " << r.Describe();
  EXPECT_TRUE(Lab::WaitFor([&] { return lo.tcp_accepts() == 2 && lo.udp_datagrams() == 2; }));
}

TEST_F(Cgroups, LoopbackInTheNodeNetnsIsGovernedByThePolicy) {
  // egressd's node netns is the lab's node: a sandbox running there reaches
  // the node's own services over loopback only as its policy allows.
  LoopbackListener lo(lab().node_netns());
  ASSERT_TRUE(lo.ready());
  std::string sb = Cgroup("node-lo");
  Register(sb, {"--floor", "airgapped"});
  RunSpec spec;
  spec.argv = {BinaryPath("egressd-probe"), "tcp", "127.0.0.1", std::to_string(lo.tcp_port()), "--then",
               "udp-sendto", "127.0.0.1", std::to_string(lo.udp_port())};
  spec.netns = lab().node_netns();
  spec.cgroup = sb;
  spec.hostile = true;
  RunResult r = lab::Run(spec);
  auto lines = Lines(r);
  ASSERT_EQ(lines.size(), 2u) << r.Describe();
  EXPECT_EQ(lines[0]["errno"], "EPERM") << r.Describe();
  EXPECT_EQ(lines[1]["errno"], "EPERM") << r.Describe();
  // Positive control after the denied attempts, on the same loopback path,
  // from an unregistered cgroup: once it has arrived, a denied packet would
  // have arrived before it, so exactly one of each means none did.
  spec.cgroup = Cgroup("node-lo-free");
  RunResult control = lab::Run(spec);
  ASSERT_EQ(Lines(control).size(), 2u) << control.Describe();
  EXPECT_TRUE(Ok(Lines(control)[0])) << control.Describe();
  EXPECT_TRUE(Lab::WaitFor([&] { return lo.tcp_accepts() >= 1 && lo.udp_datagrams() >= 1; }));
  EXPECT_EQ(lo.tcp_accepts(), 1u);
  EXPECT_EQ(lo.udp_datagrams(), 1u);
}

TEST_F(Cgroups, LoopbackOfTheTestsOwnNetnsIsNotTheNodes) {
  // The root netns the tests run in is not egressd's node here: a sandbox
  // there is in a foreign netns, whose loopback is its own.
  LoopbackListener lo("");
  ASSERT_TRUE(lo.ready());
  std::string sb = Cgroup("root-lo");
  Register(sb, {"--floor", "airgapped"});
  RunSpec spec;
  spec.argv = {BinaryPath("egressd-probe"), "tcp", "127.0.0.1", std::to_string(lo.tcp_port())};
  spec.cgroup = sb;
  spec.hostile = true;
  RunResult r = lab::Run(spec);
  ASSERT_EQ(Lines(r).size(), 1u) << r.Describe();
  EXPECT_TRUE(Ok(Lines(r)[0])) << r.Describe();
  EXPECT_TRUE(Lab::WaitFor([&] { return lo.tcp_accepts() == 1; }));
}

}  // namespace
}  // namespace egressd::test
