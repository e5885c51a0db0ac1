// Issue 9, items 4, 5 and 7: destinations a hostile sandbox (root, only
// CAP_NET_RAW) names in forms the hooks used to misjudge.  Multicast joins
// make the kernel itself announce a group of the sandbox's choosing on the
// link (IGMP/MLD), SO_BROADCAST opens a socket to every host of a subnet,
// embedded-IPv4 forms of a protected address reach it through a tunnel or
// translator, and the unspecified address is loopback.  Each denial is
// counted where it would arrive (the world side of the node's uplink: the
// sandboxes here run in the node netns, whose uplink is that link), next to
// a positive control on the same path.
#include <string>
#include <vector>

#include "egressd_env.h"
#include "loopback_listener.h"

namespace egressd::test {
namespace {

using lab::Lab;
using namespace egressd::lab;  // addresses and protocol numbers

constexpr int kProtoIgmp = 2;
constexpr const char* kUplinkBroadcast = "203.0.113.3";  // 203.0.113.0/30

class Forms : public testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    lab().ResetCounters();
  }
  Lab& lab() { return Shared().lab(); }
  // One attempt by a sandbox in the node netns.
  ProbeLine Node(const std::vector<std::string>& policy, const std::vector<std::string>& probe) {
    RunResult r = Shared().RunSandboxedIn(lab().node_netns(), policy, probe);
    last_ = r.Describe();
    EXPECT_EQ(r.exit_code, 0) << last_;
    auto l = Lines(r);
    EXPECT_EQ(l.size(), 1u) << last_;
    return l.empty() ? ProbeLine{} : l[0];
  }
  // The same from pod 0.
  ProbeLine Pod(const std::vector<std::string>& policy, const std::vector<std::string>& probe) {
    RunResult r = Shared().RunSandboxed(policy, probe);
    last_ = r.Describe();
    EXPECT_EQ(r.exit_code, 0) << last_;
    auto l = Lines(r);
    EXPECT_EQ(l.size(), 1u) << last_;
    return l.empty() ? ProbeLine{} : l[0];
  }
  // The node speaks IGMPv2 and MLDv1 here, whose reports are addressed to
  // the group itself (v3/v2 reports all go to one address and would mix one
  // test's groups with another's retransmissions).
  void ForceGroupReportsToTheGroup() {
    for (const char* key : {"net.ipv4.conf.all.force_igmp_version", "net.ipv6.conf.all.force_mld_version"}) {
      auto old = lab::GetSysctl(lab().node_netns(), key);
      ASSERT_TRUE(old.ok()) << old.status();
      restore_.push_back({key, *old});
    }
    ASSERT_TRUE(lab::SetSysctl(lab().node_netns(), "net.ipv4.conf.all.force_igmp_version", "2").ok());
    ASSERT_TRUE(lab::SetSysctl(lab().node_netns(), "net.ipv6.conf.all.force_mld_version", "1").ok());
  }
  void TearDown() override {
    for (const auto& [key, value] : restore_) (void)lab::SetSysctl(lab().node_netns(), key, value);
  }
  // IGMP and MLD reports naming `group` that reached the world.
  uint64_t IgmpReports(const std::string& group) { return lab().PacketsTo(group, kProtoIgmp); }
  uint64_t MldReports(const std::string& group) { return lab().PacketsTo(group, kProtoIcmp6); }
  std::vector<std::pair<std::string, std::string>> restore_;
  std::string Why() { return last_ + "\n" + lab().CountersSummary(); }
  std::string last_;
};

// ---- item 4: multicast and broadcast -----------------------------------------------

TEST_F(Forms, JoiningAGroupThePolicyAllowsSendsReportsOnTheLink) {
  ForceGroupReportsToTheGroup();
  // Positive control: the same joins, allowed, are announced on the uplink.
  const std::string up = lab().node_uplink_ifname();
  EXPECT_TRUE(Ok(Node({"--floor", "airgapped", "--egress", "239.1.2.4"},
                      {"mcast-join", "239.1.2.4", up}))) << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return IgmpReports("239.1.2.4") > 0; })) << Why();
  EXPECT_TRUE(Ok(Node({"--floor", "airgapped", "--egress", "ff0e::4242"},
                      {"mcast-join", "ff0e::4242", up}))) << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return MldReports("ff0e::4242") > 0; })) << Why();
}

