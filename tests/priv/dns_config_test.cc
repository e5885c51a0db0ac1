// The deployment config's dns: keys, end to end (docs/policy.md, docs/dns.md):
// a setup that names the upstream and the endpoints only in the config
// serves a pod's DNS; flags win over the config; a bad value is exit 2 naming
// it, with nothing registered; `egressctl run` asks the config's upstreams.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
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

namespace egressd::test {
namespace {

using namespace std::chrono_literals;
using lab::DnsServer;
using lab::DnsServerSpec;
using lab::Lab;
using lab::ProbeLine;
using lab::RunResult;
using lab::RunSpec;

constexpr const char* kUpstream = lab::kPublicE4;     // the lab's resolver
constexpr const char* kNoResolver = lab::kPublicF4;   // a lab host that serves no DNS
constexpr const char* kName = "cfg-allowed.example";  // 192.0.2.10 upstream
constexpr const char* kDeniedName = "cfg-denied.example";

std::string FirstLine(const std::string& s) {
  return std::string(absl::StripAsciiWhitespace(s.substr(0, s.find('\n'))));
}

class DnsConfig : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    auto u = DnsServer::Start(DnsServerSpec{.netns = Shared().lab().world_netns(),
                                            .listen = {kUpstream},
                                            .records = {{kName, {lab::kPublicA4}}, {kDeniedName, {lab::kPublicB4}}}});
    ASSERT_TRUE(u.ok()) << u.status();
    upstream_ = std::move(*u).release();
  }
  static void TearDownTestSuite() {
    delete upstream_;
    upstream_ = nullptr;
  }
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    ASSERT_NE(upstream_, nullptr);
    Shared().lab().ResetCounters();
    char dir[] = "/run/egr-dnscfg-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    if (serve_) serve_->Stop();
    sandboxes_.RemoveAll();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  Lab& lab() { return Shared().lab(); }

  std::string Config(const std::string& name, const std::string& text) {
    const std::string path = absl::StrCat(dir_, "/", name);
    std::ofstream(path) << text;
    return path;
  }
  RunResult InPod(const DnsSandbox& s, std::vector<std::string> argv) {
    RunSpec spec;
    spec.argv = std::move(argv);
    spec.netns = lab().pod().netns;
    spec.cgroup = s.cgroup;
    spec.hostile = true;
    spec.timeout = 20s;
    return lab::Run(spec);
  }
  ProbeLine Connect(const DnsSandbox& s, const std::string& addr) {
    RunResult r = InPod(s, {lab::BinaryPath("egressd-probe"), "batch", absl::StrCat("tcp ", addr, " 80")});
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? ProbeLine{} : lines[0];
  }
  RunResult Dig(const DnsSandbox& s, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"dig", "+time=2", "+tries=1"};
    argv.insert(argv.end(), args.begin(), args.end());
    return InPod(s, argv);
  }

  static inline DnsServer* upstream_ = nullptr;
  std::string dir_;
  DnsSandboxes sandboxes_{"dnscfg-"};
  std::optional<lab::Background> serve_;
};

