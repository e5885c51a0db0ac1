// Names end to end, on the node-routed lab: the kernel redirect
// (bpf/lib/dns_redirect.h) and the real proxy (`egressctl dns serve`, running
// in the node's netns outside every sandbox cgroup) together.  A pod asks
// 8.8.8.8 or a cluster DNS service; its query reaches its own endpoint on the
// pod gateway; the proxy asks the lab's upstream (a dnsmasq in the world at
// 198.51.100.8) only for names in scope, learns the answer into that
// sandbox's egr_resolved_v2 entries before releasing it, and the pod's
// connect to the learned address then succeeds.  The world's 8.8.8.8 (also
// a dnsmasq, answering differently) must see nothing.  Clients: dig, glibc
// (getent) and egressd-probe, which the 6.1 guest carries (no python3; no
// head or grep either: the scripts use sh alone).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "egressd_env.h"
#include "dns_sandboxes.h"
#include "lab_dns.h"

namespace egressd::test {
namespace {

using namespace std::chrono_literals;
using lab::DnsServer;
using lab::DnsServerSpec;
using lab::kPodGatewayV4;
using lab::kPodGatewayV6;
using lab::Lab;
using lab::ProbeLine;
using lab::RunResult;
using lab::RunSpec;

constexpr const char* kUpstream = lab::kPublicE4;  // the lab's resolver: egressd's upstream
constexpr const char* kWorld8 = lab::kDns4;        // 8.8.8.8: must see nothing
constexpr const char* kAllowed = "allowed.example";
constexpr const char* kAllowed4 = lab::kPublicA4;  // 192.0.2.10
constexpr const char* kAllowed6 = lab::kPublicA6;  // 2001:db8::10
constexpr const char* kDenied = "denied.example";
constexpr const char* kOnlyB = "onlyb.example";    // 192.0.2.11, allowed to sandbox B only
constexpr const char* kMeta = "meta.example";      // CNAME to a name at 169.254.169.254

std::string FirstLine(const std::string& s) {
  return std::string(absl::StripAsciiWhitespace(s.substr(0, s.find('\n'))));
}

using Sandbox = DnsSandbox;

class DnsEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    Lab& lab = Shared().lab();
    auto up = DnsServer::Start(DnsServerSpec{
        .netns = lab.world_netns(),
        .listen = {kUpstream},
        .records = {{kAllowed, {kAllowed4, kAllowed6}},
                    {kDenied, {lab::kPublicB4}},
                    {kOnlyB, {lab::kPublicB4}},
                    {"imds.example", {lab::kImds4}},
                    {"a.b.example.net", {lab::kPublicC4}},
                    {"example.net", {lab::kPublicC4}}},
        .cnames = {{kMeta, "imds.example"}}});
    ASSERT_TRUE(up.ok()) << up.status();
    upstream_ = std::move(*up).release();
    auto w = DnsServer::Start(DnsServerSpec{.netns = lab.world_netns(),
                                            .listen = {kWorld8},
                                            .records = {{kAllowed, {lab::kPublicD4}}}});
    ASSERT_TRUE(w.ok()) << w.status();
    world8_ = std::move(*w).release();
  }
  static void TearDownTestSuite() {
    delete upstream_;
    delete world8_;
    upstream_ = world8_ = nullptr;
  }
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    ASSERT_NE(upstream_, nullptr);
    lab().ResetCounters();
    upstream_before_ = upstream_->Log().size();
    world8_before_ = world8_->Queries();
  }
  void TearDown() override {
    if (serve_) serve_->Stop();
    sandboxes_.RemoveAll();
  }
  Lab& lab() { return Shared().lab(); }

  Sandbox Register(const std::vector<std::string>& policy) { return sandboxes_.Add(policy); }

  // `egressctl dns serve` in the node netns, outside every sandbox cgroup;
  // returns once it said ready (every endpoint bound).
  void Serve() {
    RunSpec s;
    s.netns = lab().node_netns();
    s.env = Shared().CtlEnv();
    s.argv = {lab::BinaryPath("egressctl"), "dns", "serve", "--upstream-dns", kUpstream};
    auto bg = lab::Start(s);
    ASSERT_TRUE(bg.ok()) << bg.status();
    serve_ = std::move(*bg);
    for (;;) {
      auto line = serve_->ReadOutLine(10s);
      ASSERT_TRUE(line) << "dns serve never said ready: " << serve_->err();
      if (absl::StartsWith(*line, "ready:")) break;
    }
  }

  RunResult InSandbox(const Sandbox& s, std::vector<std::string> argv, bool hostile = false) {
    if (hostile) argv.insert(argv.begin(), {"setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all", "--"});
    RunSpec spec;
    spec.argv = std::move(argv);
    spec.netns = lab().pod().netns;
    spec.cgroup = s.cgroup;
    spec.timeout = 20s;
    return lab::Run(spec);
  }
  RunResult Dig(const Sandbox& s, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"dig", "+time=2", "+tries=1"};
    argv.insert(argv.end(), args.begin(), args.end());
    return InSandbox(s, argv);
  }
  // A TCP connect from the (hostile) sandbox; the probe's one line.
  ProbeLine Connect(const Sandbox& s, const std::string& addr, uint16_t port = 80) {
    RunResult r = InSandbox(s, {lab::BinaryPath("egressd-probe"), "batch", absl::StrCat("tcp ", addr, " ", port)},
                            /*hostile=*/true);
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? ProbeLine{} : lines[0];
  }
  // Upstream queries for `name` since this test began.
  uint64_t UpstreamQueriesFor(const std::string& name) const {
    const std::string log = upstream_->Log().substr(upstream_before_);
    uint64_t n = 0;
    for (size_t at = 0; (at = log.find("] " + name + " from", at)) != std::string::npos; ++at) ++n;
    return n;
  }
  void ExpectWorld8SawNothing() {
    ASSERT_TRUE(lab().Drain().ok());
    EXPECT_EQ(world8_->Queries(), world8_before_) << world8_->Log();
    EXPECT_EQ(lab().PacketsTo(kWorld8), 0u) << lab().CountersSummary();
  }

  static inline DnsServer* upstream_ = nullptr;
  static inline DnsServer* world8_ = nullptr;
  size_t upstream_before_ = 0;
  uint64_t world8_before_ = 0;
  DnsSandboxes sandboxes_{"dnse2e-"};
  std::optional<lab::Background> serve_;
};

