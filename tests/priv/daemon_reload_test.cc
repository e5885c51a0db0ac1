// Config reload (issue 14) on the node-routed lab: egressd in the node's
// netns, pods registered through its API, the config rewritten and reloaded
// by POST /v1/config:reload or SIGHUP.
//
//   - A bad config is refused (400 naming the value; SIGHUP says the same on
//     its "reloaded:" line) and changes nothing: connects are judged by the
//     old policy.
//   - A valid config whose new protected range spans a sandbox's allowed
//     target is applied: that target is refused right after the reload
//     answers (nothing arrives at the lab host, beside a positive control),
//     the sandbox is reported failed with the compiler's message, the other
//     sandbox is untouched; a later valid reload recovers it.
//   - containedRoots: a process in a contained root's child cgroup is denied
//     before any registration; a reload whose config no longer names the root
//     releases it; a root that does not exist is reported, not fatal.
//   - A lowered cap fails the running sandbox and the held PUT past it.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon_harness.h"
#include "egressd_env.h"
#include "lab_dns.h"
#include "userspace/daemon/client.h"

namespace egressd::test {
namespace {

using namespace std::chrono_literals;
using lab::DnsServer;
using lab::DnsServerSpec;
using lab::Lab;
using lab::ProbeLine;
using lab::RunResult;
using lab::RunSpec;

constexpr const char* kUpstream = lab::kPublicE4;

class DaemonReload : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    auto up = DnsServer::Start(DnsServerSpec{.netns = Shared().lab().world_netns(), .listen = {kUpstream}, .records = {}});
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
    static int n = 0;
    config_ = absl::StrCat(Shared().runtime_dir(), "-reload-", getpid(), "-", n++, ".yaml");
    WriteConfig("");
    lab().ResetCounters();
  }
  void TearDown() override {
    for (const auto& [id, cg] : registered_) {
      if (daemon_) DeleteSandboxBestEffort(socket(), id);
      Shared().Ctl({"sandbox", "remove", "--cgroup", cg});
    }
    // A root the config contained goes with an empty config's reload.
    if (daemon_ && !roots_.empty()) {
      WriteConfig("");
      (void)daemon::Call(socket(), "POST", "/v1/config:reload", "");  // best effort
    }
    for (const auto& cg : roots_) Shared().Ctl({"sandbox", "remove", "--cgroup", cg});
    if (daemon_) daemon_->Stop();
    unlink(config_.c_str());
  }
  Lab& lab() { return Shared().lab(); }
  static std::string socket() { return DaemonSocket(); }

  // The lab's DNS settings, then `extra` (top-level keys).
  void WriteConfig(const std::string& extra) {
    std::ofstream(config_) << "dns:\n  upstreams: [" << kUpstream << "]\n  endpoint4: " << lab::kPodGatewayV4
                           << "\n  endpoint6: " << lab::kPodGatewayV6 << "\n" << extra;
  }
  void StartDaemon() {
    auto d = StartDaemonProcess(config_, {}, std::chrono::milliseconds(30000));
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
  }
  daemon::ClientResponse Call(const std::string& method, const std::string& target, const nlohmann::json& body = {}) {
    return CallDaemon(method, target, body);
  }
  daemon::ClientResponse ApiReload() { return Call("POST", "/v1/config:reload"); }
  // SIGHUP, then the daemon's "reloaded: STATUS BODY" line.
  daemon::ClientResponse Sighup() {
    EXPECT_EQ(kill(daemon_->pid(), SIGHUP), 0);
    auto line = daemon_->ReadOutLine(std::chrono::milliseconds(int(10000 * TimeScale())));
    daemon::ClientResponse r;
    if (!line || !absl::StartsWith(*line, "reloaded: ")) {
      ADD_FAILURE() << "no reloaded: line: " << (line ? *line : "(none)") << "\n" << daemon_->err();
      return r;
    }
    const std::string rest = line->substr(10);
    r.status = std::stoi(rest.substr(0, rest.find(' ')));
    r.body = nlohmann::json::parse(rest.substr(rest.find(' ') + 1));
    return r;
  }
  std::string Put(const std::string& id, nlohmann::json body, int want = 201) {
    static int n = 0;
    auto cg = lab().MakeCgroup(absl::StrCat("reload-", getpid(), "-", n++));
    EXPECT_TRUE(cg.ok()) << cg.status();
    if (!cg.ok()) return "";
    body["cgroup"] = *cg;
    registered_.emplace_back(id, *cg);
    daemon::ClientResponse r = Call("PUT", "/v1/sandboxes/" + id, body);
    EXPECT_EQ(r.status, want) << r.body.dump(2);
    return *cg;
  }
  ProbeLine Connect(const std::string& cgroup, const std::string& addr) {
    RunSpec spec;
    spec.argv = {"setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all", "--",
                 lab::BinaryPath("egressd-probe"), "batch", absl::StrCat("tcp ", addr, " 80")};
    spec.netns = lab().pod().netns;
    spec.cgroup = cgroup;
    spec.timeout = 20s;
    RunResult r = lab::Run(spec);
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? ProbeLine{} : lines[0];
  }
  static nlohmann::json OutcomeOf(const nlohmann::json& reload, const std::string& id) {
    for (const auto& s : reload["sandboxes"]) {
      if (s.value("id", nlohmann::json()).is_string() && s["id"] == id) return s;
    }
    return nullptr;
  }

