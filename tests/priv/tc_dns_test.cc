// Issue 17, DNS at the veth (bpf/lib/tc_dns.h): a pod registered by its
// host-side interface, whose processes are in no registered cgroup (standing
// in for gVisor's netstack or a guest kernel), asks a resolver address no
// host has (192.0.2.53, 2001:db8::53).  The tc ingress program steers every
// DNS packet to the sandbox's endpoint on the pod gateway, where the real
// proxy (`egressctl dns serve`) asks the lab's upstream (a dnsmasq in the
// world) only for names in scope and learns the answer before releasing it;
// the tc egress program gives the answer the source the pod asked (dig and
// glibc drop any other).  The address asked sees nothing (capture), a denied
// name never reaches the upstream (its log, next to the allowed name's
// query), and a forged packet to another sandbox's endpoint is refused at
// the hook (its counter) where, unregistered, the same packet arrives (an
// nftables counter at the node's input).
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "dns_sandboxes.h"
#include "egressd_env.h"
#include "lab_dns.h"
#include "maps/if_sandbox_table.h"
#include "maps/pinned_maps.h"
#include "maps/stats.h"

namespace egressd::test {
namespace {

using namespace std::chrono_literals;
using lab::DnsServer;
using lab::DnsServerSpec;
using lab::Lab;
using lab::ProbeLine;
using lab::RunResult;
using lab::RunSpec;

constexpr const char* kUpstream = lab::kPublicE4;  // 198.51.100.8: the proxy's upstream
constexpr const char* kAsked4 = "192.0.2.53";      // TEST-NET: no lab host has it
constexpr const char* kAsked6 = "2001:db8::53";
constexpr const char* kAllowed = "allowed.example";
constexpr const char* kAllowed4 = lab::kPublicA4;
constexpr const char* kAllowed6 = lab::kPublicA6;
constexpr const char* kDenied = "denied.example";

std::string FirstLine(const std::string& s) {
  return std::string(absl::StripAsciiWhitespace(s.substr(0, s.find('\n'))));
}

uint64_t Counter(egr_stat stat) {
  auto maps = maps::PinnedMaps::Open(Shared().pin_root());
  if (!maps.ok()) return ~0ull;
  return maps::ReadCounters(*maps)[stat];
}

class TcDns : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    auto up = DnsServer::Start(DnsServerSpec{.netns = Shared().lab().world_netns(),
                                             .listen = {kUpstream},
                                             .records = {{kAllowed, {kAllowed4, kAllowed6}},
                                                         {kDenied, {lab::kPublicB4}}}});
    ASSERT_TRUE(up.ok()) << up.status();
    upstream_ = std::move(*up).release();
  }
  static void TearDownTestSuite() {
    delete upstream_;
    upstream_ = nullptr;
  }
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    ASSERT_NE(upstream_, nullptr);
    lab().ResetCounters();
    upstream_before_ = upstream_->Log().size();
  }
  void TearDown() override {
    if (serve_) serve_->Stop();
    sandboxes_.RemoveAll();
  }
  Lab& lab() { return Shared().lab(); }

  // Pod `index` registered by its host-side interface, its DNS endpoint on
  // the pod gateway.  The lab's Drain markers are allowed (every packet of
  // the pod is judged at the veth).
  DnsSandbox RegisterPod(size_t index, std::vector<std::string> policy) {
    for (const char* marker : {lab::kWorldLinkV4, lab::kWorldLinkV6}) policy.insert(policy.end(), {"--egress", marker});
    policy.insert(policy.end(), {"--interface", lab().pod(index).node_ifname});
    return sandboxes_.Add(policy);
  }
  void Serve() {
    auto bg = ServeDns({"--upstream-dns", kUpstream});
    ASSERT_TRUE(bg.ok()) << bg.status();
    serve_ = std::move(*bg);
  }
  // A command in pod `index`'s netns, in the test's own cgroup (no sandbox's).
  RunResult InPod(size_t index, std::vector<std::string> argv) {
    RunSpec spec;
    spec.argv = std::move(argv);
    spec.netns = lab().pod(index).netns;
    spec.timeout = 20s;
    return lab::Run(spec);
  }
  RunResult Dig(const std::vector<std::string>& args, size_t pod = 0) {
    std::vector<std::string> argv = {"dig", "+time=2", "+tries=1"};
    argv.insert(argv.end(), args.begin(), args.end());
    return InPod(pod, argv);
  }
  ProbeLine Connect(const std::string& addr, uint16_t port = 80) {
    RunResult r = lab().ProbeIn(lab().pod(0).netns, {"tcp", addr, absl::StrCat(port), "--timeout-ms", "500"}, "",
                                /*hostile=*/true);
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? ProbeLine{} : lines[0];
  }
  uint64_t UpstreamQueriesFor(const std::string& name) const {
    const std::string log = upstream_->Log().substr(upstream_before_);
    uint64_t n = 0;
    for (size_t at = 0; (at = log.find("] " + name + " from", at)) != std::string::npos; ++at) ++n;
    return n;
  }
  void ExpectTheAddressesAskedSawNothing() {
    if (absl::Status d = lab().Drain(lab().pod(0).netns); !d.ok()) FAIL() << d;
    EXPECT_EQ(lab().PacketsTo(kAsked4), 0u) << lab().CountersSummary();
    EXPECT_EQ(lab().PacketsTo(kAsked6), 0u) << lab().CountersSummary();
  }

  static inline DnsServer* upstream_ = nullptr;
  size_t upstream_before_ = 0;
  DnsSandboxes sandboxes_{"tcdns-"};
  std::optional<lab::Background> serve_;
};