// The whole story for one pod: the address is refused before the name is
// asked, glibc (resolv.conf naming a cluster service and 8.8.8.8) and dig get
// the upstream's answer, the connect then arrives at the lab host; a denied
// name is NXDOMAIN and never reaches the upstream; 8.8.8.8 sees nothing.
TEST_F(DnsEndToEnd, APodResolvesAnAllowedNameThenConnectsAndADeniedNameLeaksNothing) {
  Sandbox s = Register({"--egress", kAllowed});
  Serve();
  ProbeLine before = Connect(s, kAllowed4);
  EXPECT_EQ(Errno(before), "EPERM") << "an address no answer taught is refused";

  char dir[] = "/tmp/egr-dnse2e-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string conf = absl::StrCat(dir, "/resolv.conf");
  std::ofstream(conf) << "nameserver 10.96.0.10\nnameserver 8.8.8.8\noptions timeout:2 attempts:1\n";
  RunResult g = InSandbox(s, {"unshare", "--mount", "--", "sh", "-c",
                              absl::StrCat("mount --bind ", conf, " /etc/resolv.conf && getent ahostsv4 ", kAllowed,
                                           " && ! getent ahostsv4 ", kDenied)});
  unlink(conf.c_str());
  rmdir(dir);
  EXPECT_EQ(g.exit_code, 0) << g.Describe();
  EXPECT_TRUE(absl::StartsWith(g.out, kAllowed4)) << g.Describe();

  RunResult d = Dig(s, {"+short", "@8.8.8.8", kAllowed});
  EXPECT_EQ(FirstLine(d.out), kAllowed4) << d.Describe();
  ProbeLine after = Connect(s, kAllowed4);
  EXPECT_TRUE(Ok(after)) << "the learned address: " << after["errno"];
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kAllowed4, 80) == 1; })) << lab().CountersSummary();

  RunResult denied = Dig(s, {"@10.96.0.10", kDenied});
  EXPECT_NE(denied.out.find("status: NXDOMAIN"), std::string::npos) << denied.Describe();
  EXPECT_NE(denied.out.find("EDE: 15 (Blocked)"), std::string::npos) << denied.Describe();
  EXPECT_GE(UpstreamQueriesFor(kAllowed), 1u) << "positive control: " << upstream_->Log();
  EXPECT_EQ(UpstreamQueriesFor(kDenied), 0u) << "a denied name reached the upstream: " << upstream_->Log();
  EXPECT_EQ(Errno(Connect(s, lab::kPublicB4)), "EPERM") << "the denied name's address";
  EXPECT_EQ(lab().TcpAccepts(lab::kPublicB4, 80), 0u);
  ExpectWorld8SawNothing();
}