  // Both triggers: a bad config changes nothing; one narrowing the floor
  // fails the sandbox it spans and leaves the other alone; the old config
  // again recovers it.
  void NarrowingCase(const std::function<daemon::ClientResponse()>& reload) {
    StartDaemon();
    const std::string x = Put("pod-x", {{"egress", {lab::kPublicA4, lab::kPublicB4}}});
    const std::string y = Put("pod-y", {{"egress", {lab::kPublicB4}}});
    const uint32_t y_policy = Call("GET", "/v1/sandboxes/pod-y").body.value("policy_id", 0u);
    EXPECT_TRUE(Ok(Connect(x, lab::kPublicA4)));

    // A bad config: refused naming the value, nothing changed.
    WriteConfig(absl::StrCat("protected: [", lab::kPublicA4, "/33]\n"));
    daemon::ClientResponse bad = reload();
    EXPECT_EQ(bad.status, 400) << bad.body.dump(2);
    EXPECT_TRUE(absl::StrContains(bad.body.dump(), "/33")) << bad.body.dump(2);
    EXPECT_TRUE(absl::StrContains(bad.body.dump(), "nothing was changed")) << bad.body.dump(2);
    EXPECT_TRUE(Ok(Connect(x, lab::kPublicA4))) << "the old policy still judges";
    EXPECT_EQ(Call("GET", "/v1/sandboxes/pod-x").body.value("state", ""), "enforced");

    // A valid config whose new protected range spans pod-x's target.
    WriteConfig(absl::StrCat("protected: [", lab::kPublicA4, "/32]\n"));
    daemon::ClientResponse r = reload();
    ASSERT_EQ(r.status, 200) << r.body.dump(2);
    const nlohmann::json ox = OutcomeOf(r.body, "pod-x");
    EXPECT_EQ(ox.value("outcome", ""), "failed") << r.body.dump(2);
    EXPECT_TRUE(absl::StrContains(ox.dump(), lab::kPublicA4)) << "the compiler's message: " << ox.dump(2);
    EXPECT_TRUE(absl::StrContains(ox.dump(), "protected")) << ox.dump(2);
    EXPECT_EQ(OutcomeOf(r.body, "pod-y").value("outcome", ""), "recompiled") << r.body.dump(2);
    lab().ResetCounters();
    EXPECT_EQ(Errno(Connect(x, lab::kPublicA4)), "EPERM") << "refused right after the reload answered";
    EXPECT_TRUE(Ok(Connect(x, lab::kPublicB4))) << "what the new floor allows stays";
    EXPECT_TRUE(Ok(Connect(y, lab::kPublicB4))) << "the other sandbox is untouched";
    EXPECT_EQ(Errno(Connect(y, lab::kPublicA4)), "EPERM");
    ASSERT_TRUE(lab().Drain().ok());
    EXPECT_EQ(lab().PacketsTo(lab::kPublicA4), 0u) << lab().CountersSummary();
    EXPECT_GT(lab().PacketsTo(lab::kPublicB4), 0u) << "positive control: " << lab().CountersSummary();
    const nlohmann::json got = Call("GET", "/v1/sandboxes/pod-x").body;
    EXPECT_EQ(got.value("state", ""), "failed") << got.dump(2);
    EXPECT_FALSE(got.value("enforced", true));
    EXPECT_TRUE(absl::StrContains(got["error"].dump(), lab::kPublicA4)) << got.dump(2);
    const nlohmann::json gy = Call("GET", "/v1/sandboxes/pod-y").body;
    EXPECT_EQ(gy.value("state", ""), "enforced") << gy.dump(2);
    EXPECT_NE(gy.value("policy_id", 0u), 0u);
    (void)y_policy;  // pod-y's policy gained the range (a new id); its verdicts are the test

    // The old config again: pod-x recompiles from its declaration.
    WriteConfig("");
    daemon::ClientResponse back = reload();
    ASSERT_EQ(back.status, 200) << back.body.dump(2);
    EXPECT_EQ(OutcomeOf(back.body, "pod-x").value("outcome", ""), "recompiled") << back.body.dump(2);
    EXPECT_EQ(Call("GET", "/v1/sandboxes/pod-x").body.value("state", ""), "enforced");
    EXPECT_TRUE(Ok(Connect(x, lab::kPublicA4))) << "recovered";
  }

