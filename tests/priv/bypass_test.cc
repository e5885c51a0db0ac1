// Tests 2-5 of the foundation issue: the ways a hostile sandbox (root, only
// CAP_NET_RAW) tries to reach a denied address without a plain connect():
// sendmmsg batches, IPv4-mapped and NAT64 forms, raw sockets, ICMP, IPv6
// routing headers, IPv4 source routes, TCP Fast Open and io_uring.  Each
// denial is proven at the lab host, with a positive control on the same path.
#include <string>
#include <vector>

#include "egressd_env.h"

namespace egressd::test {
namespace {

using lab::Lab;
using namespace egressd::lab;  // addresses and protocol numbers

class Bypass : public testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    Shared().lab().ResetCounters();
  }
  Lab& lab() { return Shared().lab(); }
  // Default policy: the connected floor (allow all but protected endpoints).
  std::vector<ProbeLine> Sandboxed(const std::vector<std::string>& probe,
                                   const std::vector<std::string>& policy = {}) {
    RunResult r = Shared().RunSandboxed(policy, probe);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    last_ = r.Describe();
    return Lines(r);
  }
  ProbeLine One(const std::vector<std::string>& probe, const std::vector<std::string>& policy = {}) {
    auto l = Sandboxed(probe, policy);
    EXPECT_EQ(l.size(), 1u) << last_;
    return l.empty() ? ProbeLine{} : l[0];
  }
  // A raw attack whose socket was created and whose send returned.
  ProbeLine Raw(const std::vector<std::string>& probe, const std::vector<std::string>& policy = {}) {
    ProbeLine l = One(probe, policy);
    EXPECT_ATTEMPTED(l, last_);
    return l;
  }
  // After Drain() nothing the sandbox sent is still on its way to the world.
  void ExpectNothingArrivedAt(const char* addr) {
    ASSERT_TRUE(lab().Drain().ok());
    EXPECT_EQ(lab().PacketsTo(addr), 0u) << addr << "\n" << lab().CountersSummary() << "\n" << last_;
  }
  std::string last_;
};

TEST_F(Bypass, SendmmsgBatchDeliversOnlyAllowedDestinations) {
  auto lines = Sandboxed({"udp-sendmmsg",
                          "192.0.2.10:7000,169.254.169.254:7000,[2001:db8::10]:7001,[fd00:ec2::254]:7000,"
                          "198.51.100.7:7001",
                          "--wait-ms", "500"});
  ASSERT_EQ(lines.size(), 5u) << last_;
  EXPECT_EQ(lines[0]["result"], "ok") << last_;
  EXPECT_EQ(lines[1]["errno"], "EPERM") << last_;
  EXPECT_EQ(lines[2]["result"], "ok") << last_;
  EXPECT_EQ(lines[3]["errno"], "EPERM") << last_;
  EXPECT_EQ(lines[4]["result"], "ok") << last_;
  EXPECT_TRUE(Lab::WaitFor([&] {
    return lab().UdpDatagrams(kPublicA4, 7000) == 1 && lab().UdpDatagrams(kPublicA6, 7001) == 1 &&
           lab().UdpDatagrams(kPublicD4, 7001) == 1;
  })) << lab().CountersSummary();
  ExpectNothingArrivedAt(kImds4);
  ExpectNothingArrivedAt(kImds6);
}

TEST_F(Bypass, SendmsgAndSendtoAreJudgedPerCall) {
  auto lines = Sandboxed({"udp-sendmsg", kImds4, "7000", "--then", "udp-sendmsg", kPublicB4, "7000",
                          "--then", "udp-sendto", kImds6, "7001", "--then", "udp-sendto", kPublicB6, "7001"});
  ASSERT_EQ(lines.size(), 4u) << last_;
  EXPECT_EQ(lines[0]["errno"], "EPERM");
  EXPECT_EQ(lines[1]["echo"], "true") << last_;
  EXPECT_EQ(lines[2]["errno"], "EPERM");
  EXPECT_EQ(lines[3]["echo"], "true") << last_;
  ExpectNothingArrivedAt(kImds4);
  ExpectNothingArrivedAt(kImds6);
}

TEST_F(Bypass, Ipv4MappedImdsIsDeniedOnConnect6AndSendmsg6) {
  EXPECT_EQ(One({"mapped6", kImds4, "80"})["errno"], "EPERM") << last_;
  EXPECT_EQ(One({"mapped6", kImds4, "7000", "--udp"})["errno"], "EPERM") << last_;
  EXPECT_EQ(One({"mapped6", kImds4, "7000", "--udp-connected"})["errno"], "EPERM") << last_;
  ExpectNothingArrivedAt(kImds4);
}