// The whole story over UDP and IPv4: before the name the address is refused;
// dig and glibc get the upstream's answer from the address they asked; the
// learned address then connects; a denied name is NXDOMAIN and never reaches
// the upstream.
TEST_F(TcDns, AnAllowedNameResolvesFromTheAddressAskedThenConnectsAndADeniedNameLeaksNothing) {
  // Positive control: unregistered, the pod reaches the host the name will
  // name, and its query to the TEST-NET resolver goes unanswered (no host).
  ASSERT_TRUE(Ok(Connect(kAllowed4))) << "unregistered";
  RunResult unanswered = Dig({"+short", absl::StrCat("@", kAsked4), kAllowed});
  EXPECT_NE(unanswered.exit_code, 0) << unanswered.Describe();
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().PacketsTo(kAsked4) >= 1; }))
      << "unregistered, the query leaves for the address asked: " << lab().CountersSummary();
  lab().ResetCounters();

  DnsSandbox s = RegisterPod(0, {"--egress", kAllowed});
  ASSERT_NE(s.port, 0) << "the sandbox has a DNS endpoint";
  Serve();
  EXPECT_FALSE(Ok(Connect(kAllowed4))) << "an address no answer taught is refused";
  const uint64_t steered_before = Counter(EGR_STAT_DNS_REDIRECT);

  RunResult d = Dig({absl::StrCat("@", kAsked4), kAllowed});
  EXPECT_NE(d.out.find("status: NOERROR"), std::string::npos) << d.Describe();
  EXPECT_NE(d.out.find(absl::StrCat("SERVER: ", kAsked4, "#53(", kAsked4, ")")), std::string::npos)
      << "the answer came from the address asked: " << d.Describe();
  EXPECT_NE(d.out.find(kAllowed4), std::string::npos) << d.Describe();
  EXPECT_GT(Counter(EGR_STAT_DNS_REDIRECT), steered_before) << "steered at the veth";

  ProbeLine after = Connect(kAllowed4);
  EXPECT_TRUE(Ok(after)) << "the learned address: " << after["errno"];
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kAllowed4, 80) == 1; })) << lab().CountersSummary();

  // glibc's getaddrinfo, its resolv.conf naming the TEST-NET resolver.
  char dir[] = "/tmp/egr-tcdns-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string conf = absl::StrCat(dir, "/resolv.conf");
  std::ofstream(conf) << "nameserver " << kAsked4 << "\noptions timeout:2 attempts:1\n";
  RunResult g = InPod(0, {"unshare", "--mount", "--", "sh", "-c",
                          absl::StrCat("mount --bind ", conf, " /etc/resolv.conf && getent ahostsv4 ", kAllowed,
                                       " && ! getent ahostsv4 ", kDenied)});
  unlink(conf.c_str());
  rmdir(dir);
  EXPECT_EQ(g.exit_code, 0) << g.Describe();
  EXPECT_TRUE(absl::StartsWith(g.out, kAllowed4)) << g.Describe();

  RunResult denied = Dig({absl::StrCat("@", kAsked4), kDenied});
  EXPECT_NE(denied.out.find("status: NXDOMAIN"), std::string::npos) << denied.Describe();
  EXPECT_GE(UpstreamQueriesFor(kAllowed), 1u) << "positive control: " << upstream_->Log();
  EXPECT_EQ(UpstreamQueriesFor(kDenied), 0u) << "a denied name reached the upstream: " << upstream_->Log();
  EXPECT_FALSE(Ok(Connect(lab::kPublicB4))) << "the denied name's address";
  ExpectTheAddressesAskedSawNothing();
  EXPECT_EQ(lab().TcpAccepts(lab::kPublicB4, 80), 0u) << lab().CountersSummary();
}