  static inline DnsServer* upstream_ = nullptr;
  std::string config_;
  std::optional<lab::Background> daemon_;
  std::vector<std::pair<std::string, std::string>> registered_;
  std::vector<std::string> roots_;
};

TEST_F(DaemonReload, ApiReloadBadConfigChangesNothingNarrowedFloorFailsTheSandboxItSpans) {
  NarrowingCase([&] { return ApiReload(); });
  EXPECT_EQ(Call("GET", "/v1/config:reload").status, 405);
}

TEST_F(DaemonReload, SighupReloadsTheSameWay) {
  NarrowingCase([&] { return Sighup(); });
}

TEST_F(DaemonReload, ContainedRootsFromTheConfigDenyBeforeRegistrationAndAreReleasedWhenRemoved) {
  auto root = lab().MakeCgroup(absl::StrCat("reload-root-", getpid()));
  ASSERT_TRUE(root.ok()) << root.status();
  auto pod = lab().MakeCgroup(absl::StrCat("reload-root-", getpid(), "/pod"));
  ASSERT_TRUE(pod.ok()) << pod.status();
  roots_.push_back(*root);
  const std::string missing = *root + "-missing";
  WriteConfig(absl::StrCat("containedRoots: [", *root, ", ", missing, "]\n"));
  StartDaemon();
  // Contained at start: a process in a child cgroup no one registered.
  EXPECT_EQ(Errno(Connect(*pod, lab::kPublicA4)), "EPERM") << "denied before any registration";
  const nlohmann::json st = Call("GET", "/v1/status").body;
  EXPECT_TRUE(absl::StrContains(st["contained_roots"]["contained"].dump(), *root)) << st.dump(2);
  EXPECT_TRUE(absl::StrContains(st["contained_roots"]["missing"].dump(), missing)) << st.dump(2);
  daemon::ClientResponse ready = Call("GET", "/readyz");
  EXPECT_EQ(ready.status, 503) << ready.body.dump(2);
  EXPECT_TRUE(absl::StrContains(ready.body.dump(), "containedRoots")) << ready.body.dump(2);
  // A registration below the root replaces its denial for that pod only.
  const std::string reg = Put("pod-under", {{"egress", {lab::kPublicB4}}});
  EXPECT_TRUE(Ok(Connect(reg, lab::kPublicB4)));
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().PacketsTo(lab::kPublicA4), 0u) << lab().CountersSummary();

  // Removed from the config: released by the reload.
  WriteConfig("");
  daemon::ClientResponse r = ApiReload();
  ASSERT_EQ(r.status, 200) << r.body.dump(2);
  EXPECT_TRUE(absl::StrContains(r.body["contained_roots"]["released"].dump(), *root)) << r.body.dump(2);
  EXPECT_EQ(Call("GET", "/readyz").status, 200);
  lab().ResetCounters();
  EXPECT_TRUE(Ok(Connect(*pod, lab::kPublicA4))) << "released: judged by nothing";
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_GT(lab().PacketsTo(lab::kPublicA4), 0u) << "positive control: " << lab().CountersSummary();

  // Named again: contained by the reload, the same pod denied again.
  WriteConfig(absl::StrCat("containedRoots: [", *root, "]\n"));
  r = ApiReload();
  ASSERT_EQ(r.status, 200) << r.body.dump(2);
  EXPECT_TRUE(absl::StrContains(r.body["contained_roots"]["added"].dump(), *root)) << r.body.dump(2);
  EXPECT_EQ(Errno(Connect(*pod, lab::kPublicA4)), "EPERM");
}