TEST_F(Bypass, Ipv4MappedAllowedAddressIsAllowed) {
  const std::vector<std::string> policy = {"--egress", kPublicB4, "--egress", kPublicE4};
  EXPECT_TRUE(Ok(One({"mapped6", kPublicB4, "443"}, policy))) << last_;
  EXPECT_EQ(One({"mapped6", kPublicE4, "7000", "--udp"}, policy)["echo"], "true") << last_;
  EXPECT_EQ(One({"mapped6", kPublicA4, "443"}, policy)["errno"], "EPERM") << last_;  // not named
  EXPECT_TRUE(Lab::WaitFor([&] {
    return lab().TcpAccepts(kPublicB4, 443) == 1 && lab().UdpDatagrams(kPublicE4, 7000) == 1;
  })) << lab().CountersSummary();
  ExpectNothingArrivedAt(kPublicA4);
}

TEST_F(Bypass, Nat64FormOfImdsIsDenied) {
  EXPECT_EQ(One({"tcp", kNat64Imds, "80"})["errno"], "EPERM") << last_;
  EXPECT_EQ(One({"udp-sendto", kNat64Imds, "7000"})["errno"], "EPERM") << last_;
  ExpectNothingArrivedAt(kNat64Imds);
  // Positive control: the NAT64 form of a public address is an ordinary destination.
  EXPECT_TRUE(Ok(One({"tcp", kNat64PublicA, "80"}))) << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kNat64PublicA, 80) == 1; }));
}

TEST_F(Bypass, RawUdpToDeniedAddressNeverArrives) {
  Raw({"raw-udp", kImds4, "7000"});
  Raw({"raw-udp", kImds6, "7000"});
  ExpectNothingArrivedAt(kImds4);
  ExpectNothingArrivedAt(kImds6);
  // Positive control: the same raw path to an allowed address arrives.
  EXPECT_EQ(Raw({"raw-udp", kPublicB4, "7001"})["echo"], "true") << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().UdpDatagrams(kPublicB4, 7001) == 1; }));
}

TEST_F(Bypass, RawIcmpToDeniedAddressNeverArrives) {
  Raw({"raw-icmp", kImds4});
  Raw({"raw-icmp", kImds6});
  Raw({"raw-icmp", kAlibabaMeta4});
  ExpectNothingArrivedAt(kImds4);
  ExpectNothingArrivedAt(kImds6);
  ExpectNothingArrivedAt(kAlibabaMeta4);
  EXPECT_EQ(Raw({"raw-icmp", kPublicC4})["echo"], "true") << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().PacketsTo(kPublicC4, kProtoIcmp) >= 1; }));
}

TEST_F(Bypass, RawIcmpUnderAirgappedFloorReachesOnlyNamedHosts) {
  const std::vector<std::string> policy = {"--floor", "airgapped", "--egress", kPublicF4};
  Raw({"raw-icmp", kDns4}, policy);
  Raw({"raw-icmp", kPublicA6}, policy);
  ExpectNothingArrivedAt(kDns4);
  ExpectNothingArrivedAt(kPublicA6);
  EXPECT_EQ(Raw({"raw-icmp", kPublicF4}, policy)["echo"], "true") << last_;
}

// The precondition of the routing-header tests: this kernel lets a socket
// carry a type 4 routing header (the positive control sends one, outside any
// sandbox). Only a refusal at setsockopt, the probe naming the missing
// feature, may skip them, even with REQUIRE_BPF=1; anything else fails.
#define EGR_REQUIRE_RTHDR6()                                                          \
  do {                                                                                \
    RunResult pre = lab().Probe({"rthdr6", kPublicA6, "7000", kPublicB6});            \
    auto pl = Lines(pre);                                                             \
    ASSERT_EQ(pl.size(), 1u) << pre.Describe();                                       \
    if (pl[0]["result"] != "ok" && pl[0]["stage"] == "setsockopt")                    \
      GTEST_SKIP() << "kernel refuses IPV6_RTHDR type 4: errno " << pl[0]["errno"];   \
    ASSERT_EQ(pl[0]["result"], "ok") << pre.Describe();                               \
    ASSERT_TRUE(Lab::WaitFor(                                                         \
        [&] { return lab().PacketsFirstHeader(kPublicB6, kProtoRouting6) == 1; }))   \
        << lab().CountersSummary();                                                   \
    lab().ResetCounters();                                                            \
  } while (0)

TEST_F(Bypass, Ipv6RoutingHeaderViaDeniedHopSendsNothingThere) {
  EGR_REQUIRE_RTHDR6();
  ProbeLine l = One({"rthdr6", kPublicA6, "7000", kImds6});
  EXPECT_NE(l["result"], "ok") << last_;
  EXPECT_NE(l["stage"], "setsockopt") << "refused by egressd, not by the kernel's socket: " << last_;
  ExpectNothingArrivedAt(kImds6);
  ExpectNothingArrivedAt(kPublicA6);
  // Positive control: a routing header whose every hop is allowed goes out.
  ProbeLine ok = One({"rthdr6", kPublicA6, "7000", kPublicB6});
  EXPECT_EQ(ok["result"], "ok") << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().PacketsFirstHeader(kPublicB6, kProtoRouting6) == 1; }))
      << lab().CountersSummary();
}

