// The hand-over tests' fixture (daemon_handover_test.cc, daemon_handover_kill_test.cc):
// one upstream dnsmasq for the binary, a config with a fixed metrics port,
// egressd started as the DaemonSet runs it, sandboxes registered through its
// API, a dig loop and a connect loop in a sandbox, the audit stream.  Not in
// an anonymous namespace: both files' TEST_Fs must see one fixture class.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon_harness.h"
#include "egressd_env.h"
#include "lab_dns.h"
#include "pin_snapshot.h"
#include "userspace/daemon/client.h"
#include "userspace/daemon/handover.h"

namespace egressd::test::handover {

using namespace std::chrono_literals;
using lab::DnsServer;
using lab::DnsServerSpec;
using lab::Lab;
using lab::RunResult;
using lab::RunSpec;

constexpr const char* kUpstream = lab::kPublicE4;
constexpr const char* kAllowed = "allowed.example";  // -> kPublicC4
constexpr const char* kDenied = "denied.example";    // the upstream knows it; the policy does not

class DaemonHandover : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    auto up = DnsServer::Start(DnsServerSpec{.netns = Shared().lab().world_netns(),
                                             .listen = {kUpstream},
                                             .records = {{kAllowed, {lab::kPublicC4}}, {kDenied, {lab::kPublicB4}}},
                                             .extra_args = {"--local-ttl=300"}});
    ASSERT_TRUE(up.ok()) << up.status();
    upstream_ = std::move(*up).release();
    config_ = Shared().runtime_dir() + "-handover.yaml";
    // A fixed metrics port (not 0): the new daemon must serve the old one's
    // listener, since a second bind to it fails while the old one listens.
    metrics_address_ = absl::StrCat("127.0.0.1:", 20000 + getpid() % 20000);
    std::ofstream(config_) << "dns:\n  upstreams: [" << kUpstream << "]\n  endpoint4: " << lab::kPodGatewayV4
                           << "\nmetrics:\n  address: " << metrics_address_ << "\n";
  }
  static void TearDownTestSuite() {
    delete upstream_;
    upstream_ = nullptr;
    unlink(config_.c_str());
  }
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    ASSERT_NE(upstream_, nullptr);
    lab().ResetCounters();
  }
  void TearDown() override {
    for (const auto& cg : registered_) Shared().Ctl({"sandbox", "remove", "--cgroup", cg});
    // SIGTERM, as the kubelet stops a pod: the reader's last window is
    // exported and its state saved, so the next test's daemon numbers on
    // from there.  A SIGKILLed reader leaves the state a window behind the
    // spools and its successor repeats sequence numbers (docs/audit.md,
    // "Durability"): not what these tests are about.
    for (auto* d : {&new_, &old_}) {
      if (!*d) continue;
      if ((*d)->running()) kill((*d)->pid(), SIGTERM);
      (*d)->Wait(std::chrono::milliseconds(int(10000 * TimeScale())));
      d->reset();
    }
    if (!stop_file_.empty()) unlink(stop_file_.c_str());
  }
  Lab& lab() { return Shared().lab(); }
  static std::string socket() { return DaemonSocket(); }

  // An egressd as the DaemonSet runs it: same config, socket and mounts;
  // `hold` sets EGRESSD_TEST_HANDOVER_HOLD (daemon_handover.cc).
  std::optional<lab::Background> SpawnDaemon(const std::string& hold = "", int audit_window_ms = 200) {
    RunSpec s;
    s.netns = lab().node_netns();
    s.env = Shared().CtlEnv();
    if (!hold.empty()) s.env["EGRESSD_TEST_HANDOVER_HOLD"] = hold;
    s.argv = {lab::BinaryPath("egressd"), "--config", config_,         "--socket",
              socket(),                     "--audit-window-ms", std::to_string(audit_window_ms)};
    s.timeout = 10min;
    auto bg = lab::Start(s);
    EXPECT_TRUE(bg.ok()) << bg.status();
    if (!bg.ok()) return std::nullopt;
    return std::move(*bg);
  }
  std::optional<lab::Background> StartDaemon(int audit_window_ms = 200) {
    auto bg = SpawnDaemon("", audit_window_ms);
    if (!bg) return std::nullopt;
    auto line = bg->ReadOutLine(std::chrono::milliseconds(int(60000 * TimeScale())));
    EXPECT_TRUE(line && absl::StartsWith(*line, "ready:")) << "egressd never said ready: " << bg->err();
    if (!line) return std::nullopt;
    return std::move(*bg);
  }
  daemon::ClientResponse Call(const std::string& method, const std::string& target, const nlohmann::json& body = {}) {
    return CallDaemon(method, target, body);
  }
  bool WaitFor(const std::function<bool()>& cond, int ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int(ms * TimeScale()));
    while (!cond()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(20ms);  // polling a condition, not waiting for one
    }
    return true;
  }
  std::string Put(const std::string& id, nlohmann::json body) {
    static int n = 0;
    auto cg = lab().MakeCgroup(absl::StrCat("handover-", n++));
    EXPECT_TRUE(cg.ok()) << cg.status();
    if (!cg.ok()) return "";
    body["cgroup"] = *cg;
    registered_.push_back(*cg);
    daemon::ClientResponse r = Call("PUT", "/v1/sandboxes/" + id, body);
    EXPECT_EQ(r.status, 201) << r.body.dump(2);
    return *cg;
  }
  RunSpec InSandbox(const std::string& cgroup, std::vector<std::string> argv) {
    RunSpec spec;
    spec.argv = std::move(argv);
    spec.netns = lab().pod().netns;
    spec.cgroup = cgroup;
    spec.timeout = 300s;
    return spec;
  }
  // Queries until the stop file exists, four per round (allowed and denied,
  // UDP and TCP); one line per query: "Q <name> <transport> <status> <ips
  // matching kPublicC4> <query ms>".
  std::optional<lab::Background> QueryLoop(const std::string& cgroup) {
    stop_file_ = Shared().runtime_dir() + "-handover.stop";
    unlink(stop_file_.c_str());
    const std::string script = absl::StrCat(
        "while [ ! -e ", stop_file_, " ]; do for q in ", kAllowed, " ", kDenied,
        "; do for t in udp tcp; do o=+notcp; [ $t = tcp ] && o=+tcp; "
        "r=$(dig +time=3 +tries=1 +noall +comments +answer +stats $o @8.8.8.8 $q 2>&1); "
        "echo \"Q $q $t $(echo \"$r\" | grep -o 'status: [A-Z]*' | head -1 | cut -d' ' -f2) "
        "$(echo \"$r\" | grep -c '", lab::kPublicC4, "') $(echo \"$r\" | grep -o 'Query time: [0-9]*' | cut -d' ' -f3)\"; "
        "done; done; done");
    auto bg = lab::Start(InSandbox(cgroup, {"sh", "-c", script}));
    EXPECT_TRUE(bg.ok()) << bg.status();
    if (!bg.ok()) return std::nullopt;
    return std::move(*bg);
  }
  std::optional<lab::Background> ConnectLoop(const std::string& cgroup, int rounds) {
    std::vector<std::string> argv = {lab::BinaryPath("egressd-probe"), "batch"};
    for (int i = 0; i < rounds; ++i) {
      for (const char* a : {lab::kPublicC4, lab::kPublicB4}) argv.push_back(absl::StrCat("tcp ", a, " 80 --timeout-ms 3000"));
    }
    argv.insert(argv.begin(), {"setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all", "--"});
    auto bg = lab::Start(InSandbox(cgroup, argv));
    EXPECT_TRUE(bg.ok()) << bg.status();
    if (!bg.ok()) return std::nullopt;
    return std::move(*bg);
  }
  // Every line of the audit stream (through the daemon's spools).
  std::vector<nlohmann::json> Audit() {
    RunResult a = Shared().Ctl({"audit"});
    EXPECT_EQ(a.exit_code, 0) << a.Describe();
    std::vector<nlohmann::json> out;
    for (absl::string_view l : absl::StrSplit(a.out, '\n', absl::SkipEmpty())) {
      auto j = nlohmann::json::parse(std::string(l), nullptr, false);
      if (!j.is_discarded()) out.push_back(std::move(j));
    }
    return out;
  }
  // The audit stream's DNS records of sandbox `id`, by "name transport",
  // and its sequence numbers checked: each once, none missing between the
  // first and the last (a failure otherwise).  Returns the records' count.
  uint64_t AuditedQueries(uint64_t id, std::map<std::string, int>* by_query, size_t* seqs_out = nullptr) {
    std::vector<nlohmann::json> stream = Audit();
    std::set<uint64_t> seqs;
    for (const auto& j : stream) {
      const uint64_t seq = j.value("seq", uint64_t{0});
      EXPECT_TRUE(seqs.insert(seq).second) << "seq " << seq << " twice: " << j.dump();
    }
    EXPECT_FALSE(seqs.empty());
    if (!seqs.empty()) {
      EXPECT_EQ(*seqs.rbegin() - *seqs.begin() + 1, seqs.size()) << "a gap in the sequence numbers";
    }
    if (seqs_out) *seqs_out = seqs.size();
    uint64_t n = 0;
    for (const auto& j : stream) {
      if (j.value("type", "") != "dns" || j["sandbox"].value("id", uint64_t{0}) != id) continue;
      ++n;
      std::string name = j["dns"].value("query", "");
      if (!name.empty() && name.back() == '.') name.pop_back();
      if (by_query) ++(*by_query)[name + " " + j["dns"].value("transport", "")];
    }
    return n;
  }
  bool AuditReader() {
    auto r = daemon::Call(socket(), "GET", "/v1/status");
    return r.ok() && r->body["audit"].value("reader", false);
  }

  static inline DnsServer* upstream_ = nullptr;
  static inline std::string config_;
  static inline std::string metrics_address_;
  std::optional<lab::Background> old_, new_;
  std::vector<std::string> registered_;
  std::string stop_file_;
};

struct QueryLine {
  std::string name, transport, status;
  int matching = 0;
  int ms = -1;
  std::chrono::steady_clock::time_point seen;
};

inline std::optional<QueryLine> ParseQuery(const std::string& line) {
  std::vector<std::string> f = absl::StrSplit(line, ' ');
  if (f.size() < 4 || f[0] != "Q") return std::nullopt;
  QueryLine q{f[1], f[2], f[3]};
  if (f.size() > 4) (void)absl::SimpleAtoi(f[4], &q.matching);
  if (f.size() > 5) (void)absl::SimpleAtoi(f[5], &q.ms);
  q.seen = std::chrono::steady_clock::now();
  return q;
}

// Reads the query loop's lines into `seen` until it holds `at_least` (false
// when the loop went quiet for 20 s: its last query never came back).
inline bool ReadQueries(lab::Background& loop, std::vector<QueryLine>& seen, size_t at_least) {
  while (seen.size() < at_least) {
    auto line = loop.ReadOutLine(std::chrono::seconds(20));
    if (!line) return false;
    if (auto q = ParseQuery(*line)) seen.push_back(*q);
  }
  return true;
}

inline int Percentile(std::vector<int> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

}  // namespace egressd::test::handover
