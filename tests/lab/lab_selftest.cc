// Proves the lab without egressd: topology, servers, capture, probe, cgroups,
// process runner and cleanup. Needs root with CAP_SYS_ADMIN (skips otherwise,
// fails instead when REQUIRE_BPF=1).
#include <netinet/in.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "lab.h"

namespace egressd::lab {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

#define REQUIRE_PRIV()                                                              \
  do {                                                                              \
    if (!RunningAsRootWithSysAdmin()) {                                             \
      const char* req = getenv("REQUIRE_BPF");                                      \
      if (req && std::string(req) == "1") FAIL() << "needs root + CAP_SYS_ADMIN";   \
      GTEST_SKIP() << "needs root + CAP_SYS_ADMIN (set REQUIRE_BPF=1 to fail)";     \
    }                                                                               \
  } while (0)

std::string NetnsList() {
  RunSpec s;
  s.argv = {"ip", "netns", "list"};
  return lab::Run(s).out;
}

std::string RootLinks() {
  RunSpec s;
  s.argv = {"ip", "-o", "link", "show"};
  return lab::Run(s).out;
}

// The single JSON line a probe run printed.
ProbeLine One(const RunResult& r) {
  auto lines = ParseProbeLines(r.out);
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(lines.size(), 1u) << r.Describe();
  return lines.empty() ? ProbeLine{} : lines[0];
}

std::string Show(const ProbeLine& l) {
  std::string s;
  for (const auto& [k, v] : l) absl::StrAppend(&s, k, "=", v, " ");
  return s;
}

// ---- tests without a lab -----------------------------------------------------------

TEST(ProbeLineTest, ParsesJsonObjects) {
  auto l = ParseProbeLine(
      R"({"op":"tcp","dst":"1.2.3.4","port":80,"echo":true,"s":"a\"b\n\u00e9","n":null,)"
      R"("v":[1,"x"],"o":{"k":2}})");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ((*l)["op"], "tcp");
  EXPECT_EQ((*l)["port"], "80");
  EXPECT_EQ((*l)["echo"], "true");
  EXPECT_EQ((*l)["s"], "a\"b\n\xc3\xa9") << "escapes decoded, \\u to UTF-8";
  EXPECT_EQ((*l)["n"], "null");
  EXPECT_EQ((*l)["v"], R"([1,"x"])");
  EXPECT_EQ((*l)["o"], R"({"k":2})");
  for (const char* bad : {"not json", "[1,2]", "\"s\"", "{\"a\":1", "{\"a\":1} trailing", ""}) {
    auto r = ParseProbeLine(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_TRUE(absl::StrContains(r.status().message(), bad)) << r.status();
    }
  }
  auto lines = ParseProbeLines("{\"a\":1}\nnoise\n {\"b\":\"x\"} \n{broken\n");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["a"], "1");
  EXPECT_EQ(lines[1]["b"], "x");
}

TEST(AddressTest, Canonical) {
  std::array<uint8_t, 16> a, b;
  ASSERT_TRUE(CanonicalAddress("1.2.3.4", &a));
  ASSERT_TRUE(CanonicalAddress("::ffff:1.2.3.4", &b));
  EXPECT_EQ(a, b);
  ASSERT_TRUE(CanonicalAddress("[2001:db8::10]", &a));
  ASSERT_TRUE(CanonicalAddress("2001:0db8:0::10", &b));
  EXPECT_EQ(a, b);
  EXPECT_EQ(AddressToString(a), "2001:db8::10");
  EXPECT_FALSE(CanonicalAddress("nope", &a));
}

TEST(ProbeUsageTest, BadArgumentsExit2) {
  const std::string probe = BinaryPath("egressd-probe");
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {}, {"tcp"}, {"tcp", "1.2.3.4"}, {"tcp", "nope", "80"}, {"tcp", "1.2.3.4", "99999"},
           {"rthdr6", "192.0.2.1", "7000", "fd00::1"}, {"bogus"}, {"udp-sendmmsg", "1.2.3.4"},
           {"tcp", "1.2.3.4", "80", "--what"}, {"exec", "--", "true", "--then", "info"}}) {
    RunSpec s;
    s.argv = {probe};
    s.argv.insert(s.argv.end(), args.begin(), args.end());
    RunResult r = lab::Run(s);
    if (args.size() == 5 && args[0] == "exec") {
      EXPECT_EQ(r.exit_code, 0) << "exec takes the rest verbatim";
      continue;
    }
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ") << "\n" << r.Describe();
  }
  RunSpec s;
  s.argv = {probe, "--help"};
  RunResult r = lab::Run(s);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.out, "udp-sendmmsg")) << r.out;
}

