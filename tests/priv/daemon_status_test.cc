// `egressctl status` through the daemon (issue 14), on the node-routed lab:
// the daemon in the node's netns, a pod sandbox registered through its API.
//
//   - With the daemon running, `egressctl status -o json` (and `--json`, and
//     the text form) is GET /v1/status: `enforcing`, the daemon's own keys,
//     and what the maps-only form shows (the sandbox's record, the address
//     its name taught it with the name and the expiry, the counters); no
//     fallback line on stderr.
//   - Without a daemon the same command reads the maps itself, says so in
//     one line on stderr, and still shows the record and the learned name.
//   - A daemon that answers but fails the request is exit 5 naming it, never
//     a silent fallback to the maps.
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon_harness.h"
#include "egressd_env.h"
#include "lab_dns.h"
#include "unix_listener.h"
#include "userspace/daemon/client.h"

namespace egressd::test {
namespace {

using namespace std::chrono_literals;
using lab::DnsServer;
using lab::DnsServerSpec;
using lab::Lab;
using lab::RunResult;
using lab::RunSpec;

constexpr const char* kUpstream = lab::kPublicE4;  // the config's dns.upstreams
constexpr const char* kName = "status.example";    // -> kPublicC4, allowed by name only

class DaemonStatus : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    Lab& lab = Shared().lab();
    auto up = DnsServer::Start(DnsServerSpec{.netns = lab.world_netns(),
                                             .listen = {kUpstream},
                                             .records = {{kName, {lab::kPublicC4}}},
                                             .extra_args = {"--local-ttl=300"}});
    ASSERT_TRUE(up.ok()) << up.status();
    upstream_ = std::move(*up).release();
    config_ = Shared().runtime_dir() + "-status.yaml";
    std::ofstream(config_) << "dns:\n  upstreams: [" << kUpstream << "]\n  endpoint4: " << lab::kPodGatewayV4 << "\n";
  }
  static void TearDownTestSuite() {
    delete upstream_;
    upstream_ = nullptr;
    unlink(config_.c_str());
  }
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    ASSERT_NE(upstream_, nullptr);
  }
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
    auto d = StartDaemonProcess(config_, {}, std::chrono::milliseconds(30000));
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
  }
  daemon::ClientResponse Call(const std::string& method, const std::string& target, const nlohmann::json& body = {}) {
    return CallDaemon(method, target, body);
  }
  nlohmann::json Json(const RunResult& r) { return JsonObjectOut(r); }
  // The record of `cgroup` in a status, or null.
  static nlohmann::json RecordOf(const nlohmann::json& st, const std::string& cgroup) {
    for (const auto& r : st.value("records", nlohmann::json::array())) {
      if (r.value("cgroup_path", "") == cgroup) return r;
    }
    return nullptr;
  }
  // The learned entry of `addr` for sandbox `id` in a status, or null.
  static nlohmann::json LearnedOf(const nlohmann::json& st, uint64_t id, const std::string& addr) {
    if (!st.contains("learned") || !st["learned"].is_object()) return nullptr;
    for (const auto& e : st["learned"].value("entries", nlohmann::json::array())) {
      if (e.value("sandbox", uint64_t{0}) == id && e.value("address", "") == addr) return e;
    }
    return nullptr;
  }
  static bool Names(const nlohmann::json& entry, const std::string& name) {
    for (const auto& r : entry.value("rules", nlohmann::json::array())) {
      if (r.is_string() && r.get<std::string>() == name) return true;
    }
    return false;
  }

  static inline DnsServer* upstream_ = nullptr;
  static inline std::string config_;
  std::optional<lab::Background> daemon_;
  std::vector<std::pair<std::string, std::string>> registered_;
};

