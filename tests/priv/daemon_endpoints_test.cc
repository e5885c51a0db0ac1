// The daemon's GET /v1/audit, its /metrics over TCP, and its own endpoints
// unreachable from every sandbox (issue 14), on the node-routed lab: the
// daemon in the node's netns, one daemon process per test (adopting the
// pinned programs of the binary's one loaded instance: milliseconds).
//
//   - GET /v1/audit: a sandbox's denied connect arrives on a follow=1 stream
//     while it is open, filtered by the same code as `egressctl audit`
//     (sandbox by API id, verdict, type); without follow the stream ends;
//     a bad filter is 400 naming it; `egressctl audit` reads through the
//     daemon when its socket answers and the trail itself when none does
//     (its debug log says which).  A lone allowed connect is on the stream
//     within 250 ms (the daemon takes the ring every 50 ms: no wake-up
//     announces it).
//   - /metrics on --metrics-address (the DaemonSet's per-node flag, over the
//     config's metrics.address; the node's address on the pod veths): what
//     `egressctl metrics` renders, promtool-valid, from the node.
//   - The attack, as root with only CAP_NET_RAW: first with the guard's
//     entry removed from egr_dnsep_v1, a pod sandbox scrapes /metrics (the
//     attack works); with it restored, a pod sandbox and an
//     `egressctl run` sandbox in the node netns, each with a policy that
//     allows the node's address, connect to the metrics port: refused in the
//     kernel (dns_deny counts each: egressd's own endpoint guard in
//     egr_dnsep_v1), while a scrape from the node outside any sandbox gets
//     its answer.  The API socket from a sandboxed root: 403, counted in
//     refused_callers; the same request from the node: 200.
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon_harness.h"
#include "egressd_env.h"
#include "lab_dns.h"
#include "maps/dns_endpoints.h"
#include "userspace/daemon/audit_client.h"
#include "userspace/daemon/client.h"

namespace egressd::test {
namespace {

using namespace std::chrono_literals;
using lab::Lab;
using lab::ProbeLine;
using lab::RunResult;
using lab::RunSpec;

constexpr const char* kNodeAddr = lab::kPodGatewayV4;  // the node's address every pod routes to

class DaemonEndpoints : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    Shared();
    // A port of this run's own (another run's daemon may hold another).
    port_ = static_cast<uint16_t>(20000 + getpid() % 20000);
    config_ = Shared().runtime_dir() + "-endpoints.yaml";
    // The config's metrics.address is overridden by the per-node flag (the
    // DaemonSet's form): the daemon must listen on the flag's port.
    std::ofstream(config_) << "metrics:\n  address: " << kNodeAddr << ":" << port_ + 1 << "\n";
  }
  static void TearDownTestSuite() { unlink(config_.c_str()); }
  void SetUp() override { EGR_REQUIRE_PRIVILEGES(); }
  void TearDown() override {
    for (const auto& [id, cg] : registered_) {
      if (daemon_) DeleteSandboxBestEffort(socket(), id);
      Shared().Ctl({"sandbox", "remove", "--cgroup", cg});
    }
    if (daemon_) daemon_->Stop();
  }
  Lab& lab() { return Shared().lab(); }
  static std::string socket() { return DaemonSocket(); }