TEST(RunTest, TimeoutKillsTheProcessGroup) {
  RunSpec s;
  s.argv = {"sh", "-c", "sleep 30 & sleep 30"};
  s.timeout = milliseconds(200);
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = lab::Run(s);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.exit_code, -SIGKILL);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(RunTest, CapturesOutputAndExitCode) {
  RunSpec s;
  s.argv = {"sh", "-c", "echo out; echo err >&2; cat; exit 3"};
  s.stdin_data = "in\n";
  s.env = {{"EGL_X", "y"}};
  RunResult r = lab::Run(s);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "out\nin\n");
  EXPECT_EQ(r.err, "err\n");
  s.argv = {"sh", "-c", "printf %s \"$EGL_X\""};
  s.stdin_data.clear();
  EXPECT_EQ(lab::Run(s).out, "y");
  s.argv = {"/nonexistent/binary"};
  EXPECT_EQ(lab::Run(s).exit_code, 127);
  // A child that exits without reading a large stdin must not SIGPIPE us.
  s.argv = {"true"};
  s.stdin_data.assign(1 << 20, 'x');
  EXPECT_EQ(lab::Run(s).exit_code, 0);
}

// ---- lifecycle --------------------------------------------------------------------

TEST(LabLifecycleTest, DestructorRemovesEverything) {
  REQUIRE_PRIV();
  auto lab_or = Lab::Create();
  ASSERT_TRUE(lab_or.ok()) << lab_or.status();
  std::unique_ptr<Lab> lab = *std::move(lab_or);
  auto second = lab->AddPod();
  ASSERT_TRUE(second.ok()) << second.status();
  const std::vector<std::string> names = {lab->client_netns_name(), (*second)->netns_name,
                                          lab->node_netns_name(), lab->world_netns_name()};
  const std::string cns = names[0];
  const std::string base = lab->cgroup_base();
  std::string list = NetnsList();
  for (const auto& n : names) {
    EXPECT_TRUE(fs::exists("/var/run/netns/" + n)) << n;
    EXPECT_TRUE(absl::StrContains(list, n)) << list;
  }
  const std::string root_links = RootLinks();
  for (const auto& ifname : {lab->pod(0).node_ifname, (*second)->node_ifname,
                             lab->node_uplink_ifname(), lab->world_ifname()}) {
    EXPECT_FALSE(absl::StrContains(root_links, ifname))
        << ifname << ": the veths must live only inside the lab namespaces";
  }

  auto cg = lab->MakeCgroup("a/b");
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ(*cg, base + "/a/b");
  // A member of the cgroup and a process that is only in the client netns.
  auto held = lab->StartProbe({"hold", kPublicA4, "8080", "--interval-ms", "100", "--count",
                               "10000"},
                              *cg);
  ASSERT_TRUE(held.ok()) << held.status();
  std::optional<std::string> line = held->ReadOutLine(milliseconds(5000));
  ASSERT_TRUE(line) << held->err();
  EXPECT_TRUE(absl::StrContains(*line, "\"result\":\"ok\"")) << *line;
  RunSpec sleeper;
  sleeper.argv = {"sleep", "600"};
  sleeper.netns = lab->client_netns();
  auto bg = Start(sleeper);
  ASSERT_TRUE(bg.ok()) << bg.status();

  lab.reset();

  list = NetnsList();
  for (const auto& n : names) {
    EXPECT_FALSE(absl::StrContains(list, n)) << list;
    EXPECT_FALSE(fs::exists("/var/run/netns/" + n)) << n;
  }
  EXPECT_FALSE(fs::exists(base)) << base;
  RunResult h = held->Wait(milliseconds(2000));
  EXPECT_FALSE(h.timed_out) << "cgroup member survived the lab";
  EXPECT_EQ(h.exit_code, -SIGKILL);
  RunResult s = bg->Wait(milliseconds(2000));
  EXPECT_FALSE(s.timed_out) << "netns member survived the lab";
  EXPECT_EQ(s.exit_code, -SIGKILL);
}

TEST(LabLifecycleTest, SweepRemovesOnlyStaleObjects) {
  REQUIRE_PRIV();
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  waitpid(dead, nullptr, 0);
  const std::string stale = absl::StrCat("egl-", dead, "-beef");
  // Ours, made after we started: not stale while we live (and swept once we are gone).
  const std::string live = absl::StrCat("egl-", getpid(), "-cafe");
  for (const auto& name : {stale + "-c", stale + "-n", stale + "-p3", live + "-c"}) {
    RunSpec s;
    s.argv = {"ip", "netns", "add", name};
    ASSERT_EQ(lab::Run(s).exit_code, 0) << name;
  }
  const std::string cg = Lab::cgroup2_root() + "/" + stale;
  ASSERT_TRUE(fs::create_directories(cg + "/x"));
  RunSpec in_cg;
  in_cg.argv = {"sleep", "600"};
  in_cg.cgroup = cg + "/x";
  auto a = Start(in_cg);
  ASSERT_TRUE(a.ok()) << a.status();
  RunSpec in_ns;
  in_ns.argv = {"sleep", "600"};
  in_ns.netns = "/var/run/netns/" + stale + "-c";
  auto b = Start(in_ns);
  ASSERT_TRUE(b.ok()) << b.status();

  EXPECT_GE(Lab::SweepStale(), 4);

  EXPECT_FALSE(fs::exists(cg));
  EXPECT_FALSE(fs::exists("/var/run/netns/" + stale + "-c"));
  EXPECT_FALSE(fs::exists("/var/run/netns/" + stale + "-n"));
  EXPECT_FALSE(fs::exists("/var/run/netns/" + stale + "-p3"));
  EXPECT_TRUE(fs::exists("/var/run/netns/" + live + "-c")) << "swept an object of a live pid";
  EXPECT_EQ(a->Wait(milliseconds(2000)).exit_code, -SIGKILL);
  EXPECT_EQ(b->Wait(milliseconds(2000)).exit_code, -SIGKILL);
  RunSpec del;
  del.argv = {"ip", "netns", "del", live + "-c"};
  EXPECT_EQ(lab::Run(del).exit_code, 0);
}