// TCP DNS and IPv6: dig +tcp for AAAA over an IPv6 resolver address, then a
// connect over IPv6 to the learned address.
TEST_F(DnsEndToEnd, TcpAndIpv6QueriesTeachAnAddressTheSandboxThenReachesOverIpv6) {
  Sandbox s = Register({"--egress", kAllowed});
  Serve();
  EXPECT_EQ(Errno(Connect(s, kAllowed6)), "EPERM");
  RunResult d = Dig(s, {"+short", "+tcp", "-6", "@2001:db8::53", kAllowed, "AAAA"});
  EXPECT_EQ(FirstLine(d.out), kAllowed6) << d.Describe();
  ProbeLine after = Connect(s, kAllowed6);
  EXPECT_TRUE(Ok(after)) << after["errno"];
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kAllowed6, 80) == 1; })) << lab().CountersSummary();
  RunResult t4 = Dig(s, {"+short", "+tcp", "@8.8.8.8", kAllowed});
  EXPECT_EQ(FirstLine(t4.out), kAllowed4) << t4.Describe();
  ExpectWorld8SawNothing();
}

// A CNAME to the metadata address: the answer carries no address and the
// connect is refused (the floor's ranges are never learned).
TEST_F(DnsEndToEnd, ACnameToTheMetadataAddressOpensNothing) {
  Sandbox s = Register({"--egress", kMeta});
  Serve();
  RunResult d = Dig(s, {"+short", "@8.8.8.8", kMeta});
  EXPECT_EQ(d.out.find(lab::kImds4), std::string::npos) << d.Describe();
  EXPECT_GE(UpstreamQueriesFor(kMeta), 1u) << "positive control: it was asked: " << upstream_->Log();
  EXPECT_EQ(Errno(Connect(s, lab::kImds4)), "EPERM");
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().PacketsTo(lab::kImds4), 0u) << lab().CountersSummary();
}

// Learned addresses belong to the sandbox whose query taught them.
TEST_F(DnsEndToEnd, ASecondSandboxCannotConnectToAnAddressOnlyTheFirstLearned) {
  Sandbox a = Register({"--egress", kOnlyB, "--egress", kAllowed});
  Sandbox b = Register({"--egress", kAllowed});
  Serve();
  EXPECT_EQ(FirstLine(Dig(a, {"+short", "@8.8.8.8", kOnlyB}).out), lab::kPublicB4);
  EXPECT_TRUE(Ok(Connect(a, lab::kPublicB4))) << "positive control";
  EXPECT_EQ(Errno(Connect(b, lab::kPublicB4)), "EPERM");
  RunResult denied = Dig(b, {"@8.8.8.8", kOnlyB});
  EXPECT_NE(denied.out.find("status: NXDOMAIN"), std::string::npos) << denied.Describe();
  EXPECT_EQ(Errno(Connect(b, lab::kPublicB4)), "EPERM");
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(lab::kPublicB4, 80) == 1; })) << lab().CountersSummary();
}

// A wildcard allows names below its suffix, never the apex.
TEST_F(DnsEndToEnd, AWildcardAllowsNamesBelowItButNotItsApex) {
  Sandbox s = Register({"--egress", "*.example.net"});
  Serve();
  EXPECT_EQ(FirstLine(Dig(s, {"+short", "@8.8.8.8", "a.b.example.net"}).out), lab::kPublicC4);
  RunResult apex = Dig(s, {"@8.8.8.8", "example.net"});
  EXPECT_NE(apex.out.find("status: NXDOMAIN"), std::string::npos) << apex.Describe();
  EXPECT_EQ(UpstreamQueriesFor("example.net"), 0u) << upstream_->Log();
  EXPECT_GE(UpstreamQueriesFor("a.b.example.net"), 1u) << upstream_->Log();
  EXPECT_TRUE(Ok(Connect(s, lab::kPublicC4)));
}

}  // namespace
}  // namespace egressd::test

namespace egressd::test {
namespace {

// Placement 3: `egressctl run` inside another namespace (here a pod's) serves
// its own sandbox's DNS in process, on the pod's loopback with a port of its
// own, asking the upstream it was given; the command resolves with glibc and
// connects, and a denied name is NXDOMAIN without reaching the upstream.
TEST_F(DnsEndToEnd, EgressctlRunServesItsOwnSandboxsNamesInProcess) {
  const std::string probe = lab::BinaryPath("egressd-probe");
  const std::string script = absl::StrCat(probe, " batch 'tcp ", kAllowed4, " 80'; getent ahostsv4 ", kAllowed,
                                          "; ", probe, " batch 'tcp ", kAllowed4,
                                          " 80'; dig +time=2 +tries=1 @8.8.8.8 ", kDenied);
  RunResult r = Shared().CtlIn(lab().pod().netns, {"-v", "run", "--egress", kAllowed, "--upstream-dns", kUpstream,
                                                   "--", "sh", "-c", script});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  auto lines = Lines(r);
  ASSERT_EQ(lines.size(), 2u) << r.Describe();
  EXPECT_EQ(Errno(lines[0]), "EPERM") << "before the name was asked: " << r.Describe();
  EXPECT_TRUE(Ok(lines[1])) << "after getaddrinfo: " << r.Describe();
  EXPECT_NE(r.out.find(absl::StrCat(kAllowed4, " ")), std::string::npos) << r.Describe();
  EXPECT_NE(r.out.find("status: NXDOMAIN"), std::string::npos) << r.Describe();
  EXPECT_NE(r.err.find("dns: serving sandbox"), std::string::npos) << r.Describe();
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kAllowed4, 80) == 1; })) << lab().CountersSummary();
  EXPECT_GE(UpstreamQueriesFor(kAllowed), 1u) << upstream_->Log();
  EXPECT_EQ(UpstreamQueriesFor(kDenied), 0u) << upstream_->Log();
  ExpectWorld8SawNothing();
}