  void StartDaemon() {
    auto d = StartDaemonProcess(config_, {"--metrics-address", absl::StrCat(kNodeAddr, ":", port_), "--accept-uncontained-packet-sockets"}, std::chrono::milliseconds(30000));
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
  }
  daemon::ClientResponse Call(const std::string& method, const std::string& target, const nlohmann::json& body = {}) {
    return CallDaemon(method, target, body);
  }
  std::string Put(const std::string& id, nlohmann::json body) {
    static int n = 0;
    auto cg = lab().MakeCgroup(absl::StrCat("endpoints-", getpid(), "-", n++));
    EXPECT_TRUE(cg.ok()) << cg.status();
    if (!cg.ok()) return "";
    body["cgroup"] = *cg;
    registered_.emplace_back(id, *cg);
    daemon::ClientResponse r = Call("PUT", "/v1/sandboxes/" + id, body);
    EXPECT_EQ(r.status, 201) << r.body.dump(2);
    return *cg;
  }
  // The probe as root with only CAP_NET_RAW, in `cgroup`, in `netns`.
  RunResult Hostile(const std::string& cgroup, const std::string& netns, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all", "--"});
    RunSpec spec;
    spec.argv = std::move(argv);
    spec.netns = netns;
    spec.cgroup = cgroup;
    spec.timeout = 20s;
    return lab::Run(spec);
  }
  ProbeLine ConnectFrom(const std::string& cgroup, const std::string& netns, const std::string& addr, int port) {
    RunResult r = Hostile(cgroup, netns, {lab::BinaryPath("egressd-probe"), "batch", absl::StrCat("tcp ", addr, " ", port)});
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? ProbeLine{} : lines[0];
  }
  uint64_t Counter(const std::string& name) {
    RunResult r = Shared().Ctl({"status", "--json"});
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.Describe();
    return j.is_discarded() ? 0 : j["counters"].value(name, uint64_t{0});
  }
  // A scrape from the node's netns, in no sandbox.
  RunResult ScrapeFromNode() {
    RunSpec spec;
    spec.argv = {"curl", "-sS", "--max-time", "10", "-o", "-", "-w", "\n%{http_code}\n",
                 absl::StrCat("http://", kNodeAddr, ":", port_, "/metrics")};
    spec.netns = lab().node_netns();
    spec.timeout = 20s;
    return lab::Run(spec);
  }

  // A follow=1 stream of GET /v1/audit?<query>, read on a thread of its own
  // until `awaited` says a line is the one waited for (then it hangs up).
  // Open() returns once the daemon counts the stream; Finish() waits up to
  // `timeout` for the awaited line (stopping the daemon, which ends the
  // stream, if it never comes) and joins.
  struct Follow {
    std::optional<nlohmann::json> seen;
    uint64_t seen_at_ns = 0;  // CLOCK_BOOTTIME when that line was read
    std::atomic<bool> opened{false}, finished{false};
    absl::Status streamed;
    std::thread reader;
  };
  void Open(Follow& f, const std::string& query, std::function<bool(const nlohmann::json&)> awaited) {
    f.reader = std::thread([this, &f, query, awaited] {
      struct Done {
        std::atomic<bool>& f;
        ~Done() { f = true; }
      } done{f.finished};
      f.streamed = daemon::StreamAudit(
          socket(), "/v1/audit?" + query,
          [&](const std::string& line) {
            timespec ts{};
            clock_gettime(CLOCK_BOOTTIME, &ts);
            const uint64_t now = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
            auto j = nlohmann::json::parse(line, nullptr, false);
            if (j.is_discarded() || !awaited(j)) return true;
            f.seen = j;
            f.seen_at_ns = now;
            return false;  // what we waited for: hang up
          },
          [&] { f.opened = true; });
    });
    ASSERT_TRUE(Lab::WaitFor([&] { return f.opened.load() || !f.streamed.ok(); })) << f.streamed;
    ASSERT_TRUE(Lab::WaitFor([&] { return Call("GET", "/v1/status").body.value("audit_streams", 0) == 1; }));
  }
  void Finish(Follow& f, std::chrono::milliseconds timeout, const std::string& what) {
    if (!Lab::WaitFor([&] { return f.finished.load(); }, timeout)) {
      ADD_FAILURE() << what << " never came on the stream";
      daemon_->Stop();  // ends the stream, so the reader returns
      daemon_.reset();
    }
    f.reader.join();
    ASSERT_TRUE(f.streamed.ok()) << f.streamed;
    ASSERT_TRUE(f.seen.has_value());
  }

  static inline uint16_t port_ = 0;
  static inline std::string config_;
  std::optional<lab::Background> daemon_;
  std::vector<std::pair<std::string, std::string>> registered_;
};