// ---- one shared lab for the traffic tests -----------------------------------------

class LabTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { lab_.reset(); }

  void SetUp() override {
    REQUIRE_PRIV();
    if (!lab_) {
      auto l = Lab::Create();
      ASSERT_TRUE(l.ok()) << l.status();
      lab_ = *std::move(l);
    }
    lab_->ResetCounters();
  }

  // Runs the probe hostile (root with only CAP_NET_RAW) in the client netns.
  ProbeLine P(const std::vector<std::string>& args) { return One(lab_->Probe(args)); }

  static std::unique_ptr<Lab> lab_;
};
std::unique_ptr<Lab> LabTest::lab_;

// ---- topology: pods routed by the node to the world --------------------------------

std::string IpIn(const std::string& netns_name, const std::vector<std::string>& args) {
  RunSpec s;
  s.argv = {"ip", "-n", netns_name};
  s.argv.insert(s.argv.end(), args.begin(), args.end());
  return lab::Run(s).out;
}

TEST_F(LabTest, PodsAreRoutedByTheNodeAsACniDoes) {
  const Pod& pod = lab_->pod(0);
  EXPECT_EQ(lab_->client_netns(), pod.netns);
  const std::string routes4 = IpIn(pod.netns_name, {"-4", "route", "show"});
  const std::string routes6 = IpIn(pod.netns_name, {"-6", "route", "show"});
  EXPECT_TRUE(absl::StrContains(routes4, absl::StrCat("default via ", kPodGatewayV4, " dev eth0")))
      << routes4;
  EXPECT_TRUE(absl::StrContains(routes6, absl::StrCat("default via ", kPodGatewayV6, " dev eth0")))
      << routes6;
  const std::string node4 = IpIn(lab_->node_netns_name(), {"-4", "route", "show"});
  const std::string node6 = IpIn(lab_->node_netns_name(), {"-6", "route", "show"});
  EXPECT_TRUE(absl::StrContains(node4, absl::StrCat(pod.v4, " dev ", pod.node_ifname))) << node4;
  EXPECT_TRUE(absl::StrContains(node6, absl::StrCat(pod.v6, " dev ", pod.node_ifname))) << node6;
  EXPECT_TRUE(absl::StrContains(node4, absl::StrCat("default via ", kWorldLinkV4))) << node4;
  EXPECT_EQ(*GetSysctl(lab_->node_netns(), "net.ipv4.ip_forward"), "1");
  EXPECT_EQ(*GetSysctl(lab_->node_netns(), "net.ipv6.conf.all.forwarding"), "1");
  // The lab hosts live in the world only: not in the node, not in the pod.
  EXPECT_FALSE(absl::StrContains(IpIn(lab_->node_netns_name(), {"addr"}), kPublicA4));
  EXPECT_FALSE(absl::StrContains(IpIn(pod.netns_name, {"addr"}), kPublicA4));
  EXPECT_TRUE(absl::StrContains(IpIn(lab_->world_netns_name(), {"addr", "show", "dev", "lo"}),
                                kPublicA4));
}

TEST_F(LabTest, PodReachesTheWorldThroughTheNodeV4AndV6) {
  // The world sees the pod's own address as the source (routed, not NATed)
  // and the hop limit one lower (forwarded once, by the node).
  ProbeLine v4 = P({"udp-connected", kPublicA4, "7000"});
  ProbeLine v6 = P({"udp-connected", kPublicA6, "7000"});
  EXPECT_EQ(v4["echo"], "true") << Show(v4);
  EXPECT_EQ(v6["echo"], "true") << Show(v6);
  ASSERT_TRUE(Lab::WaitFor([&] {
    return lab_->UdpDatagrams(kPublicA4, 7000) == 1 && lab_->UdpDatagrams(kPublicA6, 7000) == 1;
  })) << lab_->CountersSummary();
  std::array<uint8_t, 16> pod4, pod6, a4, a6;
  ASSERT_TRUE(CanonicalAddress(lab_->pod(0).v4, &pod4) && CanonicalAddress(lab_->pod(0).v6, &pod6));
  ASSERT_TRUE(CanonicalAddress(kPublicA4, &a4) && CanonicalAddress(kPublicA6, &a6));
  int from_pod4 = 0, from_pod6 = 0;
  for (const CapturedPacket& p : lab_->Captured()) {
    if (p.dst == a4 && p.src == pod4 && p.proto == kProtoUdp) ++from_pod4;
    if (p.dst == a6 && p.src == pod6 && p.proto == kProtoUdp) ++from_pod6;
  }
  EXPECT_EQ(from_pod4, 1);
  EXPECT_EQ(from_pod6, 1);
}