// A lowered cap is a compile rule like a new protected range: the running
// sandbox past it is failed with the cap's message, the one within it is
// untouched; a held PUT past it is marked failed (never applied), the one
// within it stays pending; lifting the cap again recovers the running one.
TEST_F(DaemonReload, LoweredCapFailsTheSandboxPastItAndTheHeldPutPastIt) {
  StartDaemon();
  Put("pod-big", {{"egress", {lab::kPublicA4, lab::kPublicB4}}});
  Put("pod-small", {{"egress", {lab::kPublicB4}}});
  // Pod UIDs (UUIDs) unique to this run; no such pod's cgroup exists, so both PUTs are held.
  const auto uid = [](int n) { return absl::StrFormat("e9d0c4a2-%04x-4000-8000-%012x", getpid() & 0xffff, n); };
  auto held = [&](const std::string& id, const std::string& pod, const nlohmann::json& egress) {
    daemon::ClientResponse r = Call("PUT", "/v1/sandboxes/" + id, {{"pod_uid", pod}, {"egress", egress}});
    EXPECT_EQ(r.status, 202) << r.body.dump(2);
  };
  held("held-big", uid(1), {lab::kPublicA4, lab::kPublicB4});
  held("held-small", uid(2), {lab::kPublicB4});

  WriteConfig("limits:\n  maxCidrEntriesPerSandbox: 1\n");
  daemon::ClientResponse r = ApiReload();
  ASSERT_EQ(r.status, 200) << r.body.dump(2);
  const nlohmann::json big = OutcomeOf(r.body, "pod-big");
  EXPECT_EQ(big.value("outcome", ""), "failed") << r.body.dump(2);
  EXPECT_TRUE(absl::StrContains(big.dump(), "limits.maxCidrEntriesPerSandbox")) << big.dump(2);
  EXPECT_NE(OutcomeOf(r.body, "pod-small").value("outcome", ""), "failed") << r.body.dump(2);
  const nlohmann::json hb = OutcomeOf(r.body, "held-big");
  EXPECT_EQ(hb.value("outcome", ""), "failed") << r.body.dump(2);
  EXPECT_TRUE(absl::StrContains(hb.dump(), "limits.maxCidrEntriesPerSandbox")) << hb.dump(2);
  EXPECT_EQ(OutcomeOf(r.body, "held-small").value("outcome", ""), "pending") << r.body.dump(2);
  EXPECT_EQ(Call("GET", "/v1/sandboxes/pod-big").body.value("state", ""), "failed");
  EXPECT_EQ(Call("GET", "/v1/sandboxes/pod-small").body.value("state", ""), "enforced");
  const nlohmann::json ghb = Call("GET", "/v1/sandboxes/held-big").body;
  EXPECT_EQ(ghb.value("state", ""), "failed") << ghb.dump(2);
  EXPECT_TRUE(absl::StrContains(ghb.dump(), "no longer accepted")) << ghb.dump(2);
  EXPECT_EQ(Call("GET", "/v1/sandboxes/held-small").body.value("state", ""), "pending");

  // The cap lifted: the running sandbox recompiles; the failed held PUT
  // stays failed until it is sent again.
  WriteConfig("");
  daemon::ClientResponse back = ApiReload();
  ASSERT_EQ(back.status, 200) << back.body.dump(2);
  EXPECT_EQ(OutcomeOf(back.body, "pod-big").value("outcome", ""), "recompiled") << back.body.dump(2);
  EXPECT_EQ(Call("GET", "/v1/sandboxes/pod-big").body.value("state", ""), "enforced");
  EXPECT_EQ(OutcomeOf(back.body, "held-big").value("outcome", ""), "failed") << back.body.dump(2);
  for (const char* id : {"held-big", "held-small"}) EXPECT_EQ(Call("DELETE", absl::StrCat("/v1/sandboxes/", id)).status, 200);
}

}  // namespace
}  // namespace egressd::test
