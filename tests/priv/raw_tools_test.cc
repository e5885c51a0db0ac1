// Issue 8's positive controls: the raw-socket tools a pod legitimately runs
// keep working under containment, and stay judged. Each runs as the hostile
// client (the node's root with only CAP_NET_RAW; tcpdump as nobody with only
// CAP_NET_RAW, see there) in a registered pod cgroup in pod 0's netns: tcpdump sees the pod's own traffic through a
// receive-only packet socket; ping and `nmap -sS --send-ip -Pn` reach an
// allowed lab host and send nothing to a denied one, counted at the lab.
//
// Where the bpf LSM is not in force the pod is registered with the test
// environment's opt-out (egressd_env.cc): ping and nmap are still judged by
// the skb backstop; tcpdump's packet socket is then simply uncontained.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "egressd_env.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;

class RawTools : public testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    lab().ResetCounters();
    auto cg = lab().MakeCgroup("rawtools-" + std::to_string(counter_++));
    ASSERT_TRUE(cg.ok()) << cg.status();
    cgroup_ = *cg;
    // Allowed: kPublicA4 only; kPublicB4 is denied (airgapped).
    RunResult add = Shared().Ctl({"sandbox", "add", "--cgroup", cgroup_, "--floor", "airgapped", "--egress",
                                  kPublicA4, "--netns", lab().client_netns()});
    ASSERT_EQ(add.exit_code, 0) << add.Describe();
  }
  void TearDown() override {
    if (!cgroup_.empty()) Shared().Ctl({"sandbox", "remove", "--cgroup", cgroup_});
  }
  Lab& lab() { return Shared().lab(); }
  RunSpec InPod(std::vector<std::string> argv) {
    RunSpec s;
    s.argv = std::move(argv);
    s.netns = lab().client_netns();
    s.cgroup = cgroup_;
    s.hostile = true;
    s.timeout = std::chrono::milliseconds(static_cast<int>(20000 * TimeScale()));
    return s;
  }
  std::string cgroup_;
  static inline int counter_ = 0;
};

TEST_F(RawTools, TcpdumpInThePodsNetnsSeesThePodsTraffic) {
  // Run as root, tcpdump drops to its own user, which needs CAP_SETUID and
  // CAP_SETGID: here it runs as nobody holding CAP_NET_RAW alone (ambient),
  // what it would keep after that drop.
  RunSpec spec = InPod({"setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--inh-caps",
                        "-all,+net_raw", "--ambient-caps", "-all,+net_raw", "--bounding-set", "-all,+net_raw", "--",
                        "tcpdump", "-i", lab().client_ifname(), "-n", "-l", "-c", "1", "--immediate-mode",
                        "udp and dst host " + std::string(kPublicA4) + " and dst port 7000"});
  spec.hostile = false;
  auto dump = lab::Start(spec);
  ASSERT_TRUE(dump.ok()) << dump.status();
  ASSERT_TRUE(Lab::WaitFor([&] { return absl::StrContains(dump->err(), "listening on"); },
                           std::chrono::milliseconds(static_cast<int>(10000 * TimeScale()))))
      << dump->err();
  RunResult sent = lab::Run(InPod({BinaryPath("egressd-probe"), "udp-sendto", kPublicA4, "7000"}));
  EXPECT_EQ(Only(sent)["echo"], "true") << sent.Describe();
  auto line = dump->ReadOutLine(std::chrono::milliseconds(static_cast<int>(5000 * TimeScale())));
  ASSERT_TRUE(line.has_value()) << dump->err();
  EXPECT_TRUE(absl::StrContains(*line, std::string(kPublicA4) + ".7000")) << *line;
  RunResult done = dump->Wait();
  EXPECT_EQ(done.exit_code, 0) << done.Describe();
}

TEST_F(RawTools, PingReachesTheAllowedHostAndSendsNothingToADeniedOne) {
  RunResult denied = lab::Run(InPod({"ping", "-n", "-c", "1", "-W", "1", kPublicB4}));
  EXPECT_NE(denied.exit_code, 0) << denied.Describe();
  RunResult allowed = lab::Run(InPod({"ping", "-n", "-c", "1", "-W", "2", kPublicA4}));
  EXPECT_EQ(allowed.exit_code, 0) << allowed.Describe();
  EXPECT_TRUE(absl::StrContains(allowed.out, "1 received")) << allowed.Describe();
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_GE(lab().PacketsTo(kPublicA4, kProtoIcmp), 1u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kPublicB4), 0u) << "ping sent to a denied host: " << lab().CountersSummary();
  std::cout << "[ figure ] ping: " << lab().PacketsTo(kPublicA4, kProtoIcmp) << " ICMP packet(s) at the allowed host, "
            << lab().PacketsTo(kPublicB4) << " packet(s) at the denied one\n";
}

TEST_F(RawTools, NmapSynScanReachesTheAllowedHostAndSendsNothingToADeniedOne) {
  const std::vector<std::string> nmap = {"nmap", "-n", "-sS", "--send-ip", "-Pn", "-p", "443", "--max-retries", "1"};
  std::vector<std::string> denied_argv = nmap, allowed_argv = nmap;
  denied_argv.push_back(kPublicB4);
  allowed_argv.push_back(kPublicA4);
  RunResult denied = lab::Run(InPod(denied_argv));
  EXPECT_FALSE(absl::StrContains(denied.out, "443/tcp open")) << denied.Describe();
  RunResult allowed = lab::Run(InPod(allowed_argv));
  EXPECT_EQ(allowed.exit_code, 0) << allowed.Describe();
  EXPECT_TRUE(absl::StrContains(allowed.out, "443/tcp open")) << allowed.Describe();
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_GE(lab().PacketsTo(kPublicA4, kProtoTcp), 1u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kPublicB4), 0u) << "nmap sent to a denied host: " << lab().CountersSummary();
  std::cout << "[ figure ] nmap -sS: " << lab().PacketsTo(kPublicA4, kProtoTcp) << " TCP packet(s) at the allowed host, "
            << lab().PacketsTo(kPublicB4) << " packet(s) at the denied one\n";
}

}  // namespace
}  // namespace egressd::test