// DNS over TCP (SYN and every segment steered, every answer segment
// restored), and IPv6 over UDP and TCP; then a connect over IPv6 to the
// learned address.
TEST_F(TcDns, TcpAndIpv6QueriesAreSteeredAndAnsweredFromTheAddressAsked) {
  DnsSandbox s = RegisterPod(0, {"--egress", kAllowed});
  ASSERT_NE(s.port, 0);
  Serve();
  EXPECT_FALSE(Ok(Connect(kAllowed6)));
  RunResult t4 = Dig({"+tcp", absl::StrCat("@", kAsked4), kAllowed});
  EXPECT_NE(t4.out.find(absl::StrCat("SERVER: ", kAsked4, "#53(", kAsked4, ") (TCP)")), std::string::npos)
      << t4.Describe();
  EXPECT_NE(t4.out.find(kAllowed4), std::string::npos) << t4.Describe();
  RunResult u6 = Dig({"+short", "-6", absl::StrCat("@", kAsked6), kAllowed, "AAAA"});
  EXPECT_EQ(FirstLine(u6.out), kAllowed6) << u6.Describe();
  RunResult t6 = Dig({"+tcp", "-6", absl::StrCat("@", kAsked6), kAllowed, "AAAA"});
  EXPECT_NE(t6.out.find(absl::StrCat("SERVER: ", kAsked6, "#53(", kAsked6, ") (TCP)")), std::string::npos)
      << t6.Describe();
  EXPECT_NE(t6.out.find(kAllowed6), std::string::npos) << t6.Describe();
  ProbeLine after = Connect(kAllowed6);
  EXPECT_TRUE(Ok(after)) << after["errno"];
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kAllowed6, 80) == 1; })) << lab().CountersSummary();
  RunResult denied = Dig({"+tcp", "-6", absl::StrCat("@", kAsked6), kDenied});
  EXPECT_NE(denied.out.find("status: NXDOMAIN"), std::string::npos) << denied.Describe();
  EXPECT_GE(UpstreamQueriesFor(kAllowed), 2u) << upstream_->Log();
  EXPECT_EQ(UpstreamQueriesFor(kDenied), 0u) << upstream_->Log();
  ExpectTheAddressesAskedSawNothing();
}

// A pod's raw packet naming another sandbox's endpoint (or its own) is
// refused at the veth: unregistered, the same packet arrives there.
TEST_F(TcDns, ARawPacketToAnotherSandboxsEndpointIsRefused) {
  while (lab().pod_count() < 2) ASSERT_TRUE(lab().AddPod().ok());
  DnsSandbox b = RegisterPod(1, {"--egress", kAllowed});
  ASSERT_NE(b.port, 0);
  auto arrived = NodeUdpCounter::Add(lab::kPodGatewayV4, b.port);
  ASSERT_TRUE(arrived.ok()) << arrived.status();
  const std::vector<std::string> attack = {"raw-udp", lab::kPodGatewayV4, absl::StrCat(b.port)};
  RunResult before = lab().ProbeIn(lab().pod(0).netns, attack, "", /*hostile=*/true);
  ASSERT_EQ(Lines(before).size(), 1u) << before.Describe();
  EXPECT_TRUE(Lab::WaitFor([&] { return (*arrived)->Packets() == 1; }))
      << "unregistered, pod 0's forged query reaches B's endpoint: " << (*arrived)->Packets();

  DnsSandbox a = RegisterPod(0, {"--egress", kAllowed});
  ASSERT_NE(a.port, 0);
  auto own = NodeUdpCounter::Add(lab::kPodGatewayV4, a.port);
  ASSERT_TRUE(own.ok()) << own.status();
  const uint64_t refused_before = Counter(EGR_STAT_DNS_DENY);
  RunResult l = lab().ProbeIn(lab().pod(0).netns,
                              {"raw-udp", lab::kPodGatewayV4, absl::StrCat(b.port), "--then", "raw-udp",
                               lab::kPodGatewayV4, absl::StrCat(a.port), "--then", "udp-sendto", lab::kPodGatewayV4,
                               absl::StrCat(b.port)},
                              "", /*hostile=*/true);
  ASSERT_EQ(Lines(l).size(), 3u) << l.Describe();
  // A steered query does arrive at A's endpoint (no proxy serves it here:
  // the counter sees it at the node's input): the path works, the names
  // do not.
  RunResult steered = Dig({"+short", "+time=1", absl::StrCat("@", kAsked4), kAllowed});
  EXPECT_TRUE(Lab::WaitFor([&] { return (*own)->Packets() >= 1; })) << "positive control: " << steered.Describe();
  if (absl::Status d = lab().Drain(lab().pod(0).netns); !d.ok()) FAIL() << d;
  EXPECT_EQ(Counter(EGR_STAT_DNS_DENY), refused_before + 3) << "each refused at the hook";
  EXPECT_EQ((*arrived)->Packets(), 1u) << "nothing more reached B's endpoint";
  EXPECT_EQ((*own)->Packets(), 1u) << "A's own endpoint, named directly, is refused too; the steered query arrived";
}

