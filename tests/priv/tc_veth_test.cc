// Issue 17: a sandbox judged at the node end of its pod's veth.  The pod's
// processes are in no registered cgroup (standing in for a gVisor netstack
// or a guest kernel, whose sockets never reach the node's cgroup hooks): only
// the tc program on the veth's ingress stands between them and the world.
// Every "nothing arrived" is counted at the lab hosts after a Drain, next to
// an allowed destination of the same probe that did arrive.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "egressd_env.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;

class TcVeth : public testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    lab().ResetCounters();
  }
  void TearDown() override {
    for (const auto& cg : registered_) Shared().Ctl({"sandbox", "remove", "--cgroup", cg});
    registered_.clear();
  }
  Lab& lab() { return Shared().lab(); }
  // An empty cgroup: the sandbox's identity, with no process of the pod in it.
  std::string Cgroup() {
    auto cg = lab().MakeCgroup(absl::StrCat("tc-", counter_++));
    EXPECT_TRUE(cg.ok()) << cg.status();
    return cg.ok() ? *cg : "";
  }
  RunResult Add(const std::string& cg, std::vector<std::string> args) {
    std::vector<std::string> argv = {"sandbox", "add", "--cgroup", cg};
    argv.insert(argv.end(), args.begin(), args.end());
    // Judged at the veth, every packet of the pod is the sandbox's, the lab's
    // Drain markers (to the world link addresses) included: allow them, or no
    // "nothing arrived" could be proven (no test probes those addresses).
    for (const char* marker : {lab::kWorldLinkV4, lab::kWorldLinkV6}) argv.insert(argv.end(), {"--egress", marker});
    RunResult r = Shared().Ctl(argv);
    if (r.exit_code == 0) registered_.push_back(cg);
    return r;
  }
  // egressd-probe in pod `index`'s netns, in the test's own (unregistered)
  // cgroup, as root with only CAP_NET_RAW.
  std::vector<ProbeLine> InPod(size_t index, const std::vector<std::string>& args) {
    RunResult r = lab().ProbeIn(lab().pod(index).netns, args, "", /*hostile=*/true);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    last_ = r.Describe();
    return Lines(r);
  }
  std::vector<std::string> registered_;
  std::string last_;
  static inline int counter_ = 0;
};

TEST_F(TcVeth, BadInterfaceIsRefusedNamingItAndNothingChanges) {
  const std::string cg = Cgroup();
  RunResult r = Add(cg, {"--egress", kPublicA4, "--interface", "egl-nosuch0"});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_NE(r.err.find("--interface \"egl-nosuch0\""), std::string::npos) << r.Describe();
  r = Add(cg, {"--egress", kPublicA4, "--interface", "lo"});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_NE(r.err.find("--interface \"lo\""), std::string::npos) << r.Describe();
  r = Add(cg, {"--egress", kPublicA4, "--interface-netns", "/proc/self/status"});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_NE(r.err.find("--interface-netns \"/proc/self/status\""), std::string::npos) << r.Describe();
  // Nothing registered: the cgroup (its id is its inode) has no record.
  struct stat st {};
  ASSERT_EQ(stat(cg.c_str(), &st), 0);
  const std::string record = absl::StrCat(Shared().runtime_dir(), "/sandboxes/", st.st_ino, ".json");
  EXPECT_NE(access(record.c_str(), F_OK), 0) << record;
}

// The foundation's address cases, v4 and v6, for a pod registered by its
// netns (egressd finds the node end of its veth).
TEST_F(TcVeth, PodOutsideAnyCgroupIsJudgedAtItsVeth) {
  // Positive control first: unregistered, the pod reaches a host the
  // policy will deny.
  auto before = InPod(0, {"tcp", kPublicB4, "80"});
  ASSERT_EQ(before.size(), 1u) << last_;
  ASSERT_TRUE(Ok(before[0])) << last_;
  lab().ResetCounters();

  const std::string cg = Cgroup();
  RunResult add = Add(cg, {"--egress", kPublicA4, "--egress", kPublicA6, "--interface-netns", lab().pod(0).netns});
  ASSERT_EQ(add.exit_code, 0) << add.Describe();

  auto l = InPod(0, {"tcp", kPublicA4, "80", "--then", "tcp", kPublicA6, "443", "--then", "tcp", kPublicB4, "80",
                     "--timeout-ms", "300", "--then", "udp-sendto", kPublicB4, "7000", "--then", "raw-icmp", kImds4,
                     "--then", "tcp", kPublicB6, "80", "--timeout-ms", "300", "--then", "raw-udp", kPrivate10, "7000"});
  ASSERT_EQ(l.size(), 7u) << last_;
  EXPECT_TRUE(Ok(l[0])) << "allowed v4: " << last_;
  EXPECT_TRUE(Ok(l[1])) << "allowed v6 (neighbour discovery passes): " << last_;
  EXPECT_FALSE(Ok(l[2])) << last_;
  EXPECT_FALSE(Ok(l[5])) << last_;
  if (absl::Status d = lab().Drain(lab().pod(0).netns); !d.ok()) FAIL() << d;
  EXPECT_EQ(lab().TcpAccepts(kPublicA4, 80), 1u) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(kPublicA6, 443), 1u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kPublicB4), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kPublicB6), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kImds4), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kPrivate10), 0u) << lab().CountersSummary();

  // Removed, the filter goes with the registration: the pod is free again.
  RunResult rm = Shared().Ctl({"sandbox", "remove", "--cgroup", cg});
  ASSERT_EQ(rm.exit_code, 0) << rm.Describe();
  registered_.clear();
  auto after = InPod(0, {"tcp", kPublicB4, "80"});
  ASSERT_EQ(after.size(), 1u) << last_;
  EXPECT_TRUE(Ok(after[0])) << last_;
}