// No --dns-endpoint4/6 and no --upstream-dns anywhere: the config names both.
TEST_F(DnsConfig, AConfigOnlySetupServesAPodsDns) {
  const std::string cfg =
      Config("egressd.yaml", absl::StrCat("dns:\n  upstreams: [", kUpstream, "]\n  endpoint4: ", lab::kPodGatewayV4,
                                          "\n  endpoint6: \"", lab::kPodGatewayV6, "\"\n"));
  DnsSandbox s = sandboxes_.Add({"--config", cfg, "--egress", kName}, /*pod_endpoint=*/false);
  nlohmann::json rec = DnsSandboxes::Record(s);
  ASSERT_TRUE(rec.is_object() && rec.contains("dns")) << rec.dump();
  EXPECT_EQ(rec["dns"].value("addr4", ""), lab::kPodGatewayV4) << rec.dump();
  EXPECT_EQ(rec["dns"].value("addr6", ""), lab::kPodGatewayV6) << rec.dump();
  ASSERT_NE(s.port, 0);
  auto serve = ServeDns({"--config", cfg});
  ASSERT_TRUE(serve.ok()) << serve.status();
  serve_ = std::move(*serve);

  EXPECT_EQ(Errno(Connect(s, lab::kPublicA4)), "EPERM");
  RunResult d = Dig(s, {"+short", "@8.8.8.8", kName});
  EXPECT_EQ(FirstLine(d.out), lab::kPublicA4) << d.Describe();
  EXPECT_TRUE(Ok(Connect(s, lab::kPublicA4)));
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(lab::kPublicA4, 80) == 1; })) << lab().CountersSummary();
  RunResult denied = Dig(s, {"@8.8.8.8", kDeniedName});
  EXPECT_NE(denied.out.find("status: NXDOMAIN"), std::string::npos) << denied.Describe();
  EXPECT_GE(upstream_->QueriesFor(kName), 1u) << upstream_->Log();
  EXPECT_EQ(upstream_->QueriesFor(kDeniedName), 0u) << upstream_->Log();
}

// Flags win: --upstream-dns over dns.upstreams (the config's names a host
// with no DNS server, so an answer proves the flag's was asked), and either
// --dns-endpoint flag over both endpoint keys.
TEST_F(DnsConfig, FlagsWinOverTheConfig) {
  const std::string cfg = Config("egressd.yaml", absl::StrCat("dns:\n  upstreams: [", kNoResolver,
                                                              "]\n  endpoint4: 10.244.0.254\n"
                                                              "  endpoint6: \"fd00:244::fe\"\n"));
  DnsSandbox s = sandboxes_.Add({"--config", cfg, "--egress", kName, "--dns-endpoint4", lab::kPodGatewayV4},
                                /*pod_endpoint=*/false);
  nlohmann::json rec = DnsSandboxes::Record(s);
  ASSERT_TRUE(rec.is_object() && rec.contains("dns")) << rec.dump();
  EXPECT_EQ(rec["dns"].value("addr4", ""), lab::kPodGatewayV4) << rec.dump();
  EXPECT_FALSE(rec["dns"].contains("addr6") && !rec["dns"]["addr6"].is_null()) << rec.dump();
  auto serve = ServeDns({"--config", cfg, "--upstream-dns", kUpstream});
  ASSERT_TRUE(serve.ok()) << serve.status();
  serve_ = std::move(*serve);
  RunResult d = Dig(s, {"+short", "@8.8.8.8", kName});
  EXPECT_EQ(FirstLine(d.out), lab::kPublicA4) << d.Describe();
}

// Bad values: exit 2 naming the value, nothing registered, nothing served.
TEST_F(DnsConfig, ABadDnsValueIsExitTwoNamingItAndNothingChanges) {
  const std::string bad_ep = Config("bad-endpoint.yaml", "dns:\n  endpoint4: \"fd00:244::1\"\n");
  auto cg = lab().MakeCgroup("dnscfg-bad");
  ASSERT_TRUE(cg.ok()) << cg.status();
  RunResult add = Shared().Ctl({"sandbox", "add", "--cgroup", *cg, "--config", bad_ep, "--egress", kName});
  EXPECT_EQ(add.exit_code, 2) << add.Describe();
  EXPECT_NE(add.err.find("dns.endpoint4 \"fd00:244::1\""), std::string::npos) << add.Describe();
  struct stat st {};
  ASSERT_EQ(stat(cg->c_str(), &st), 0);
  EXPECT_NE(access(absl::StrCat(Shared().runtime_dir(), "/sandboxes/", st.st_ino, ".json").c_str(), F_OK), 0)
      << "a refused registration left a record";

  const std::string bad_up = Config("bad-upstream.yaml", "dns:\n  upstreams: [resolver.example]\n");
  RunResult serve = Shared().Ctl({"dns", "serve", "--config", bad_up});
  EXPECT_EQ(serve.exit_code, 2) << serve.Describe();
  EXPECT_NE(serve.err.find("\"resolver.example\""), std::string::npos) << serve.Describe();
  EXPECT_EQ(serve.out.find("ready:"), std::string::npos) << serve.Describe();
  RunResult run = Shared().CtlIn(lab().pod().netns, {"run", "--config", bad_up, "--egress", kName, "--", "true"});
  EXPECT_EQ(run.exit_code, 2) << run.Describe();
  EXPECT_NE(run.err.find("\"resolver.example\""), std::string::npos) << run.Describe();
  // No upstream anywhere for dns serve: exit 2 naming both ways to give one.
  RunResult none = Shared().Ctl({"dns", "serve", "--config", Config("empty.yaml", "airgapped: false\n")});
  EXPECT_EQ(none.exit_code, 2) << none.Describe();
  EXPECT_NE(none.err.find("dns.upstreams"), std::string::npos) << none.Describe();
}

