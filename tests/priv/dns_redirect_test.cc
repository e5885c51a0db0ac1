// The kernel half of egressd's DNS (bpf/lib/dns_redirect.h): every query a
// sandbox sends to port 53, at any address, reaches its own DNS endpoint and
// nothing else; the answer looks as if it came from the resolver it asked.
// The proxy is played by a dnsmasq in the node's netns on the sandbox's
// endpoint (tests/lab/lab_dns.h), answering target.test with 192.0.2.10; the
// world's resolvers (8.8.8.8, 2001:db8::10) answer it with 198.51.100.7 and
// must never see a query.  Clients are real: dig, glibc (getent), and egr-dns-ask (dns_ask.cc).
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "egressd_env.h"
#include "dns_sandboxes.h"
#include "lab_dns.h"

namespace egressd::test {
namespace {

using lab::DnsServer;
using lab::DnsServerSpec;
using lab::kDns4;
using lab::kPodGatewayV4;
using lab::kPodGatewayV6;
using lab::Lab;
using lab::ProbeLine;
using lab::RunResult;
using lab::RunSpec;

constexpr const char* kWorldDns6 = lab::kPublicA6;  // the world's IPv6 resolver
constexpr const char* kName = "target.test";
constexpr const char* kProxyAnswer = "192.0.2.10";
constexpr const char* kProxyAnswer6 = "2001:db8::11";
constexpr const char* kWorldAnswer = "198.51.100.7";
// Default-allow floors: without the redirect every query below would reach
// the world's resolvers, so each test would fail.  hosted also protects
// 10/8, where a cluster's DNS service lives.
const std::vector<std::string> kConnected = {"--floor", "connected"};
const std::vector<std::string> kHosted = {"--floor", "hosted"};

using Sandbox = DnsSandbox;

class DnsRedirect : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    DnsServerSpec world{.netns = Shared().lab().world_netns(),
                        .listen = {kDns4, kWorldDns6},
                        .records = {{kName, {kWorldAnswer}}}};
    auto w = DnsServer::Start(world);
    ASSERT_TRUE(w.ok()) << w.status();
    world_ = std::move(*w).release();
  }
  static void TearDownTestSuite() {
    delete world_;
    world_ = nullptr;
  }
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    ASSERT_NE(world_, nullptr);
    lab().ResetCounters();
    world_before_ = world_->Queries();
  }
  void TearDown() override {
    standins_.clear();
    sandboxes_.RemoveAll();
  }
  Lab& lab() { return Shared().lab(); }

  // A sandbox registered with `policy`, with the pod gateway as its endpoint
  // unless `with_endpoint` is false.
  Sandbox Register(const std::vector<std::string>& policy = kConnected, bool with_endpoint = true) {
    return sandboxes_.Add(policy, with_endpoint);
  }
  static nlohmann::json Record(const Sandbox& s) { return DnsSandboxes::Record(s); }
  // The proxy's stand-in on the sandbox's endpoint, in the node's netns.
  DnsServer* StandIn(const Sandbox& s) {
    DnsServerSpec spec{.netns = lab().node_netns(),
                       .listen = {kPodGatewayV4, kPodGatewayV6},
                       .port = s.port,
                       .records = {{kName, {kProxyAnswer, kProxyAnswer6}}}};
    auto d = DnsServer::Start(spec);
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return nullptr;
    standins_.push_back(std::move(*d));
    return standins_.back().get();
  }
  // A command in pod `pod`'s netns, in the sandbox's cgroup.
  RunResult InSandbox(const Sandbox& s, std::vector<std::string> argv, bool hostile = false, size_t pod = 0) {
    RunSpec spec;
    if (hostile) {
      argv.insert(argv.begin(), {"setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all", "--"});
    }
    spec.argv = std::move(argv);
    spec.netns = lab().pod(pod).netns;
    spec.cgroup = s.cgroup;
    spec.timeout = std::chrono::seconds(20);
    return lab::Run(spec);
  }
  RunResult Dig(const Sandbox& s, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"dig", "+short", "+time=2", "+tries=1"};
    argv.insert(argv.end(), args.begin(), args.end());
    return InSandbox(s, argv);
  }
  std::vector<ProbeLine> Probe(const Sandbox& s, const std::vector<std::string>& args, bool hostile = true) {
    std::vector<std::string> argv = {lab::BinaryPath("egressd-probe")};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = InSandbox(s, argv, hostile);
    last_ = r.Describe();
    return Lines(r);
  }
  uint64_t WorldQueries() const { return world_->Queries() - world_before_; }
  // Nothing reached the world's resolvers: neither their dnsmasq nor the capture.
  void ExpectWorldSawNothing(const std::string& what) {
    ASSERT_TRUE(lab().Drain().ok());
    EXPECT_EQ(WorldQueries(), 0u) << what << "\n" << world_->Log();
    EXPECT_EQ(lab().PacketsTo(kDns4), 0u) << what << "\n" << lab().CountersSummary();
    EXPECT_EQ(lab().PacketsTo(kWorldDns6), 0u) << what << "\n" << lab().CountersSummary();
  }
  std::unique_ptr<NodeUdpCounter> CountAtNode(const std::string& addr, uint16_t port) {
    auto c = NodeUdpCounter::Add(addr, port);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  static inline DnsServer* world_ = nullptr;
  static inline int counter_ = 0;
  uint64_t world_before_ = 0;
  DnsSandboxes sandboxes_{"dns-"};
  std::vector<std::unique_ptr<DnsServer>> standins_;
  std::string last_;
};