// ---- BPF_PROG_TEST_RUN: the rewrite and its checksums -----------------------
using Bytes = std::vector<uint8_t>;

uint16_t Get16(const Bytes& b, size_t at) { return b[at] << 8 | b[at + 1]; }
void Set16(Bytes& b, size_t at, uint16_t v) {
  b[at] = v >> 8;
  b[at + 1] = v & 0xff;
}
uint32_t Sum(const uint8_t* p, size_t n, uint32_t s = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) s += p[i] << 8 | p[i + 1];
  if (n % 2) s += p[n - 1] << 8;
  return s;
}
uint16_t Fold(uint32_t s) {
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return static_cast<uint16_t>(~s);
}
// The transport checksum over the pseudo-header, as a receiver computes it:
// 0 for a correct one.
uint16_t L4Check(const Bytes& f, bool v6, size_t l4, uint8_t proto) {
  const size_t len = f.size() - l4;
  uint32_t s = v6 ? Sum(&f[14 + 8], 32) : Sum(&f[14 + 12], 8);
  s += proto + static_cast<uint32_t>(len);
  return Fold(Sum(&f[l4], len, s));
}
void Addr(Bytes& f, size_t at, const char* a) {
  uint8_t buf[16];
  const bool v6 = inet_pton(AF_INET6, a, buf) == 1;
  if (!v6) inet_pton(AF_INET, a, buf);
  std::memcpy(&f[at], buf, v6 ? 16 : 4);
}
// An Ethernet frame with one UDP or TCP segment of a 12-byte payload, its
// checksums right (udp_csum0: IPv4 UDP without a checksum).
Bytes Frame(bool v6, uint8_t proto, const char* src, uint16_t sport, const char* dst, uint16_t dport,
            bool udp_csum0 = false) {
  const size_t l3 = 14, l4 = l3 + (v6 ? 40 : 20), l4len = (proto == 6 ? 20 : 8) + 12;
  Bytes f(l4 + l4len, 0);
  // Source MAC: pod 0's (the lab fixes it, 02:00:00:00:00:02), which the
  // tc program checks the pod's frames against.
  f[6] = 0x02;
  f[11] = 0x02;
  f[12] = v6 ? 0x86 : 0x08;
  f[13] = v6 ? 0xdd : 0x00;
  if (v6) {
    f[l3] = 0x60;
    Set16(f, l3 + 4, l4len);
    f[l3 + 6] = proto;
    f[l3 + 7] = 64;
    Addr(f, l3 + 8, src);
    Addr(f, l3 + 24, dst);
  } else {
    f[l3] = 0x45;
    Set16(f, l3 + 2, 20 + l4len);
    f[l3 + 8] = 64;
    f[l3 + 9] = proto;
    Addr(f, l3 + 12, src);
    Addr(f, l3 + 16, dst);
    Set16(f, l3 + 10, Fold(Sum(&f[l3], 20)));
  }
  Set16(f, l4, sport);
  Set16(f, l4 + 2, dport);
  if (proto == 6) {
    f[l4 + 12] = 5 << 4;
    f[l4 + 13] = 0x18;  // PSH ACK
    Set16(f, l4 + 14, 65535);
  } else {
    Set16(f, l4 + 4, l4len);
  }
  for (size_t i = 0; i < 12; i++) f[f.size() - 12 + i] = 0x40 + i;
  if (!(proto == 17 && udp_csum0)) {
    const size_t at = l4 + (proto == 6 ? 16 : 6);
    uint16_t c = L4Check(f, v6, l4, proto);
    if (proto == 17 && c == 0) c = 0xffff;
    Set16(f, at, c);
  }
  return f;
}

struct RunOut {
  int ret = -1;
  int err = 0;
  Bytes out;
};