TEST_F(LabTest, ASecondPodHasItsOwnNetnsAndAddressesAndIsRoutedToo) {
  if (lab_->pod_count() < 2) {
    ASSERT_TRUE(lab_->AddPod().ok());
  }
  const Pod& second = lab_->pod(1);
  EXPECT_EQ(second.index, 1);
  EXPECT_NE(second.netns, lab_->pod(0).netns);
  EXPECT_NE(second.v4, lab_->pod(0).v4);
  EXPECT_NE(second.v6, lab_->pod(0).v6);
  EXPECT_NE(second.node_ifname, lab_->pod(0).node_ifname);
  ProbeLine info = One(lab_->ProbeIn(second.netns, {"info"}));
  struct stat st;
  ASSERT_EQ(stat(second.netns.c_str(), &st), 0);
  EXPECT_EQ(info["netns"], absl::StrCat("net:[", st.st_ino, "]"));
  ProbeLine v4 = One(lab_->ProbeIn(second.netns, {"tcp", kPublicB4, "443"}));
  ProbeLine v6 = One(lab_->ProbeIn(second.netns, {"tcp", kPublicB6, "443"}));
  EXPECT_EQ(v4["echo"], "true") << Show(v4);
  EXPECT_EQ(v6["echo"], "true") << Show(v6);
  EXPECT_TRUE(Lab::WaitFor([&] {
    return lab_->TcpAccepts(kPublicB4, 443) == 1 && lab_->TcpAccepts(kPublicB6, 443) == 1;
  })) << lab_->CountersSummary();
  std::array<uint8_t, 16> src;
  ASSERT_TRUE(CanonicalAddress(second.v4, &src));
  bool from_second = false;
  for (const CapturedPacket& p : lab_->Captured()) from_second |= p.src == src;
  EXPECT_TRUE(from_second) << "the world saw the second pod's address";
  // Pods reach each other through the node too (nothing in the lab isolates them).
  ProbeLine ping = One(lab_->ProbeIn(second.netns, {"raw-icmp", lab_->pod(0).v4}));
  EXPECT_EQ(ping["echo"], "true") << Show(ping);
  EXPECT_TRUE(lab_->Drain(second.netns).ok());
}

TEST_F(LabTest, NodeNetnsIsReachableFromAPodAndRoutesItself) {
  // The pod's gateway is the node; the node reaches the world on its own.
  ProbeLine gw4 = P({"raw-icmp", kPodGatewayV4});
  ProbeLine gw6 = P({"raw-icmp", kPodGatewayV6});
  EXPECT_EQ(gw4["echo"], "true") << Show(gw4);
  EXPECT_EQ(gw6["echo"], "true") << Show(gw6);
  ProbeLine from_node = One(lab_->ProbeIn(lab_->node_netns(), {"tcp", kPublicC4, "80"}));
  EXPECT_EQ(from_node["echo"], "true") << Show(from_node);
  ProbeLine from_node6 = One(lab_->ProbeIn(lab_->node_netns(), {"udp-sendto", kPublicC6, "7001"}));
  EXPECT_EQ(from_node6["echo"], "true") << Show(from_node6);
  EXPECT_TRUE(Lab::WaitFor([&] {
    return lab_->TcpAccepts(kPublicC4, 80) == 1 && lab_->UdpDatagrams(kPublicC6, 7001) == 1;
  })) << lab_->CountersSummary();
  // The pod's gateway pings never reached the world: the node answered them.
  ASSERT_TRUE(lab_->Drain().ok());
  EXPECT_EQ(lab_->PacketsTo(kPodGatewayV4), 0u);
}

TEST_F(LabTest, DrainWaitsForTheMarkersAndCountsOnlyFlowOpeners) {
  ASSERT_TRUE(lab_->Drain().ok());
  ASSERT_TRUE(lab_->Drain(lab_->node_netns()).ok());
  EXPECT_EQ(lab_->PacketsTo(kPublicA4), 0u) << "markers go to the world's link address only";
  ProbeLine l = P({"tcp", kPublicA4, "80"});
  EXPECT_EQ(l["result"], "ok") << Show(l);
  ASSERT_TRUE(Lab::WaitFor([&] { return lab_->TcpAccepts(kPublicA4, 80) == 1; }));
  ASSERT_TRUE(lab_->Drain().ok());
  // SYN, ACK, data, FIN...: several packets, one of which opened the flow.
  EXPECT_GE(lab_->PacketsTo(kPublicA4, kProtoTcp), 3u) << lab_->CountersSummary();
  EXPECT_EQ(lab_->FlowsOpenedTo(kPublicA4), 1u) << lab_->CountersSummary();
  P({"udp-sendto", kPublicA6, "7000"});
  EXPECT_TRUE(Lab::WaitFor([&] { return lab_->FlowsOpenedTo(kPublicA6) == 1; }));
}