TEST_F(DaemonEndpoints, AuditStreamsFollowedAndFilteredLinesAndEgressctlAuditReadsThroughIt) {
  StartDaemon();
  const std::string cg = Put("audited", {{"egress", {lab::kPublicA4}}});
  const uint64_t cgid = Call("GET", "/v1/sandboxes/audited").body.value("cgroup_id", uint64_t{0});
  ASSERT_NE(cgid, 0u);

  // A follow=1 stream of this sandbox's denials, open before the connect.
  Follow f;
  Open(f, "follow=1&sandbox=audited&verdict=deny&type=connect",
       [](const nlohmann::json& j) { return j["IP"].value("destination", "") == lab::kPublicB4; });
  EXPECT_TRUE(Ok(ConnectFrom(cg, lab().pod().netns, lab::kPublicA4, 80))) << "allowed: filtered out by verdict";
  EXPECT_EQ(Errno(ConnectFrom(cg, lab().pod().netns, lab::kPublicB4, 80)), "EPERM");
  Finish(f, 3000ms, "the denied connect");
  nlohmann::json* seen = &*f.seen;
  EXPECT_EQ((*seen)["sandbox"].value("id", uint64_t{0}), cgid);
  EXPECT_EQ(seen->value("verdict", ""), "deny");
  EXPECT_EQ(seen->value("type", ""), "connect");
  // The hung-up stream is collected.
  EXPECT_TRUE(Lab::WaitFor([&] { return Call("GET", "/v1/status").body.value("audit_streams", 1) == 0; }));

  // Without follow: the sandbox's spool so far, then the end; the allowed
  // connect is there, and only allowed lines under verdict=allow.
  std::vector<nlohmann::json> allowed;
  absl::Status once = daemon::StreamAudit(socket(), absl::StrCat("/v1/audit?sandbox=", cgid, "&verdict=allow"),
                                          [&](const std::string& line) {
                                            allowed.push_back(nlohmann::json::parse(line));
                                            return true;
                                          });
  ASSERT_TRUE(once.ok()) << once;
  ASSERT_FALSE(allowed.empty());
  for (const auto& j : allowed) EXPECT_EQ(j.value("verdict", ""), "allow") << j.dump();

  // Bad filters: 400 naming the value.
  for (const char* bad : {"/v1/audit?verdict=maybe", "/v1/audit?since=yesterday", "/v1/audit?color=red",
                          "/v1/audit?type=nothing"}) {
    daemon::ClientResponse r = Call("GET", bad);
    EXPECT_EQ(r.status, 400) << bad << ": " << r.body.dump();
  }

  // egressctl audit through the daemon: the same lines, and it says so.
  RunSpec ctl;
  ctl.argv = {lab::BinaryPath("egressctl"), "-vv", "audit", "--sandbox", absl::StrCat(cgid),
              "--verdict", "deny", "--type", "connect"};
  ctl.env = Shared().CtlEnv();
  ctl.env["EGRESSD_SOCKET"] = socket();
  ctl.netns = lab().node_netns();
  ctl.timeout = 20s;
  RunResult r = lab::Run(ctl);
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "through the daemon")) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.out, lab::kPublicB4)) << r.Describe();

  // No daemon: the same command reads the trail itself (and says so).
  daemon_->Stop();
  daemon_.reset();
  RunResult direct = lab::Run(ctl);
  EXPECT_EQ(direct.exit_code, 0) << direct.Describe();
  EXPECT_TRUE(absl::StrContains(direct.err, "reading the trail directly")) << direct.Describe();
}