// A frame written on a packet socket (what gVisor's netstack sends) is judged
// like any other: to a denied host it does not arrive, to an allowed one it
// does.  Registered by interface name.
TEST_F(TcVeth, PacketSocketFramesAreJudged) {
  const std::string mac = PodRouterMac(lab());
  ASSERT_FALSE(mac.empty());
  const std::string cg = Cgroup();
  RunResult add = Add(cg, {"--egress", kPublicA4, "--interface", lab().pod(0).node_ifname});
  ASSERT_EQ(add.exit_code, 0) << add.Describe();
  auto l = InPod(0, {"packet-udp", kImds4, "7000", mac, "--then", "packet-udp", kPublicB4, "7001", mac, "--then",
                     "packet-udp", kPublicA4, "7000", mac});
  ASSERT_EQ(l.size(), 3u) << last_;
  for (auto& line : l) EXPECT_TRUE(Ok(line)) << "the frame was sent: " << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().UdpDatagrams(kPublicA4, 7000) == 1; })) << lab().CountersSummary();
  if (absl::Status d = lab().Drain(lab().pod(0).netns); !d.ok()) FAIL() << d;
  EXPECT_EQ(lab().PacketsTo(kImds4), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kPublicB4), 0u) << lab().CountersSummary();
}

// Two pods, each judged at its own veth by its own policy; a second pod
// unregistered is untouched by the first's filter.
TEST_F(TcVeth, EachPodIsJudgedByItsOwnPolicy) {
  while (lab().pod_count() < 2) ASSERT_TRUE(lab().AddPod().ok());
  const std::string a = Cgroup(), b = Cgroup();
  ASSERT_EQ(Add(a, {"--egress", kPublicA4, "--interface", lab().pod(0).node_ifname}).exit_code, 0) << last_;
  auto free_b = InPod(1, {"tcp", kPublicB4, "80", "--then", "tcp", kPublicA4, "80"});
  ASSERT_EQ(free_b.size(), 2u) << last_;
  EXPECT_TRUE(Ok(free_b[0]) && Ok(free_b[1])) << "pod 1 is not registered: " << last_;
  ASSERT_EQ(Add(b, {"--egress", kPublicB4, "--interface", lab().pod(1).node_ifname}).exit_code, 0) << last_;
  lab().ResetCounters();
  auto la = InPod(0, {"tcp", kPublicA4, "80", "--then", "tcp", kPublicB4, "80", "--timeout-ms", "300"});
  auto lb = InPod(1, {"tcp", kPublicB4, "80", "--then", "tcp", kPublicA4, "80", "--timeout-ms", "300"});
  ASSERT_EQ(la.size(), 2u);
  ASSERT_EQ(lb.size(), 2u) << last_;
  if (absl::Status d = lab().Drain(lab().pod(0).netns); !d.ok()) FAIL() << d;
  ASSERT_TRUE(lab().Drain(lab().pod(1).netns).ok());
  EXPECT_EQ(lab().TcpAccepts(kPublicA4, 80), 1u) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(kPublicB4, 80), 1u) << lab().CountersSummary();
  EXPECT_EQ(lab().FlowsOpenedTo(kPublicA4), 1u) << "pod 1's SYN to A: " << lab().CountersSummary();
  EXPECT_EQ(lab().FlowsOpenedTo(kPublicB4), 1u) << "pod 0's SYN to B: " << lab().CountersSummary();
}