TEST_F(LabTest, HostileProbeRunsWithOnlyNetRawInTheClientNetns) {
  ProbeLine l = P({"info"});
  EXPECT_EQ(l["cap_eff"], "0000000000002000") << Show(l);  // CAP_NET_RAW only
  struct stat st;
  ASSERT_EQ(stat(lab_->client_netns().c_str(), &st), 0);
  EXPECT_EQ(l["netns"], absl::StrCat("net:[", st.st_ino, "]"));
  EXPECT_EQ(l["uid"], "0");
}

TEST_F(LabTest, ProbeJoinsTheGivenCgroup) {
  auto cg = lab_->MakeCgroup("sel/x");
  ASSERT_TRUE(cg.ok()) << cg.status();
  ProbeLine l = One(lab_->Probe({"info"}, *cg));
  EXPECT_TRUE(absl::EndsWith(cg->substr(Lab::cgroup2_root().size()), l["cgroup"])) << Show(l);
  EXPECT_TRUE(absl::EndsWith(l["cgroup"], "/sel/x")) << Show(l);
}

TEST_F(LabTest, TcpV4AndV6AreCountedAsAccepts) {
  ProbeLine v4 = P({"tcp", kPublicA4, "80"});
  EXPECT_EQ(v4["result"], "ok") << Show(v4);
  EXPECT_EQ(v4["echo"], "true");
  ProbeLine v6 = P({"tcp", kPublicA6, "80"});
  EXPECT_EQ(v6["result"], "ok") << Show(v6);
  ASSERT_TRUE(Lab::WaitFor([&] {
    return lab_->TcpAccepts(kPublicA4, 80) == 1 && lab_->TcpAccepts(kPublicA6, 80) == 1;
  })) << lab_->CountersSummary();
  EXPECT_EQ(lab_->TcpAccepts("::ffff:192.0.2.10", 80), 1u) << "canonical compare";
  EXPECT_EQ(lab_->TcpAccepts("[2001:db8::10]", 80), 1u);
  EXPECT_EQ(lab_->TcpAccepts(kPublicA4, 443), 0u);
  EXPECT_GE(lab_->PacketsTo(kPublicA4, kProtoTcp), 3u);  // SYN, ACK, data at least
}

TEST_F(LabTest, TcpToAClosedPortIsRefusedAndNotCounted) {
  ProbeLine l = P({"tcp", kPublicA4, "81"});
  EXPECT_EQ(l["errno"], "ECONNREFUSED") << Show(l);
  // Positive control on the same path: the SYN did arrive.
  EXPECT_TRUE(Lab::WaitFor([&] { return lab_->PacketsTo(kPublicA4, kProtoTcp) >= 1; }));
  ASSERT_TRUE(lab_->Drain().ok());
  EXPECT_EQ(lab_->TcpAccepts(kPublicA4, 81), 0u);
}

TEST_F(LabTest, UdpSendtoIsCountedAndEchoed) {
  ProbeLine l = P({"udp-sendto", kDns4, "7000"});
  EXPECT_EQ(l["result"], "ok") << Show(l);
  EXPECT_EQ(l["echo"], "true") << Show(l);
  EXPECT_TRUE(Lab::WaitFor([&] { return lab_->UdpDatagrams(kDns4, 7000) == 1; }))
      << lab_->CountersSummary();
  EXPECT_EQ(lab_->UdpDatagrams(kDns4, 7001), 0u);
}

TEST_F(LabTest, UdpVariantsAreCountedAndEchoed) {
  for (const auto& [op, addr, port] : std::vector<std::tuple<std::string, std::string, int>>{
           {"udp-connected", kImds4, 7000},
           {"udp-connected", kImds6, 7001},
           {"udp-sendmsg", kPrivate10, 7000},
           {"udp-sendmsg", kNat64Imds, 7000},
           {"udp-sendto", kUla6, 7001}}) {
    ProbeLine l = P({op, addr, std::to_string(port)});
    EXPECT_EQ(l["result"], "ok") << Show(l);
    EXPECT_EQ(l["echo"], "true") << Show(l);
    EXPECT_TRUE(Lab::WaitFor([&] { return lab_->UdpDatagrams(addr, port) == 1; }))
        << op << " " << addr << "\n" << lab_->CountersSummary();
  }
}

TEST_F(LabTest, UdpToAPortWithoutReceiverArrivesButIsNotCounted) {
  ProbeLine l = P({"udp-sendto", kDns4, "7002"});
  EXPECT_EQ(l["result"], "ok") << Show(l);
  EXPECT_EQ(l["echo"], "false");
  EXPECT_TRUE(Lab::WaitFor([&] { return lab_->PacketsTo(kDns4, kProtoUdp) == 1; }))
      << lab_->CountersSummary();
  ASSERT_TRUE(lab_->Drain().ok());
  EXPECT_EQ(lab_->UdpDatagrams(kDns4, 7002), 0u);
}