std::string FirstLine(const std::string& s) { return std::string(absl::StripAsciiWhitespace(s.substr(0, s.find('\n')))); }

// The lab works as the tests assume: from outside any sandbox, the world's
// resolver answers (so "it saw nothing" below means something).
TEST_F(DnsRedirect, PositiveControlTheWorldsResolverAnswersAnUnregisteredClient) {
  RunSpec spec{.argv = {"dig", "+short", "+time=2", "+tries=1", "@8.8.8.8", kName}};
  spec.netns = lab().pod().netns;
  RunResult r = lab::Run(spec);
  EXPECT_EQ(FirstLine(r.out), kWorldAnswer) << r.Describe();
  EXPECT_EQ(WorldQueries(), 1u) << world_->Log();
}

TEST_F(DnsRedirect, EveryResolverAddressReachesTheSandboxsOwnEndpoint) {
  Sandbox s = Register(kHosted);
  ASSERT_NE(s.port, 0) << Record(s).dump();
  DnsServer* proxy = StandIn(s);
  ASSERT_NE(proxy, nullptr);
  // The world's resolver, a cluster DNS service in 10/8 (protected under the
  // hosted floor) and a node-local cache in 169.254/16, over UDP, TCP and
  // IPv6.  (dig connects its UDP socket, so the kernel matches the answer to
  // the connected endpoint; recvmsg's rewrite is proven by the unconnected
  // clients of ConnectedAndMappedUdpSeeTheResolverTheyAsked.)
  const std::vector<std::vector<std::string>> asks = {
      {"@8.8.8.8", kName},
      {"@10.96.0.10", kName},
      {"@169.254.20.10", kName},
      {"+tcp", "@8.8.8.8", kName},
      {"-6", "@2001:db8::10", kName, "AAAA"},
      {"+tcp", "-6", "@2001:db8::10", kName, "AAAA"},
  };
  uint64_t answered = 0;
  for (const auto& ask : asks) {
    RunResult r = Dig(s, ask);
    const bool v6 = ask.back() == "AAAA";
    EXPECT_EQ(FirstLine(r.out), v6 ? kProxyAnswer6 : kProxyAnswer) << absl::StrJoin(ask, " ") << ": " << r.Describe();
    answered += FirstLine(r.out) == (v6 ? kProxyAnswer6 : kProxyAnswer);
  }
  EXPECT_EQ(proxy->Queries(), answered) << proxy->Log();
  ExpectWorldSawNothing("queries of a sandbox with an endpoint");
}