// A pod that forges its source (another pod's address, a MAC not its own)
// neither impersonates that pod nor passes: the same frames arrive from the
// same pod unregistered (the attack works without the check), and its own
// source passes registered.
TEST_F(TcVeth, SpoofedSourcesAreDropped) {
  const std::string mac = PodRouterMac(lab());
  ASSERT_FALSE(mac.empty());
  const std::vector<std::string> attack = {"packet-udp", kPublicA4, "7000", mac, "--source", "10.244.0.77",
                                           "--then", "packet-udp", kPublicA4, "7000", mac, "--source-mac",
                                           "02:00:5e:10:00:01"};
  auto before = InPod(0, attack);
  ASSERT_EQ(before.size(), 2u) << last_;
  EXPECT_TRUE(Lab::WaitFor([&] {
    return lab().UdpDatagrams(kPublicA4, 7000) == 2;
  })) << "unregistered, the forged frames arrive: " << lab().CountersSummary();
  lab().ResetCounters();

  const std::string cg = Cgroup();
  ASSERT_EQ(Add(cg, {"--egress", kPublicA4, "--interface-netns", lab().pod(0).netns}).exit_code, 0) << last_;
  auto l = InPod(0, attack);
  ASSERT_EQ(l.size(), 2u) << last_;
  for (auto& line : l) EXPECT_TRUE(Ok(line)) << "sent: " << last_;
  auto own = InPod(0, {"packet-udp", kPublicA4, "7001", mac});
  ASSERT_EQ(own.size(), 1u) << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().UdpDatagrams(kPublicA4, 7001) == 1; }))
      << "its own source passes: " << lab().CountersSummary();
  if (absl::Status d = lab().Drain(lab().pod(0).netns); !d.ok()) FAIL() << d;
  EXPECT_EQ(lab().UdpDatagrams(kPublicA4, 7000), 0u) << "forged address or MAC: " << lab().CountersSummary();
}

// ---- BPF_PROG_TEST_RUN through the pinned tc program ------------------------
using Bytes = std::vector<uint8_t>;

void Put16(Bytes& b, uint16_t v) {
  b.push_back(v >> 8);
  b.push_back(v & 0xff);
}
void PutAddr(Bytes& b, const char* a) {
  uint8_t buf[16];
  if (inet_pton(AF_INET, a, buf) == 1) {
    b.insert(b.end(), buf, buf + 4);
    return;
  }
  inet_pton(AF_INET6, a, buf);
  b.insert(b.end(), buf, buf + 16);
}
Bytes Eth(uint16_t proto) {
  Bytes b = {0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2};
  Put16(b, proto);
  return b;
}
Bytes Udp(uint16_t dport) {
  Bytes b;
  Put16(b, 40000);
  Put16(b, dport);
  Put16(b, 8);
  Put16(b, 0);
  return b;
}
Bytes V4(const char* dst, uint16_t dport, Bytes options = {}, uint16_t frag_off = 0) {
  while (options.size() % 4) options.push_back(1);
  Bytes b = Eth(0x0800);
  const uint8_t ihl = 5 + options.size() / 4;
  b.push_back(0x40 | ihl);
  b.push_back(0);
  Put16(b, ihl * 4 + 8);
  Put16(b, 1);
  Put16(b, frag_off);
  b.push_back(64);
  b.push_back(17);
  Put16(b, 0);
  PutAddr(b, "10.244.0.2");
  PutAddr(b, dst);
  b.insert(b.end(), options.begin(), options.end());
  Bytes u = Udp(dport);
  b.insert(b.end(), u.begin(), u.end());
  return b;
}
// IPv6 with `ext` (already chained: its first header's type is `next`).
Bytes V6(const char* dst, uint8_t next, const Bytes& rest) {
  Bytes b = Eth(0x86DD);
  b.insert(b.end(), {0x60, 0, 0, 0});
  Put16(b, rest.size());
  b.push_back(next);
  b.push_back(255);
  PutAddr(b, "fd00:244::2");
  PutAddr(b, dst);
  b.insert(b.end(), rest.begin(), rest.end());
  return b;
}
Bytes Icmp6(uint8_t type) { return Bytes{type, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}; }
Bytes RoutingHeader0(const char* hop, uint8_t next) {
  Bytes b = {next, 2, 0, 1, 0, 0, 0, 0};
  PutAddr(b, hop);
  return b;
}

struct Vector {
  const char* name;
  Bytes frame;
  // 0 TC_ACT_OK, 2 TC_ACT_SHOT, 7 TC_ACT_REDIRECT: denied under onDeny
  // reject (the default) and answered (tc_reject_test checks the answers);
  // what gets no answer (unparseable, later fragments, loopback, frames) drops
  int tc_act;
};