TEST_F(LabTest, EveryLabAddressAnswers) {
  std::vector<std::string> items;
  for (const auto& a : HostAddressesV4()) items.push_back(a + ":7000");
  for (const auto& a : HostAddressesV6()) items.push_back("[" + a + "]:7001");
  RunResult r = lab_->Probe({"udp-sendmmsg", absl::StrJoin(items, ","), "--wait-ms", "1000"});
  auto lines = ParseProbeLines(r.out);
  ASSERT_EQ(lines.size(), items.size()) << r.Describe();
  for (auto& l : lines) {
    EXPECT_EQ(l["result"], "ok") << Show(l);
    EXPECT_EQ(l["echo"], "true") << Show(l);
    const int port = std::stoi(l["port"]);
    EXPECT_TRUE(Lab::WaitFor([&] { return lab_->UdpDatagrams(l["dst"], port) == 1; }))
        << l["dst"];
  }
}

TEST_F(LabTest, SendmmsgCountsEachDestination) {
  RunResult r = lab_->Probe(
      {"udp-sendmmsg", absl::StrCat(kPublicA4, ":7000,[", kPublicA6, "]:7001,", kImds4, ":7000")});
  auto lines = ParseProbeLines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.Describe();
  for (auto& l : lines) {
    EXPECT_EQ(l["result"], "ok") << Show(l);
    EXPECT_EQ(l["first_call_ret"], "3") << Show(l);
    EXPECT_EQ(l["echo"], "true") << Show(l);
  }
  EXPECT_TRUE(Lab::WaitFor([&] {
    return lab_->UdpDatagrams(kPublicA4, 7000) == 1 && lab_->UdpDatagrams(kPublicA6, 7001) == 1 &&
           lab_->UdpDatagrams(kImds4, 7000) == 1;
  })) << lab_->CountersSummary();
}

TEST_F(LabTest, RawIcmpIsCapturedWithItsProtocol) {
  ProbeLine l = P({"raw-icmp", kImds4});
  EXPECT_EQ(l["result"], "ok") << Show(l);
  EXPECT_EQ(l["echo"], "true") << Show(l);
  EXPECT_TRUE(Lab::WaitFor([&] { return lab_->PacketsTo(kImds4, kProtoIcmp) == 1; }))
      << lab_->CountersSummary();
  ProbeLine l6 = P({"raw-icmp", kImds6});
  EXPECT_EQ(l6["result"], "ok") << Show(l6);
  EXPECT_EQ(l6["echo"], "true") << Show(l6);
  EXPECT_TRUE(Lab::WaitFor([&] { return lab_->PacketsTo(kImds6, kProtoIcmp6) == 1; }))
      << lab_->CountersSummary();
  EXPECT_EQ(lab_->PacketsTo(kImds4, kProtoTcp), 0u);
}

TEST_F(LabTest, RawUdpReachesTheUdpServer) {
  for (const auto& [addr, port] : std::vector<std::pair<std::string, int>>{
           {kPublicB4, 7001}, {kPublicB6, 7001}}) {
    ProbeLine l = P({"raw-udp", addr, std::to_string(port)});
    EXPECT_EQ(l["result"], "ok") << Show(l);
    EXPECT_EQ(l["echo"], "true") << Show(l);
    EXPECT_TRUE(Lab::WaitFor([&] { return lab_->UdpDatagrams(addr, port) == 1; }))
        << addr << "\n" << lab_->CountersSummary();
  }
}

TEST_F(LabTest, PingSocketFollowsPingGroupRange) {
  auto before = GetSysctl(lab_->client_netns(), "net.ipv4.ping_group_range");
  ASSERT_TRUE(before.ok()) << before.status();
  ProbeLine denied = P({"ping-sock", kImds4});
  if (*before == "1\t0" || *before == "1 0") {
    EXPECT_EQ(denied["errno"], "EACCES") << Show(denied);
    EXPECT_EQ(denied["stage"], "socket");
  }
  ASSERT_TRUE(SetSysctl(lab_->client_netns(), "net.ipv4.ping_group_range", "0 0").ok());
  ProbeLine ok = P({"ping-sock", kImds4});
  EXPECT_EQ(ok["result"], "ok") << Show(ok);
  EXPECT_EQ(ok["echo"], "true") << Show(ok);
  ProbeLine ok6 = P({"ping-sock", kImds6});
  EXPECT_EQ(ok6["result"], "ok") << Show(ok6);
  EXPECT_EQ(ok6["echo"], "true") << Show(ok6);
  ASSERT_TRUE(SetSysctl(lab_->client_netns(), "net.ipv4.ping_group_range", *before).ok());
  EXPECT_TRUE(Lab::WaitFor([&] { return lab_->PacketsTo(kImds4, kProtoIcmp) >= 1; }));
}