// The programs wake the ring's reader only once a quarter of the ring is
// unread (bpf/lib/audit.h): the daemon takes the ring every
// maps::kRingDrainMs (50 ms) on its own timer.  One allowed connect, nothing
// else going on, is on a follow=1 stream within a quarter of the fold window
// (1 s) after it happened: a daemon that took the ring only at its windows
// would miss that 3 times in 4, one that waited for a wake-up, always.
// "After" is the line's arrival on the stream (CLOCK_BOOTTIME) minus its
// kernel.boot_ns; the bound scales with EGR_TIME_SCALE.
TEST_F(DaemonEndpoints, ALoneConnectIsOnTheStreamWithinTheDaemonsDrainPeriod) {
  const uint64_t bound_ns = static_cast<uint64_t>(250e6 * lab::TimeScale());
  StartDaemon();
  const std::string cg = Put("alone", {{"egress", {lab::kPublicA4}}});
  Follow f;
  Open(f, "follow=1&sandbox=alone&verdict=allow&type=connect",
       [](const nlohmann::json& j) { return j["IP"].value("destination", "") == lab::kPublicA4; });
  EXPECT_TRUE(Ok(ConnectFrom(cg, lab().pod().netns, lab::kPublicA4, 80)));
  Finish(f, std::chrono::milliseconds(static_cast<long long>(5000 * lab::TimeScale())),
         "the allowed connect (5 s)");
  nlohmann::json* seen = &*f.seen;
  const uint64_t seen_at = f.seen_at_ns;
  const uint64_t at = (*seen)["kernel"].value("boot_ns", uint64_t{0});
  ASSERT_NE(at, 0u) << seen->dump();
  const uint64_t late = seen_at > at ? seen_at - at : 0;
  std::printf("[ info ] a lone connect on the daemon's stream %.1f ms after its connect (bound %.0f ms)\n",
              late / 1e6, bound_ns / 1e6);
  EXPECT_LE(late, bound_ns) << "the record came " << late / 1000000 << " ms after its connect";
}

TEST_F(DaemonEndpoints, MetricsServeTheExporterFromTheNodeAndNoSandboxReachesThemOrTheApi) {
  StartDaemon();
  // Positive control first: the node scrapes, promtool accepts it, and it
  // is the exporter's text (egressctl metrics' families).
  RunResult scrape = ScrapeFromNode();
  ASSERT_EQ(scrape.exit_code, 0) << scrape.Describe();
  ASSERT_TRUE(absl::EndsWith(scrape.out, "\n200\n")) << scrape.Describe();
  const std::string text = scrape.out.substr(0, scrape.out.size() - 4);
  RunResult direct = Shared().Ctl({"metrics"});
  ASSERT_EQ(direct.exit_code, 0) << direct.Describe();
  auto families = [](const std::string& t) {
    std::vector<std::string> out;
    for (absl::string_view l : absl::StrSplit(t, '\n')) {
      if (absl::StartsWith(l, "# TYPE ")) out.emplace_back(l);
    }
    return out;
  };
  // The same families in the same order (values move between the two), then
  // the daemon process's own (metrics_text.h DaemonFigures), which egressctl
  // has no daemon to ask.
  std::vector<std::string> want = families(direct.out);
  want.push_back("# TYPE egressd_dns_self_test_late_answers_total counter");
  EXPECT_EQ(families(text), want);
  EXPECT_TRUE(absl::StrContains(text, "# TYPE egressd_connections_total counter")) << text;
  const std::string file = Shared().runtime_dir() + "-scrape.prom";
  std::ofstream(file) << text;
  RunResult check = lab::Run(RunSpec{.argv = {"sh", "-c", "promtool check metrics < " + file}});
  unlink(file.c_str());
  EXPECT_EQ(check.exit_code, 0) << check.Describe();
  EXPECT_EQ(Call("GET", "/v1/status").body["metrics"].value("address", ""), absl::StrCat(kNodeAddr, ":", port_));

  // The attack: policies that allow the node's address, every port.
  const std::string pod = Put("greedy-pod", {{"egress", {kNodeAddr}}});
  const std::string url = absl::StrCat("http://", kNodeAddr, ":", port_, "/metrics");
  {
    // Without the guard (its entry removed from egr_dnsep_v1) the attack
    // works: the pod sandbox scrapes the daemon.
    auto eps = maps::DnsEndpoints::Open(Shared().pin_root());
    ASSERT_TRUE(eps.ok()) << eps.status();
    auto own = eps->OwnGuards();
    ASSERT_TRUE(own.ok()) << own.status();
    ASSERT_EQ(own->size(), 1u) << "the daemon guards its metrics address";
    ASSERT_TRUE(eps->SetOwnGuards({}).ok());
    RunResult open = Hostile(pod, lab().pod().netns,
                             {"curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", url});
    ASSERT_TRUE(eps->SetOwnGuards(*own).ok()) << "the guard restored";
    EXPECT_EQ(open.out, "200") << "without the guard the sandbox should reach /metrics: " << open.Describe();
  }
  uint64_t denied = Counter("dns_deny");
  RunResult guarded = Hostile(pod, lab().pod().netns,
                              {"curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", url});
  EXPECT_NE(guarded.exit_code, 0) << guarded.Describe();
  EXPECT_EQ(guarded.out, "000") << "a guarded sandbox got an HTTP answer: " << guarded.Describe();
  EXPECT_EQ(Counter("dns_deny"), denied + 1) << "curl's connect refused by the guard in the connect hook";
  denied = Counter("dns_deny");
  EXPECT_EQ(Errno(ConnectFrom(pod, lab().pod().netns, kNodeAddr, port_)), "EPERM")
      << "a pod sandbox reached the daemon's metrics";
  EXPECT_EQ(Counter("dns_deny"), denied + 1) << "refused by egressd's own endpoint guard in the connect hook";
  const ProbeLine other = ConnectFrom(pod, lab().pod().netns, kNodeAddr, 9);
  EXPECT_EQ(Errno(other), "ECONNREFUSED")
      << "another port of the same address is the policy's: it reached the node, where nothing listens";

  // An `egressctl run` sandbox in the node's netns, same policy.
  denied = Counter("dns_deny");
  RunResult run = Shared().RunSandboxedIn(lab().node_netns(), {"--egress", kNodeAddr},
                                          {"batch", absl::StrCat("tcp ", kNodeAddr, " ", port_)});
  auto lines = Lines(run);
  ASSERT_EQ(lines.size(), 1u) << run.Describe();
  EXPECT_EQ(Errno(lines[0]), "EPERM") << "a node-netns sandbox reached the daemon's metrics: " << run.Describe();
  EXPECT_EQ(Counter("dns_deny"), denied + 1);

  // The API socket from a sandboxed root: 403, counted; the node: served.
  const uint64_t refused = Call("GET", "/v1/status").body.value("refused_callers", uint64_t{0});
  RunResult api = Hostile(pod, lab().pod().netns,
                          {"curl", "-sS", "--max-time", "10", "--unix-socket", socket(), "-w", "\n%{http_code}\n",
                           "http://egressd/v1/status"});
  EXPECT_TRUE(absl::EndsWith(api.out, "\n403\n")) << api.Describe();
  EXPECT_TRUE(absl::StrContains(api.out, "inside a sandbox")) << api.Describe();
  EXPECT_EQ(Call("GET", "/v1/status").body.value("refused_callers", uint64_t{0}), refused + 1);
  EXPECT_EQ(Call("GET", "/v1/status").status, 200);

  // And the positive control again, after the attack: the node still scrapes.
  EXPECT_TRUE(absl::EndsWith(ScrapeFromNode().out, "\n200\n"));
}