// A dual-stack IPv6 socket asking an IPv4 resolver (::ffff:8.8.8.8) goes to
// the IPv4 endpoint, and both recvfrom and getpeername show the resolver.
TEST_F(DnsRedirect, ConnectedAndMappedUdpSeeTheResolverTheyAsked) {
  Sandbox s = Register();
  ASSERT_NE(s.port, 0);
  DnsServer* proxy = StandIn(s);
  ASSERT_NE(proxy, nullptr);
  RunResult r = InSandbox(s, {lab::BinaryPath("egr-dns-ask"), kName});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  auto j = nlohmann::json::parse(FirstLine(r.out), nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.Describe();
  auto expect = [&](const char* mode, const std::string& addr, bool connected) {
    const auto& m = j[mode];
    ASSERT_FALSE(m.contains("error")) << mode << ": " << m.dump();
    EXPECT_EQ(m["src"][0], addr) << mode << ": " << m.dump();
    EXPECT_EQ(m["src"][1], 53) << mode << ": " << m.dump();
    EXPECT_EQ(m["id"], 0x1234) << mode;
    if (connected) {
      EXPECT_EQ(m["peer"][0], addr) << mode << ": getpeername " << m.dump();
      EXPECT_EQ(m["peer"][1], 53) << mode << ": getpeername " << m.dump();
    }
  };
  expect("connected4", "8.8.8.8", true);
  expect("connected-mapped", "::ffff:8.8.8.8", true);
  expect("sendto4", "10.96.0.10", false);
  expect("sendto-mapped", "::ffff:169.254.20.10", false);
  expect("sendto6", "2001:db8::10", false);
  EXPECT_EQ(proxy->Queries(), 5u) << proxy->Log();
  ExpectWorldSawNothing("egr-dns-ask's queries");
}

// glibc's stub resolver (getaddrinfo through nsswitch) with the pod's own
// resolv.conf naming a cluster DNS service and 8.8.8.8.
TEST_F(DnsRedirect, GlibcGetaddrinfoResolvesThroughTheEndpoint) {
  Sandbox s = Register();
  ASSERT_NE(s.port, 0);
  DnsServer* proxy = StandIn(s);
  ASSERT_NE(proxy, nullptr);
  char dir[] = "/tmp/egr-dns-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string conf = absl::StrCat(dir, "/resolv.conf");
  std::ofstream(conf) << "nameserver 10.96.0.10\nnameserver 8.8.8.8\noptions timeout:2 attempts:1\n";
  RunResult r = InSandbox(s, {"unshare", "--mount", "--", "sh", "-c",
                              absl::StrCat("mount --bind ", conf, " /etc/resolv.conf && getent ahostsv4 ", kName)});
  unlink(conf.c_str());
  rmdir(dir);
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_TRUE(absl::StartsWith(r.out, kProxyAnswer)) << r.Describe();
  EXPECT_GE(proxy->QueriesFor(kName), 1u) << proxy->Log();
  ExpectWorldSawNothing("glibc's queries");
}

// Fails closed: a sandbox without an endpoint cannot query anyone, over UDP,
// TCP, connected or not, in either family.
TEST_F(DnsRedirect, ASandboxWithoutAnEndpointHasItsQueriesRefused) {
  Sandbox s = Register(kConnected, /*with_endpoint=*/false);
  EXPECT_FALSE(Record(s).contains("dns")) << Record(s).dump();
  auto lines = Probe(s, {"batch", "udp-sendto 8.8.8.8 53", "udp-connected 8.8.8.8 53", "tcp 8.8.8.8 53",
                         "udp-sendto 2001:db8::10 53", "tcp 10.96.0.10 53", "mapped6 8.8.8.8 53 --udp"},
                     /*hostile=*/false);
  ASSERT_EQ(lines.size(), 6u) << last_;
  for (auto& l : lines) EXPECT_EQ(Errno(l), "EPERM") << l["op"] << " " << l["dst"] << ": " << last_;
  ExpectWorldSawNothing("queries of a sandbox without an endpoint");
}

// Naming an endpoint directly (its own, another sandbox's) is refused: only
// the redirect sends anything there, so the proxy's binding cannot be forged.
TEST_F(DnsRedirect, NamingAnEndpointDirectlyIsRefused) {
  Sandbox a = Register();
  Sandbox b = Register();
  ASSERT_NE(a.port, 0);
  ASSERT_NE(b.port, 0);
  ASSERT_NE(a.port, b.port) << "each sandbox has an endpoint of its own";
  auto at_a = CountAtNode(kPodGatewayV4, a.port);
  auto at_a6 = CountAtNode(kPodGatewayV6, a.port);
  const std::string pa = std::to_string(a.port), pb = std::to_string(b.port);
  auto lines = Probe(b, {"batch", "udp-sendto 10.244.0.1 " + pa, "udp-connected 10.244.0.1 " + pa,
                         "tcp 10.244.0.1 " + pa, "udp-sendto fd00:244::1 " + pa, "udp-sendto 10.244.0.1 " + pb,
                         "tcp 10.244.0.1 " + pb});
  ASSERT_EQ(lines.size(), 6u) << last_;
  for (auto& l : lines) EXPECT_EQ(Errno(l), "EPERM") << l["op"] << " " << l["dst"] << ":" << l["port"] << ": " << last_;
  EXPECT_EQ(at_a->Packets(), 0u) << "a datagram reached another sandbox's endpoint";
  EXPECT_EQ(at_a6->Packets(), 0u) << "a datagram reached another sandbox's endpoint over IPv6";
}

// What no socket call names: hand-made UDP on a raw socket, to port 53 of the
// world's resolver and to an endpoint, from the hostile sandbox.  The same
// packets from an unregistered process arrive (positive control).
TEST_F(DnsRedirect, RawPacketsToPort53AndToAnEndpointAreDroppedByTheBackstop) {
  Sandbox a = Register();
  Sandbox hostile = Register(kConnected);
  ASSERT_NE(a.port, 0);
  auto at_endpoint = CountAtNode(kPodGatewayV4, a.port);
  const std::string pa = std::to_string(a.port);
  const std::vector<std::string> attack = {"batch", "raw-udp 8.8.8.8 53", "raw-udp 10.244.0.1 " + pa,
                                           "raw-udp 2001:db8::10 53"};
  auto lines = Probe(hostile, attack);
  ASSERT_EQ(lines.size(), 3u) << last_;
  for (auto& l : lines) EXPECT_ATTEMPTED(l, last_);
  ExpectWorldSawNothing("raw packets of a sandbox");
  EXPECT_EQ(at_endpoint->Packets(), 0u) << "a raw packet reached another sandbox's endpoint";

  RunSpec control{.argv = {"setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all", "--",
                           lab::BinaryPath("egressd-probe")}};
  control.argv.insert(control.argv.end(), attack.begin(), attack.end());
  control.netns = lab().pod().netns;
  RunResult r = lab::Run(control);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().PacketsTo(kDns4) >= 1 && lab().PacketsTo(kWorldDns6) >= 1; }))
      << "positive control: " << lab().CountersSummary();
  EXPECT_TRUE(Lab::WaitFor([&] { return at_endpoint->Packets() == 1; }))
      << "positive control: the endpoint counter saw " << at_endpoint->Packets();
}