// egressctl run asks the config's upstreams before the node's resolv.conf.
TEST_F(DnsConfig, RunAsksTheConfigsUpstreams) {
  const std::string cfg = Config("egressd.yaml", absl::StrCat("dns:\n  upstreams: [\"", kUpstream, ":53\"]\n"));
  RunResult r = Shared().CtlIn(lab().pod().netns, {"-v", "run", "--config", cfg, "--egress", kName, "--", "dig",
                                                   "+short", "+time=2", "+tries=1", "@8.8.8.8", kName});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(FirstLine(r.out), lab::kPublicA4) << r.Describe();
  EXPECT_NE(r.err.find(absl::StrCat("upstream ", kUpstream, ":53")), std::string::npos) << r.Describe();
}

// The config's lifetime (dns.minTtlSeconds, dns.graceSeconds) end to end:
// an answer with TTL 0 (dnsmasq's local records) is allowed for the minimum
// plus the grace, `egressctl status` shows the learned address with its
// expiry and the rule that taught it, and a new connect after that deadline
// is refused until the name is asked again, while a TCP connection made
// before it goes on past it.
TEST_F(DnsConfig, ALearnedAddressLivesForTheConfigsLifetimeAndStatusShowsIt) {
  // The lifetime (minTtlSeconds + graceSeconds) and every step timed against
  // it scale under EGR_TIME_SCALE: in a TCG guest the dig, the status and the
  // pod's first round alone take longer than the 1 + 1 s it is here.
  const int k = std::max(1, static_cast<int>(std::ceil(TimeScale())));
  const std::string cfg = Config(
      "egressd.yaml", absl::StrCat("dns:\n  upstreams: [", kUpstream, "]\n  endpoint4: ", lab::kPodGatewayV4,
                                   "\n  endpoint6: \"", lab::kPodGatewayV6,
                                   "\"\n  minTtlSeconds: ", k, "\n  graceSeconds: ", k, "\n"));
  DnsSandbox s = sandboxes_.Add({"--config", cfg, "--egress", kName}, /*pod_endpoint=*/false);
  ASSERT_NE(s.port, 0);
  auto serve = ServeDns({"--config", cfg});
  ASSERT_TRUE(serve.ok()) << serve.status();
  serve_ = std::move(*serve);

  RunResult d = Dig(s, {"+short", "@8.8.8.8", kName});
  const auto answered = std::chrono::steady_clock::now();  // the answer came before this
  ASSERT_EQ(FirstLine(d.out), lab::kPublicA4) << d.Describe();
  EXPECT_TRUE(Ok(Connect(s, lab::kPublicA4))) << "within the lifetime";

  RunResult st = Shared().Ctl({"status", "--json"});
  ASSERT_EQ(st.exit_code, 0) << st.Describe();
  nlohmann::json j = nlohmann::json::parse(st.out, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("learned")) << st.out;
  const nlohmann::json* entry = nullptr;
  for (const auto& e : j["learned"]["entries"]) {
    if (e.value("sandbox", uint64_t{0}) == s.id && e.value("address", "") == lab::kPublicA4) entry = &e;
  }
  ASSERT_NE(entry, nullptr) << "the learned address of sandbox " << s.id << ": " << j["learned"].dump();
  EXPECT_EQ((*entry)["rules"], nlohmann::json::array({kName})) << entry->dump();
  EXPECT_LE((*entry)["expires_in_s"].get<int64_t>(), 2 * k) << "TTL 0: minTtlSeconds + graceSeconds";
  EXPECT_EQ((*entry)["keep_s"].get<uint32_t>(), static_cast<uint32_t>(k)) << entry->dump();

  // A TCP connection made within the lifetime outlives it: rounds echoed
  // every 500 ms for 3.5 s, the last ones after the deadline (2 s; times k).
  RunResult hold = InPod(s, {lab::BinaryPath("egressd-probe"), "batch",
                             absl::StrCat("hold ", lab::kPublicA4, " 80 --interval-ms ", 500 * k, " --count 7")});
  auto rounds = Lines(hold);
  ASSERT_EQ(rounds.size(), 8u) << hold.Describe();
  for (const auto& r : rounds) EXPECT_TRUE(Ok(r)) << hold.Describe();
  const long long deadline_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>((answered + 2s * k).time_since_epoch()).count();
  EXPECT_GT(std::stoll(rounds.back()["start_ms"]), deadline_ms) << "the last round came after the expiry";
  // Waiting for the deadline itself (2 s after the answer), not for an event.
  std::this_thread::sleep_until(answered + 2500ms * k);
  EXPECT_EQ(Errno(Connect(s, lab::kPublicA4)), "EPERM") << "a new connect after expiry plus grace";
  RunResult again = Dig(s, {"+short", "@8.8.8.8", kName});
  EXPECT_EQ(FirstLine(again.out), lab::kPublicA4) << again.Describe();
  EXPECT_TRUE(Ok(Connect(s, lab::kPublicA4))) << "positive control: asked again, learned again";
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(lab::kPublicA4, 80) == 3; })) << lab().CountersSummary();
}