RunOut TestRun(int prog_fd, uint32_t ifindex, const Bytes& frame) {
  RunOut r;
  std::thread t([&] {
    int ns = open(Shared().lab().node_netns().c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) {
      r.err = errno;
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
      r.err = errno;
      return;
    }
    out.resize(o.data_size_out);
    r.out = std::move(out);
    r.ret = static_cast<int>(o.retval);
  });
  t.join();
  return r;
}


// Each query steered to the endpoint and its answer restored, byte for byte,
// with checksums a receiver accepts: UDP and TCP, IPv4 and IPv6, an IPv4 UDP
// datagram without a checksum kept without one.  An answer no query explains
// (another port) is dropped, and counted.
TEST_F(TcDns, TheRewriteKeepsChecksumsRightBothWays) {
  DnsSandbox s = RegisterPod(0, {"--egress", kAllowed});
  ASSERT_NE(s.port, 0);
  const uint32_t ifindex = Shared().lab().NodeIfindex(lab().pod(0).node_ifname);
  ASSERT_NE(ifindex, 0u);
  const int in = bpf_obj_get((Shared().pin_root() + "/progs/egr_tc_ingress").c_str());
  const int out = bpf_obj_get((Shared().pin_root() + "/progs/egr_tc_egress").c_str());
  ASSERT_GE(in, 0) << std::strerror(errno);
  ASSERT_GE(out, 0) << std::strerror(errno);
  struct Case {
    const char* name;
    bool v6;
    uint8_t proto;
    bool csum0;
  };
  const Case cases[] = {{"v4 udp", false, 17, false},
                        {"v4 udp without a checksum", false, 17, true},
                        {"v4 tcp", false, 6, false},
                        {"v6 udp", true, 17, false},
                        {"v6 tcp", true, 6, false}};
  uint16_t sport = 41000;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const char* pod = c.v6 ? "fd00:244::2" : "10.244.0.2";
    const char* asked = c.v6 ? kAsked6 : kAsked4;
    const char* ep = c.v6 ? lab::kPodGatewayV6 : lab::kPodGatewayV4;
    const size_t l4 = 14 + (c.v6 ? 40 : 20), csum_at = l4 + (c.proto == 6 ? 16 : 6);
    ++sport;
    RunOut q = TestRun(in, ifindex, Frame(c.v6, c.proto, pod, sport, asked, 53, c.csum0));
    ASSERT_EQ(q.ret, 0) << "passed (errno " << q.err << ")";
    EXPECT_EQ(q.out, Frame(c.v6, c.proto, pod, sport, ep, s.port, c.csum0)) << "steered to the endpoint";
    if (!c.v6) {
      EXPECT_EQ(Fold(Sum(&q.out[14], 20)), 0) << "IPv4 header checksum";
    }
    if (c.csum0) {
      EXPECT_EQ(Get16(q.out, csum_at), 0) << "no checksum stays none";
    } else {
      EXPECT_EQ(L4Check(q.out, c.v6, l4, c.proto), 0) << "transport checksum";
    }
    RunOut a = TestRun(out, ifindex, Frame(c.v6, c.proto, ep, s.port, pod, sport, c.csum0));
    ASSERT_EQ(a.ret, 0) << "passed (errno " << a.err << ")";
    EXPECT_EQ(a.out, Frame(c.v6, c.proto, asked, 53, pod, sport, c.csum0)) << "the source the pod asked";
    if (!c.csum0) {
      EXPECT_EQ(L4Check(a.out, c.v6, l4, c.proto), 0);
    }
  }
  // An answer to a port that asked nothing (slot empty or another port's):
  // dropped, counted.
  auto before = maps::ReadTcStats(Shared().pin_root());
  ASSERT_TRUE(before.ok()) << before.status();
  RunOut stray = TestRun(out, ifindex, Frame(false, 17, lab::kPodGatewayV4, s.port, "10.244.0.2", 50999));
  EXPECT_EQ(stray.ret, 2) << stray.err;
  auto after = maps::ReadTcStats(Shared().pin_root());
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*after)[EGR_TC_STAT_DNS_UNMATCHED], (*before)[EGR_TC_STAT_DNS_UNMATCHED] + 1);
  // Other traffic towards the pod is untouched.
  const Bytes other = Frame(false, 6, lab::kPublicA4, 80, "10.244.0.2", 50999);
  RunOut o = TestRun(out, ifindex, other);
  EXPECT_EQ(o.ret, 0);
  EXPECT_EQ(o.out, other);
  close(in);
  close(out);
}

}  // namespace
}  // namespace egressd::test