TEST_F(Forms, JoiningAGroupThePolicyDeniesFailsAndNothingIsAnnounced) {
  ForceGroupReportsToTheGroup();
  const std::string up = lab().node_uplink_ifname();
  struct Case {
    std::vector<std::string> policy;
    std::vector<std::string> probe;
  };
  const std::vector<std::string> airgapped = {"--floor", "airgapped"};
  const std::vector<std::string> hosted = {"--floor", "hosted"};
  const std::vector<Case> cases = {
      {airgapped, {"mcast-join", "239.1.2.3", up}},
      {airgapped, {"mcast-join", "239.1.2.3", up, "--api", "group"}},
      {airgapped, {"mcast-join", "232.1.2.3", up, "--api", "source", "--source", kWorldLinkV4}},
      {airgapped, {"mcast-join", "232.1.2.3", up, "--api", "source-group", "--source", kWorldLinkV4}},
      {airgapped, {"mcast-join", "ff0e::4243", up}},
      {airgapped, {"mcast-join", "ff0e::4243", up, "--api", "group"}},
      {airgapped, {"mcast-join", "ff3e::4243", up, "--api", "source-group", "--source", kWorldLinkV6}},
      {hosted, {"mcast-join", "239.1.2.3", up}},
      {hosted, {"mcast-join", "ff0e::4243", up}},
      // A declared scope that names something else does not allow the group.
      {{"--egress", kPublicA4}, {"mcast-join", "239.1.2.3", up, "--api", "group"}},
  };
  for (const Case& c : cases) {
    ProbeLine l = Node(c.policy, c.probe);
    EXPECT_EQ(Errno(l), "EPERM") << last_;
    EXPECT_EQ(l["stage"], "setsockopt") << last_;
  }
  ASSERT_TRUE(lab().Drain(lab().node_netns()).ok());
  EXPECT_EQ(IgmpReports("239.1.2.3") + IgmpReports("232.1.2.3"), 0u) << Why();
  EXPECT_EQ(MldReports("ff0e::4243") + MldReports("ff3e::4243"), 0u) << Why();
}

TEST_F(Forms, BroadcastIsRefusedWherever255IsDenied) {
  // hosted protects 255.255.255.255/32: SO_BROADCAST, without which no
  // socket sends to a broadcast address (a subnet's too), fails.
  ProbeLine l = Node({"--floor", "hosted"}, {"so-broadcast", kUplinkBroadcast, "7000"});
  EXPECT_EQ(Errno(l), "EPERM") << last_;
  EXPECT_EQ(l["stage"], "setsockopt") << last_;
  EXPECT_EQ(Errno(Node({"--floor", "airgapped"}, {"so-broadcast", kUplinkBroadcast, "7000"})), "EPERM")
      << last_;
  EXPECT_EQ(Errno(Node({"--floor", "hosted"}, {"udp-sendto", "255.255.255.255", "7000"})), "EPERM")
      << last_;
  ASSERT_TRUE(lab().Drain(lab().node_netns()).ok());
  EXPECT_EQ(lab().PacketsTo(kUplinkBroadcast), 0u) << Why();
  // Positive control: the connected floor lets the broadcast onto the link.
  EXPECT_TRUE(Ok(Node({}, {"so-broadcast", kUplinkBroadcast, "7000"}))) << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().PacketsTo(kUplinkBroadcast) == 1; })) << Why();
}

// ---- item 5: embedded IPv4 ----------------------------------------------------------