TEST_F(DaemonStatus, ThroughTheDaemonItShowsEnforcingTheSandboxAndItsLearnedNamesAndWithoutOneTheMaps) {
  StartDaemon();
  auto cg = lab().MakeCgroup(absl::StrCat("status-", getpid()));
  ASSERT_TRUE(cg.ok()) << cg.status();
  registered_.emplace_back("status-pod", *cg);
  daemon::ClientResponse put = Call("PUT", "/v1/sandboxes/status-pod", {{"cgroup", *cg}, {"egress", {kName}}});
  ASSERT_EQ(put.status, 201) << put.body.dump(2);
  const uint64_t id = Call("GET", "/v1/sandboxes/status-pod").body.value("cgroup_id", uint64_t{0});
  ASSERT_NE(id, 0u);
  // The pod resolves its allowed name through the daemon's proxy: learned.
  RunSpec dig;
  dig.argv = {"dig", "+time=2", "+tries=1", "+short", "@8.8.8.8", kName};
  dig.netns = lab().pod().netns;
  dig.cgroup = *cg;
  dig.timeout = 20s;
  RunResult d = lab::Run(dig);
  ASSERT_EQ(d.exit_code, 0) << d.Describe();
  ASSERT_TRUE(absl::StrContains(d.out, lab::kPublicC4)) << d.Describe();

  // Through the daemon: -o json.
  RunResult via = Shared().Ctl({"status", "-o", "json"});
  ASSERT_EQ(via.exit_code, 0) << via.Describe();
  EXPECT_FALSE(absl::StrContains(via.err, "no daemon answers")) << via.Describe();
  nlohmann::json st = Json(via);
  EXPECT_EQ(st.value("enforcing", false), true) << st.dump(2);
  EXPECT_EQ(st.value("programs", ""), "adopted") << "a key only the daemon has: " << st.dump(2);
  EXPECT_GE(st.value("sandboxes", uint64_t{0}), 1u);
  ASSERT_TRUE(st.contains("capacity") && st["capacity"].contains("resolved")) << st.dump(2);
  EXPECT_GE(st["capacity"]["resolved"].value("entries", uint64_t{0}), 1u);
  const nlohmann::json rec = RecordOf(st, *cg);
  ASSERT_FALSE(rec.is_null()) << "the registered sandbox's record: " << st.dump(2);
  EXPECT_EQ(rec.value("cgroup_id", uint64_t{0}), id);
  EXPECT_EQ(rec.value("enforced", false), true);
  const nlohmann::json learned = LearnedOf(st, id, lab::kPublicC4);
  ASSERT_FALSE(learned.is_null()) << "the address its name taught it: " << st.dump(2);
  EXPECT_TRUE(Names(learned, kName)) << learned.dump();
  EXPECT_GT(learned.value("expires_in_s", int64_t{0}), 0) << learned.dump();
  ASSERT_TRUE(st.contains("counters")) << st.dump(2);
  EXPECT_GE(st["counters"].value("dns_redirect", uint64_t{0}), 1u) << "the dig's query was redirected";

  // --json is the same request.
  RunResult alias = Shared().Ctl({"status", "--json"});
  ASSERT_EQ(alias.exit_code, 0) << alias.Describe();
  nlohmann::json st2 = Json(alias);
  EXPECT_EQ(st2.value("enforcing", false), true);
  EXPECT_FALSE(LearnedOf(st2, id, lab::kPublicC4).is_null());

  // The text form: the daemon's line, the record, the learned name.
  RunResult text = Shared().Ctl({"status"});
  ASSERT_EQ(text.exit_code, 0) << text.Describe();
  EXPECT_TRUE(absl::StrContains(text.out, absl::StrCat("egressd daemon on ", socket(), ": enforcing")))
      << text.Describe();
  EXPECT_TRUE(absl::StrContains(text.out, *cg)) << text.Describe();
  EXPECT_TRUE(absl::StrContains(text.out, lab::kPublicC4)) << text.Describe();
  EXPECT_TRUE(absl::StrContains(text.out, absl::StrCat("via ", kName))) << text.Describe();

  // No daemon: the maps, said in one line on stderr; nothing lost of what
  // the maps know.
  daemon_->Stop();
  daemon_.reset();
  RunResult maps = Shared().Ctl({"status", "--json"});
  ASSERT_EQ(maps.exit_code, 0) << maps.Describe();
  EXPECT_TRUE(absl::StrContains(maps.err, absl::StrCat("egressctl: no daemon answers at ", socket(),
                                                       ": status read from the pinned maps\n")))
      << maps.Describe();
  nlohmann::json sm = Json(maps);
  EXPECT_FALSE(sm.contains("enforcing")) << "only a daemon says enforcing: " << sm.dump(2);
  EXPECT_EQ(sm.value("loaded", false), true);
  EXPECT_FALSE(RecordOf(sm, *cg).is_null()) << sm.dump(2);
  const nlohmann::json still = LearnedOf(sm, id, lab::kPublicC4);
  ASSERT_FALSE(still.is_null()) << sm.dump(2);
  EXPECT_TRUE(Names(still, kName));
  RunResult maps_text = Shared().Ctl({"status"});
  ASSERT_EQ(maps_text.exit_code, 0) << maps_text.Describe();
  EXPECT_TRUE(absl::StartsWith(maps_text.out, "egressd loaded (pins under ")) << maps_text.Describe();
  EXPECT_TRUE(absl::StrContains(maps_text.out, absl::StrCat("via ", kName))) << maps_text.Describe();
}

TEST_F(DaemonStatus, ADaemonThatFailsTheRequestIsAnErrorOfItsOwnNotAFallback) {
  // Something answers on the socket, but no status: a 500 and a close.
  const std::string path = Shared().runtime_dir() + "/failing.sock";
  const std::string body = R"({"error":{"code":"internal","reasons":["the maps are gone"]}})";
  UnixListener failing(path, absl::StrCat("HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                                          "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body));
  ASSERT_TRUE(failing.ready());
  RunResult r = Shared().Ctl({"status", "--socket", path, "-o", "json"});
  EXPECT_EQ(r.exit_code, 5) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, absl::StrCat("egressctl: status: the daemon at ", path))) << r.Describe();
  EXPECT_FALSE(absl::StrContains(r.err, "pinned maps")) << r.Describe();
  EXPECT_EQ(r.out, "") << "nothing printed as if it were the status";
  EXPECT_EQ(failing.accepts(), 1u);
  unlink(path.c_str());
}

}  // namespace
}  // namespace egressd::test