// A mark is no exemption: with every SO_MARK value 0-0xff, a default-allow
// sandbox's query to 8.8.8.8 still goes to its endpoint.
TEST_F(DnsRedirect, NoSoMarkValueLetsAQueryPastTheRedirect) {
  Sandbox s = Register(kConnected);
  ASSERT_NE(s.port, 0);
  DnsServer* proxy = StandIn(s);
  ASSERT_NE(proxy, nullptr);
  std::vector<std::string> batch = {"batch"};
  for (int mark = 0; mark <= 0xff; ++mark) batch.push_back(absl::StrCat("so-mark ", mark, " 8.8.8.8 53 --timeout-ms 20"));
  auto lines = Probe(s, batch);
  ASSERT_EQ(lines.size(), 256u) << last_;
  size_t marked = 0;
  for (auto& l : lines) marked += l["mark_result"] == "ok";
  EXPECT_EQ(marked, 256u) << "the sandbox could set every mark (CAP_NET_RAW suffices since 5.17): " << last_;
  ExpectWorldSawNothing("marked queries");
}

// Bad input: exit 2 naming the value, and nothing registered.
TEST_F(DnsRedirect, AnEndpointOfTheWrongFamilyIsRefusedAndNothingIsRegistered) {
  auto cg = lab().MakeCgroup(absl::StrCat("dns-bad-", counter_++));
  ASSERT_TRUE(cg.ok()) << cg.status();
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--dns-endpoint4", "fd00:244::1"}, {"--dns-endpoint6", "10.244.0.1"}, {"--dns-endpoint4", "0.0.0.0"},
           {"--dns-endpoint4", "10.244.0.256"}}) {
    RunResult r = Shared().Ctl({"sandbox", "add", "--cgroup", *cg, "--floor", "connected", flag, value});
    EXPECT_EQ(r.exit_code, 2) << flag << " " << value << ": " << r.Describe();
    EXPECT_NE(r.err.find(value), std::string::npos) << r.Describe();
  }
  struct stat st {};
  ASSERT_EQ(stat(cg->c_str(), &st), 0);
  EXPECT_NE(access(absl::StrCat(Shared().runtime_dir(), "/sandboxes/", st.st_ino, ".json").c_str(), F_OK), 0)
      << "a refused registration left a record";
}

// Removal takes the endpoint away: a sandbox registered again after its
// remove is given the lowest free port again, and a second sandbox another.
TEST_F(DnsRedirect, EndpointPortsAreUniqueAndFreedOnRemove) {
  Sandbox a = Register();
  Sandbox b = Register();
  ASSERT_NE(a.port, 0);
  ASSERT_NE(b.port, 0);
  EXPECT_NE(a.port, b.port);
  RunResult r = Shared().Ctl({"sandbox", "remove", "--cgroup", a.cgroup});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  Sandbox c = Register();
  EXPECT_EQ(c.port, a.port) << "the removed sandbox's port was not freed";
  // b's queries still reach b's endpoint, and only b's.
  DnsServer* proxy_b = StandIn(b);
  ASSERT_NE(proxy_b, nullptr);
  EXPECT_EQ(FirstLine(Dig(b, {"@8.8.8.8", kName}).out), kProxyAnswer);
  EXPECT_EQ(proxy_b->Queries(), 1u) << proxy_b->Log();
}

}  // namespace
}  // namespace egressd::test