TEST_F(Forms, EmbeddedIpv4FormsOfTheImdsAreDenied) {
  const char* forms[] = {
      "::a9fe:a9fe",              // IPv4-compatible
      "::ffff:0:a9fe:a9fe",       // SIIT
      "64:ff9b:1::a9fe:a9fe",     // local-use NAT64, /96
      "64:ff9b:1:0:a9:fea9:fe00:0",  // /64
      "64:ff9b:1:a9:fe:a9fe::",   // /56
      "64:ff9b:1:a9fe:a9:fe00::", // /48
  };
  for (const char* f : forms) {
    EXPECT_EQ(Errno(Pod({}, {"tcp", f, "80", "--timeout-ms", "500"})), "EPERM") << f << ": " << last_;
    EXPECT_EQ(Errno(Pod({}, {"udp-sendto", f, "7000"})), "EPERM") << f << ": " << last_;
    EXPECT_EQ(Errno(Pod({"--floor", "hosted"}, {"tcp", f, "80", "--timeout-ms", "500"})), "EPERM")
        << f << ": " << last_;
  }
  ASSERT_TRUE(lab().Drain().ok());
  for (const char* f : forms) EXPECT_EQ(lab().PacketsTo(f), 0u) << f << "\n" << Why();
  // Positive control: the compatible form of a public address leaves the pod.
  Pod({}, {"udp-sendto", "::c000:20a", "7000"});
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().PacketsTo("::c000:20a") == 1; })) << Why();
}

// ---- item 7: the unspecified address is loopback ------------------------------------

TEST_F(Forms, UnspecifiedDestinationsAreJudgedAsLoopback) {
  LoopbackListener lo(lab().node_netns());
  ASSERT_TRUE(lo.ready());
  // Ping sockets for every group in the node netns, as a distribution may set.
  auto ping_range = lab::GetSysctl(lab().node_netns(), "net.ipv4.ping_group_range");
  ASSERT_TRUE(ping_range.ok()) << ping_range.status();
  ASSERT_TRUE(lab::SetSysctl(lab().node_netns(), "net.ipv4.ping_group_range", "0 2147483647").ok());
  struct Restore {
    std::string netns, value;
    ~Restore() { (void)lab::SetSysctl(netns, "net.ipv4.ping_group_range", value); }
  } restore{lab().node_netns(), *ping_range};
  const std::string tcp = std::to_string(lo.tcp_port());
  const std::string udp = std::to_string(lo.udp_port());
  const std::vector<std::string> hosted = {"--floor", "hosted"};
  // hosted denies 127/8 and ::1 in the node netns: each fails at once.
  for (const std::vector<std::string>& probe :
       std::vector<std::vector<std::string>>{{"tcp", "0.0.0.0", tcp},
                                             {"tcp", "::", tcp},
                                             {"mapped6", "0.0.0.0", tcp},
                                             {"udp-sendto", "0.0.0.0", udp},
                                             {"udp-sendto", "::", udp},
                                             {"ping-sock", "0.0.0.0"}}) {
    ProbeLine l = Node(hosted, probe);
    EXPECT_EQ(Errno(l), "EPERM") << last_;
  }
  EXPECT_EQ(lo.tcp_accepts(), 0u);
  // ping_v6_sendmsg drops the error of its own transmit, so an unconnected
  // ping socket cannot learn of the refusal: the packet to :: (which the
  // kernel routes like any address, out of the default route) never leaves.
  ProbeLine ping6 = Node(hosted, {"ping-sock", "::"});
  EXPECT_TRUE(Ok(ping6) || Errno(ping6) == "EPERM") << last_;
  ASSERT_TRUE(lab().Drain(lab().node_netns()).ok());
  EXPECT_EQ(lab().PacketsTo("::"), 0u) << Why();
  // Positive control: the connected floor reaches the same listener so, and
  // lets the ping to :: onto the link.
  EXPECT_TRUE(Ok(Node({}, {"tcp", "0.0.0.0", tcp}))) << last_;
  EXPECT_TRUE(Ok(Node({}, {"ping-sock", "::"}))) << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().PacketsTo("::") == 1; })) << Why();
  // (The reply comes from 127.0.0.1, which the probe does not take for 0.0.0.0's.)
  EXPECT_TRUE(Ok(Node({}, {"ping-sock", "0.0.0.0"}))) << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return lo.tcp_accepts() == 1; }));
  EXPECT_EQ(lo.udp_datagrams(), 0u);
}

}  // namespace
}  // namespace egressd::test