TEST_F(LabTest, Rthdr6SendsThePacketToTheFirstSegment) {
  ProbeLine l = P({"rthdr6", kPublicA6, "7000", kImds6});
  if (l["result"] == "error" && l["stage"] == "setsockopt") {
    // The kernel refused the SRH: then nothing may have left for either address.
    ASSERT_TRUE(lab_->Drain().ok());
    EXPECT_EQ(lab_->PacketsTo(kImds6), 0u);
    EXPECT_EQ(lab_->PacketsTo(kPublicA6), 0u);
    GTEST_SKIP() << "IPV6_RTHDR type 4 refused: " << Show(l);
  }
  EXPECT_EQ(l["result"], "ok") << Show(l);
  EXPECT_TRUE(Lab::WaitFor([&] {
    return lab_->PacketsTo(kImds6, kProtoUdp) == 1 &&
           lab_->PacketsFirstHeader(kImds6, kProtoRouting6) == 1;
  })) << lab_->CountersSummary();
  ASSERT_TRUE(lab_->Drain().ok());
  EXPECT_EQ(lab_->PacketsTo(kPublicA6), 0u) << "the IPv6 destination is the first segment";
  EXPECT_EQ(lab_->UdpDatagrams(kPublicA6, 7000), 0u);
  // Positive control for the same destination without the routing header.
  EXPECT_EQ(P({"udp-connected", kPublicA6, "7000"})["echo"], "true");
  EXPECT_TRUE(Lab::WaitFor([&] { return lab_->UdpDatagrams(kPublicA6, 7000) == 1; }));
}

TEST_F(LabTest, Lsrr4SendsThePacketToTheFirstHop) {
  ProbeLine l = P({"lsrr4", kPublicA4, "7000", kImds4});
  ASSERT_EQ(l["result"], "ok") << Show(l);
  EXPECT_TRUE(Lab::WaitFor([&] { return lab_->PacketsToWithIpOptions(kImds4) == 1; }))
      << lab_->CountersSummary();
  ASSERT_TRUE(lab_->Drain().ok());
  EXPECT_EQ(lab_->PacketsTo(kPublicA4), 0u);
}

TEST_F(LabTest, Lsrr4ViaTheNodeIsForwardedToTheWorldWithItsOption) {
  // The node handles source routes as a router does: a loose route through
  // it goes on to the final destination, option and all.
  ProbeLine l = P({"lsrr4", kPublicB4, "7000", kPodGatewayV4});
  ASSERT_EQ(l["result"], "ok") << Show(l);
  EXPECT_TRUE(Lab::WaitFor([&] { return lab_->PacketsToWithIpOptions(kPublicB4) == 1; }))
      << lab_->CountersSummary();
  // A strict one via the node cannot go on (the world is not on-link to it),
  // and one via a lab host cannot even leave the pod.
  ProbeLine strict = P({"lsrr4", kPublicB4, "7000", kPodGatewayV4, "--strict"});
  EXPECT_EQ(strict["result"], "ok") << Show(strict);
  ProbeLine off_link = P({"lsrr4", kPublicA4, "7000", kPublicB4, "--strict"});
  EXPECT_EQ(off_link["errno"], "ENETUNREACH") << Show(off_link);
  ASSERT_TRUE(lab_->Drain().ok());
  EXPECT_EQ(lab_->PacketsToWithIpOptions(kPublicB4), 1u) << lab_->CountersSummary();
}

TEST_F(LabTest, OtherConnectPathsReachTheServers) {
  ProbeLine tfo = P({"tfo", kPublicA4, "443"});
  EXPECT_EQ(tfo["result"], "ok") << Show(tfo);
  ProbeLine ur = P({"uring-connect", kPublicA6, "443"});
  EXPECT_EQ(ur["result"], "ok") << Show(ur);
  EXPECT_EQ(ur["cqe_res"], "0") << Show(ur);
  ProbeLine m6 = P({"mapped6", kPublicB4, "443"});
  EXPECT_EQ(m6["result"], "ok") << Show(m6);
  ProbeLine mark = P({"so-mark", "7", kPublicD4, "443"});
  EXPECT_EQ(mark["result"], "ok") << Show(mark);
  EXPECT_TRUE(Lab::WaitFor([&] {
    return lab_->TcpAccepts(kPublicA4, 443) == 1 && lab_->TcpAccepts(kPublicA6, 443) == 1 &&
           lab_->TcpAccepts(kPublicB4, 443) == 1 && lab_->TcpAccepts(kPublicD4, 443) == 1;
  })) << lab_->CountersSummary();
  ProbeLine m6u = P({"mapped6", kPublicE4, "7000", "--udp"});
  EXPECT_EQ(m6u["echo"], "true") << Show(m6u);
  EXPECT_TRUE(Lab::WaitFor([&] { return lab_->UdpDatagrams(kPublicE4, 7000) == 1; }));
  // Print what this kernel did with the hostile variants, for the record.
  std::cout << "[ info ] tfo: " << Show(tfo) << "\n[ info ] so-mark: " << Show(mark) << "\n";
}

TEST_F(LabTest, HoldKeepsOneConnectionAlive) {
  auto bg = lab_->StartProbe({"hold", kPublicC4, "8080", "--interval-ms", "30", "--count", "5"});
  ASSERT_TRUE(bg.ok()) << bg.status();
  for (int i = 0; i <= 5; ++i) {
    std::optional<std::string> line = bg->ReadOutLine(milliseconds(5000));
    ASSERT_TRUE(line) << "round " << i << bg->err();
    auto l = ParseProbeLine(*line);
    ASSERT_TRUE(l.ok()) << *line;
    EXPECT_EQ((*l)["round"], std::to_string(i));
    EXPECT_EQ((*l)["result"], "ok") << *line;
  }
  RunResult r = bg->Wait(milliseconds(5000));
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(lab_->TcpAccepts(kPublicC4, 8080), 1u);
}