TEST_F(Bypass, Ipv6RoutingHeaderToDeniedFinalDestinationIsRefused) {
  // connect6 judges the final destination; the backstop judges every hop.
  EGR_REQUIRE_RTHDR6();
  ProbeLine l = One({"rthdr6", kImds6, "7000", kPublicB6});
  EXPECT_EQ(l["errno"], "EPERM") << last_;
  EXPECT_NE(l["stage"], "setsockopt") << last_;
  ExpectNothingArrivedAt(kPublicB6);
  ExpectNothingArrivedAt(kImds6);
}

TEST_F(Bypass, Ipv4SourceRouteIsRefusedOutright) {
  // The first hop of a strict route must be on-link: the pod's gateway, the
  // node (a strict route via a lab host fails in the pod's own kernel with
  // ENETUNREACH, egressd or not). The probe's errors show egressd refused
  // each before it left the pod; the world's counts below, that nothing came.
  ProbeLine loose = One({"lsrr4", kPublicA4, "7000", kImds4});
  EXPECT_EQ(loose["errno"], "EPERM") << last_;
  ProbeLine via_node = One({"lsrr4", kPublicB4, "7000", kPodGatewayV4});
  EXPECT_EQ(via_node["errno"], "EPERM") << last_;
  ProbeLine strict = One({"lsrr4", kPublicB4, "7000", kPodGatewayV4, "--strict"});
  EXPECT_EQ(strict["errno"], "EPERM") << last_;
  ExpectNothingArrivedAt(kImds4);
  ExpectNothingArrivedAt(kPublicB4);
  ExpectNothingArrivedAt(kPublicA4);
  // Positive control: the same destination without the option.
  EXPECT_EQ(One({"udp-connected", kPublicA4, "7000"})["echo"], "true") << last_;
}

TEST_F(Bypass, TcpFastOpenToDeniedAddressIsRefused) {
  EXPECT_EQ(One({"tfo", kImds4, "80"})["errno"], "EPERM") << last_;
  EXPECT_EQ(One({"tfo", kImds6, "80"})["errno"], "EPERM") << last_;
  ExpectNothingArrivedAt(kImds4);
  ExpectNothingArrivedAt(kImds6);
  EXPECT_TRUE(Ok(One({"tfo", kPublicA4, "443"}))) << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kPublicA4, 443) == 1; }));
}

// In a registered pod cgroup: pods keep io_uring everywhere, `egressctl run`
// only where the bpf LSM is in force (its seccomp fallback refuses io_uring,
// whose IORING_OP_SOCKET would make sockets the filter never sees).
TEST_F(Bypass, IoUringConnectToDeniedAddressIsRefused) {
  auto cg = lab().MakeCgroup("uring-pod");
  ASSERT_TRUE(cg.ok()) << cg.status();
  RunResult add = Shared().Ctl({"sandbox", "add", "--cgroup", *cg});
  ASSERT_EQ(add.exit_code, 0) << add.Describe();
  auto one = [&](const std::vector<std::string>& probe) {
    RunResult r = lab().Probe(probe, *cg, /*hostile=*/true);
    last_ = r.Describe();
    return Only(r);
  };
  EXPECT_EQ(one({"uring-connect", kImds4, "80"})["cqe_res"], "-1") << last_;
  EXPECT_EQ(one({"uring-connect", kImds6, "80"})["cqe_res"], "-1") << last_;
  ExpectNothingArrivedAt(kImds4);
  ExpectNothingArrivedAt(kImds6);
  EXPECT_EQ(one({"uring-connect", kPublicA6, "443"})["cqe_res"], "0") << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kPublicA6, 443) == 1; }));
  EXPECT_EQ(Shared().Ctl({"sandbox", "remove", "--cgroup", *cg}).exit_code, 0);
}

TEST_F(Bypass, SoMarkGivesNoExemption) {
  // NET_RAW is enough to set SO_MARK since Linux 5.17; it must buy nothing.
  for (const char* mark : {"1", "0x100", "0xffffffff"}) {
    ProbeLine marked = One({"so-mark", mark, kImds4, "80"});
    EXPECT_EQ(marked["mark_result"], "ok") << "the mark must be set for its exemption to be tested: " << last_;
    EXPECT_EQ(marked["errno"], "EPERM") << last_;
    Raw({"raw-udp", kImds4, "7000"});  // the raw path too, after marking is possible
  }
  ExpectNothingArrivedAt(kImds4);
}

}  // namespace
}  // namespace egressd::test