// egressctl killed while its command runs: the endpoint went with it, so the
// command's queries are refused (DNS fails closed), and the kernel still
// enforces its policy (an address no answer taught stays refused).
TEST_F(DnsEndToEnd, EgressctlRunKilledLeavesItsCommandWithoutDnsAndStillEnforced) {
  char dir[] = "/run/egr-dnse2e-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string fifo = absl::StrCat(dir, "/go");
  // Removed however the test ends.
  struct Cleanup {
    std::string fifo, dir;
    ~Cleanup() {
      unlink(fifo.c_str());
      rmdir(dir.c_str());
    }
  } cleanup{fifo, dir};
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string probe = lab::BinaryPath("egressd-probe");
  const std::string script =
      absl::StrCat("echo started; read go < ", fifo, "; dig +short +time=1 +tries=1 @8.8.8.8 ", kAllowed,
                   "; echo dig=$?; ", probe, " batch 'tcp ", lab::kPublicB4, " 80'");
  RunSpec spec;
  spec.argv = {lab::BinaryPath("egressctl"), "run", "--egress", kAllowed, "--upstream-dns", kUpstream,
               "--readable", dir, "--", "sh", "-c", script};
  spec.netns = lab().pod().netns;
  spec.env = Shared().CtlEnv();
  spec.timeout = 30s;
  auto bg = lab::Start(spec);
  ASSERT_TRUE(bg.ok()) << bg.status();
  auto started = bg->ReadOutLine(10s);
  ASSERT_EQ(started.value_or(""), "started") << bg->err();
  const pid_t egressctl = bg->pid();
  const std::string cgroups = absl::StrCat(Lab::cgroup2_root(), "/egressd");
  ASSERT_EQ(kill(egressctl, SIGKILL), 0);
  // Reaped: its sockets are closed.
  int status = 0;
  ASSERT_EQ(waitpid(egressctl, &status, 0), egressctl);
  // The command's `read` takes this line whenever it opens the fifo (held
  // open read-write here until its output arrived, so the line is not lost).
  int go = open(fifo.c_str(), O_RDWR);
  ASSERT_GE(go, 0) << fifo << ": " << strerror(errno);
  ASSERT_EQ(write(go, "go\n", 3), 3);
  std::vector<std::string> out;
  for (auto line = bg->ReadOutLine(15s); line; line = bg->ReadOutLine(15s)) {
    out.push_back(*line);
    if (absl::StrContains(*line, "\"op\"")) break;
  }
  close(go);
  std::string all = absl::StrJoin(out, "\n");
  EXPECT_NE(all.find("dig=9"), std::string::npos) << "dig reached no server: " << all << "\n" << bg->err();
  EXPECT_EQ(all.find(kAllowed4), std::string::npos) << all;
  auto lines = lab::ParseProbeLines(all);
  ASSERT_EQ(lines.size(), 1u) << all;
  EXPECT_EQ(Errno(lines[0]), "EPERM") << all;
  // The orphaned sandbox: its processes killed, then unregistered.
  for (const auto& e : std::filesystem::directory_iterator(cgroups)) {
    if (!absl::StartsWith(e.path().filename().string(), absl::StrCat("run-", egressctl, "-"))) continue;
    std::ofstream(e.path() / "cgroup.kill") << "1\n";
    RunResult rm = Shared().Ctl({"sandbox", "remove", "--cgroup", e.path().string()});
    EXPECT_EQ(rm.exit_code, 0) << rm.Describe();
  }
}

// Names with no upstream to ask are bad input: exit 2 naming the fix, and
// nothing runs.
TEST_F(DnsEndToEnd, EgressctlRunWithABadUpstreamIsExitTwo) {
  RunResult r = Shared().CtlIn(lab().pod().netns,
                               {"run", "--egress", kAllowed, "--upstream-dns", "resolver.example", "--", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_NE(r.err.find("\"resolver.example\""), std::string::npos) << r.Describe();
}

}  // namespace
}  // namespace egressd::test