TEST_F(LabTest, BatchAndThenRunInOrder) {
  RunResult r = lab_->Probe({"batch", absl::StrCat("tcp ", kPublicA4, " 80"),
                             absl::StrCat("udp-sendto ", kPublicA6, " 7000"), "info"});
  auto lines = ParseProbeLines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.Describe();
  EXPECT_EQ(lines[0]["op"], "tcp");
  EXPECT_EQ(lines[1]["op"], "udp-sendto");
  EXPECT_EQ(lines[2]["op"], "info");
  auto cg = lab_->MakeCgroup("then");
  ASSERT_TRUE(cg.ok());
  r = lab_->Probe({"join-cgroup", *cg, "--then", "info", "--then", "exec", "--", "sh", "-c",
                   "echo '{\"op\":\"sh\"}'"});
  lines = ParseProbeLines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.Describe();
  EXPECT_EQ(lines[0]["result"], "ok") << Show(lines[0]);
  EXPECT_TRUE(absl::EndsWith(lines[1]["cgroup"], "/then")) << Show(lines[1]);
  EXPECT_EQ(lines[2]["op"], "sh");
}

// Drain's contract: what was sent before it returns is counted. The marker
// server and the capture are separate threads on separate sockets; a drain
// that waited only for the server returned, now and then, before the capture
// had counted the marker itself (or anything sent just before it).
TEST_F(LabTest, DrainReturnsOnlyAfterTheCaptureCountedItsMarkers) {
  for (int round = 0; round < 200; ++round) {
    lab_->ResetCounters();
    ASSERT_TRUE(lab_->Drain().ok());
    ASSERT_GE(lab_->PacketsTo(kWorldLinkV4, IPPROTO_UDP), 1u) << "round " << round;
    ASSERT_GE(lab_->PacketsTo(kWorldLinkV6, IPPROTO_UDP), 1u) << "round " << round;
  }
}

// Benchmarks pause the capture (its copies and wake-ups are load no node
// has); paused it counts nothing, Drain() refuses, and it resumes whole.
TEST_F(LabTest, APausedCaptureCountsNothingAndResumes) {
  ASSERT_TRUE(lab_->Drain().ok());
  lab_->ResetCounters();
  ASSERT_EQ(lab_->SetCapture(false), absl::OkStatus());
  P({"udp-sendto", kPublicA4, "7001"});
  ASSERT_TRUE(Lab::WaitFor([&] { return lab_->UdpDatagrams(kPublicA4, 7001) == 1; }));
  EXPECT_TRUE(absl::IsFailedPrecondition(lab_->Drain()));
  ASSERT_EQ(lab_->SetCapture(true), absl::OkStatus());
  P({"udp-sendto", kPublicA4, "7001"});
  ASSERT_EQ(lab_->Drain(), absl::OkStatus());
  // The server read both datagrams; the capture counted only the second.
  EXPECT_EQ(lab_->UdpDatagrams(kPublicA4, 7001), 2u);
  EXPECT_EQ(lab_->PacketsTo(kPublicA4, IPPROTO_UDP), 1u) << lab_->CountersSummary();
}

TEST_F(LabTest, ResetCountersZeroesEverything) {
  P({"tcp", kPublicA4, "80"});
  P({"udp-sendto", kPublicA4, "7000"});
  ASSERT_TRUE(Lab::WaitFor([&] {
    return lab_->TcpAccepts(kPublicA4, 80) == 1 && lab_->UdpDatagrams(kPublicA4, 7000) == 1;
  }));
  // The connection's last packet (the client's ACK of the server's FIN) leaves
  // when the client's socket enters TIME-WAIT; wait until no socket to the host
  // is in another state, or that ACK can arrive after the reset (the server
  // closes on its own schedule).
  std::string sockets_seen;
  ASSERT_TRUE(Lab::WaitFor([&] {
    RunSpec ss;
    ss.argv = {"ss", "-Htan", "dst", kPublicA4};
    ss.netns = lab_->client_netns();
    RunResult r = lab::Run(ss);
    sockets_seen = r.Describe();
    std::vector<std::string> sockets = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
    // Earlier tests' connections to the same host may still be in TIME-WAIT.
    return r.exit_code == 0 && !sockets.empty() &&
           absl::c_all_of(sockets, [](const std::string& l) {
             return absl::StartsWith(l, "TIME-WAIT");
           });
  })) << sockets_seen;
  ASSERT_TRUE(lab_->Drain().ok());
  lab_->ResetCounters();
  EXPECT_EQ(lab_->TcpAccepts(kPublicA4, 80), 0u);
  EXPECT_EQ(lab_->UdpDatagrams(kPublicA4, 7000), 0u);
  EXPECT_EQ(lab_->PacketsTo(kPublicA4), 0u);
  EXPECT_TRUE(lab_->Captured().empty());
}

}  // namespace
}  // namespace egressd::lab