// Runs `frame` through the program as if it arrived on `ifindex` (a device of
// the node netns, where the test_run looks the index up).
int TestRun(int prog_fd, uint32_t ifindex, const std::string& node_netns, const Bytes& frame, int* err) {
  int ret = -1;
  std::thread t([&] {
    int ns = open(node_netns.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) {
      *err = errno;
      if (ns >= 0) close(ns);
      return;
    }
    close(ns);
    __sk_buff ctx{};
    ctx.ifindex = ifindex;
    Bytes out(frame.size() + 256);
    DECLARE_LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = frame.data(), .data_out = out.data(),
                        .data_size_in = static_cast<uint32_t>(frame.size()),
                        .data_size_out = static_cast<uint32_t>(out.size()), .ctx_in = &ctx,
                        .ctx_size_in = sizeof(ctx));
    if (bpf_prog_test_run_opts(prog_fd, &o) != 0) {
      *err = errno;
      return;
    }
    *err = 0;
    ret = static_cast<int>(o.retval);
  });
  t.join();
  return ret;
}


// One verdict, two program types: the tc program's decisions on crafted
// frames (the structural ones the lab cannot send: options, fragments,
// routing headers, RAs, VLAN tags).
TEST_F(TcVeth, CraftedFramesThroughTheTcProgram) {
  const std::string cg = Cgroup();
  ASSERT_EQ(Add(cg, {"--egress", kPublicA4, "--egress", kPublicA6, "--interface", lab().pod(0).node_ifname}).exit_code,
            0);
  const uint32_t ifindex = lab().NodeIfindex(lab().pod(0).node_ifname);
  ASSERT_NE(ifindex, 0u);
  const std::string pin = Shared().pin_root() + "/progs/egr_tc_ingress";
  const int prog = bpf_obj_get(pin.c_str());
  ASSERT_GE(prog, 0) << pin << ": " << std::strerror(errno);
  Bytes lsrr = {131, 7, 4, 192, 0, 2, 11};
  Bytes arp = Eth(0x0806);
  arp.resize(42, 0);
  // Its sender MAC is the pod's (the lab fixes pod 0's: 02:00:00:00:00:02),
  // as the frame's source is; sender IP 0.0.0.0: a probe, claiming nothing.
  for (int i = 0; i < 6; ++i) arp[22 + i] = i == 0 || i == 5 ? 2 : 0;
  Bytes vlan = Eth(0x8100);
  vlan.insert(vlan.end(), {0, 1, 0x08, 0});
  Bytes inner = V4(kPublicB4, 7000);
  vlan.insert(vlan.end(), inner.begin() + 14, inner.end());
  Bytes rh = RoutingHeader0(kPublicB6, 17);
  Bytes u6 = Udp(7000);
  rh.insert(rh.end(), u6.begin(), u6.end());
  const std::vector<Vector> vectors = {
      {"v4 to an allowed host", V4(kPublicA4, 7000), 0},
      {"v4 to a denied host", V4(kPublicB4, 7000), 7},
      {"v4 to a protected range", V4(kImds4, 80), 7},
      {"v4 loose source route via a denied hop", V4(kPublicA4, 7000, lsrr), 2},
      {"v4 non-first fragment to a denied host", V4(kPublicB4, 0, {}, 0x00b9), 2},
      {"v4 non-first fragment to an allowed host (every port)", V4(kPublicA4, 0, {}, 0x00b9), 0},
      {"v4 DNS, the sandbox has no endpoint (cannot be steered: refused)", V4(kPublicA4, 53), 7},
      {"v4 to loopback on the link", V4("127.0.0.1", 7000), 2},
      {"ARP", arp, 0},
      {"VLAN-tagged IPv4", vlan, 2},
      {"v6 to an allowed host", V6(kPublicA6, 17, Udp(7000)), 0},
      {"v6 to a denied host", V6(kPublicB6, 17, Udp(7000)), 7},
      {"v6 routing header hop to a denied host", V6(kPublicA6, 43, rh), 7},
      {"v6 NAT64 form of a protected address", V6(kNat64Imds, 17, Udp(80)), 7},
      {"v6 router advertisement", V6("ff02::1", 58, Icmp6(134)), 2},
      {"v6 redirect", V6("fd00:244::1", 58, Icmp6(137)), 2},
      {"v6 neighbour solicitation", V6("ff02::1:ff00:1", 58, Icmp6(135)), 0},
  };
  for (const auto& v : vectors) {
    int err = 0;
    EXPECT_EQ(TestRun(prog, ifindex, lab().node_netns(), v.frame, &err), v.tc_act) << v.name << " (errno " << err
                                                                                    << ")";
  }
  // An interface with no sandbox is not judged.
  int err = 0;
  const uint32_t other = lab().NodeIfindex(lab().node_uplink_ifname());
  EXPECT_EQ(TestRun(prog, other, lab().node_netns(), V4(kPublicB4, 7000), &err), 0) << err;
  close(prog);
}

}  // namespace
}  // namespace egressd::test