TEST_F(DaemonEndpoints, AWildcardOrPortlessMetricsAddressIsBadInput) {
  for (const char* bad : {"0.0.0.0:9464", "[::]:9464", "10.244.0.1", "nonsense:1"}) {
    const std::string f = Shared().runtime_dir() + "-bad-metrics.yaml";
    std::ofstream(f) << "metrics:\n  address: \"" << bad << "\"\n";
    RunSpec s;
    s.netns = lab().node_netns();
    s.env = Shared().CtlEnv();
    s.argv = {lab::BinaryPath("egressd"), "--config", f, "--socket", socket()};
    s.timeout = 20s;
    RunResult r = lab::Run(s);
    unlink(f.c_str());
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.Describe();
    EXPECT_TRUE(absl::StrContains(r.err, "metrics.address")) << r.Describe();
  }
  // The DaemonSet's per-node flag: the same parse, refused before anything starts.
  RunSpec s;
  s.netns = lab().node_netns();
  s.env = Shared().CtlEnv();
  s.argv = {lab::BinaryPath("egressd"), "--metrics-address", "0.0.0.0:9464", "--socket", socket()};
  s.timeout = 20s;
  RunResult r = lab::Run(s);
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "--metrics-address: metrics.address \"0.0.0.0:9464\"")) << r.Describe();
}

}  // namespace
}  // namespace egressd::test