// A policy change that removes a name keeps what the still-allowed names
// taught and drops the rest at once: right after the flip returns, a connect
// to the address learned only through the removed name is refused, while the
// kept name's address still connects without being asked again.
TEST_F(DnsConfig, APolicyChangeDropsOnlyTheRemovedNamesAddresses) {
  const std::string cfg =
      Config("egressd.yaml", absl::StrCat("dns:\n  upstreams: [", kUpstream, "]\n  endpoint4: ", lab::kPodGatewayV4,
                                          "\n  endpoint6: \"", lab::kPodGatewayV6, "\"\n"));
  DnsSandbox s = sandboxes_.Add({"--config", cfg, "--egress", kName, "--egress", kDeniedName}, /*pod_endpoint=*/false);
  ASSERT_NE(s.port, 0);
  auto serve = ServeDns({"--config", cfg});
  ASSERT_TRUE(serve.ok()) << serve.status();
  serve_ = std::move(*serve);
  ASSERT_EQ(FirstLine(Dig(s, {"+short", "@8.8.8.8", kName}).out), lab::kPublicA4);
  ASSERT_EQ(FirstLine(Dig(s, {"+short", "@8.8.8.8", kDeniedName}).out), lab::kPublicB4);
  EXPECT_TRUE(Ok(Connect(s, lab::kPublicB4))) << "before the change";

  RunResult flip = Shared().Ctl({"sandbox", "add", "--cgroup", s.cgroup, "--config", cfg, "--egress", kName});
  ASSERT_EQ(flip.exit_code, 0) << flip.Describe();
  EXPECT_EQ(Errno(Connect(s, lab::kPublicB4)), "EPERM") << "learned only through the removed name";
  EXPECT_TRUE(Ok(Connect(s, lab::kPublicA4))) << "the kept name's address, not asked again";
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(lab::kPublicA4, 80) == 1; })) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(lab::kPublicB4, 80), 1u) << "only the connect before the change arrived";
}

}  // namespace
}  // namespace egressd::test
