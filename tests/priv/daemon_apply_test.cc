// egressctl against the daemon (issue 14): `egressctl sandbox apply` with
// every per-sandbox input it carries (a task declaration, a runtime
// declaration, kind, grants, audit-only where the config allows it,
// strict), a raw PUT for what egressctl sends only as files (a declaration
// as a JSON object), each proven in the kernel by connects from the
// sandbox's cgroup and counted at the lab host; `sandbox list -o json` and
// `sandbox delete`, after which the cgroup is judged by nothing.  Strict
// through the daemon: with the daemon's audit reader stopped and the ring
// full, a strict sandbox's allowed connect is refused while a relaxed one
// beside it passes.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon_harness.h"
#include "egressd_env.h"
#include "userspace/daemon/audit_client.h"
#include "userspace/daemon/client.h"

namespace egressd::test {
namespace {

using namespace std::chrono_literals;
using lab::Lab;
using lab::ProbeLine;
using lab::RunResult;
using lab::RunSpec;

constexpr const char* kTaskDest = lab::kPublicA4;     // the task's declaration
constexpr const char* kNever = lab::kPublicB4;        // no input ever allows it
constexpr const char* kRuntimeDest = lab::kPublicC4;  // the runtime's declaration
constexpr const char* kGrantDest = lab::kPublicD4;    // granted on 8080 only
constexpr const char* kOpen = lab::kPublicF4;         // reached only where nothing denies it

class DaemonApply : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    const std::string base = Shared().runtime_dir() + "-apply";
    config_ = base + ".yaml";
    std::ofstream(config_) << "audit:\n  allowAuditOnly: true\n";
    task_ = base + "-task.yaml";
    std::ofstream(task_) << "egress:\n  allow: [" << kTaskDest << "]\n";
    runtime_ = base + "-runtime.yaml";
    std::ofstream(runtime_) << "sandbox:\n  egress:\n    allow: [" << kRuntimeDest << "]\n";
  }
  static void TearDownTestSuite() {
    for (const auto& f : {config_, task_, runtime_}) unlink(f.c_str());
  }
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    lab().ResetCounters();
  }
  void TearDown() override {
    if (daemon_) {
      kill(daemon_->pid(), SIGCONT);  // a test that stopped it and failed
      for (const auto& id : ids_) DeleteSandboxBestEffort(DaemonSocket(), id);
    }
    for (const auto& cg : cgroups_) Shared().Ctl({"sandbox", "remove", "--cgroup", cg});
    if (daemon_) daemon_->Stop();
  }
  Lab& lab() { return Shared().lab(); }

  void StartDaemon() {
    auto d = StartDaemonProcess(config_);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
  }
  std::string Cgroup(const std::string& name) {
    auto cg = lab().MakeCgroup("apply-" + name);
    EXPECT_TRUE(cg.ok()) << cg.status();
    if (!cg.ok()) return "";
    cgroups_.push_back(*cg);
    return *cg;
  }
  // egressctl ARGS... --socket <the daemon's> in the node netns.
  RunResult Ctl(std::vector<std::string> args) {
    args.push_back("--socket");
    args.push_back(DaemonSocket());
    return Shared().Ctl(args);
  }
  // `egressctl sandbox apply ID ARGS... -o json`: the sandbox as the daemon
  // answered (exit 0 asserted).
  nlohmann::json Apply(const std::string& id, std::vector<std::string> args) {
    ids_.push_back(id);
    args.insert(args.begin(), {"sandbox", "apply", id});
    args.insert(args.end(), {"-o", "json"});
    RunResult r = Ctl(args);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    return JsonObjectOut(r);
  }
  nlohmann::json ListById() {
    RunResult r = Ctl({"sandbox", "list", "-o", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    nlohmann::json by_id = nlohmann::json::object();
    for (const auto& s : JsonObjectOut(r).value("sandboxes", nlohmann::json::array())) {
      if (s["id"].is_string()) by_id[s["id"].get<std::string>()] = s;
    }
    return by_id;
  }
  RunSpec InSandboxSpec(const std::string& cgroup, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all", "--"});
    RunSpec spec;
    spec.argv = std::move(argv);
    spec.netns = lab().pod().netns;
    spec.cgroup = cgroup;
    spec.timeout = std::chrono::milliseconds(int(30000 * TimeScale()));
    return spec;
  }
  // One TCP connect from `cgroup` (the pod's netns, root with only CAP_NET_RAW).
  ProbeLine Connect(const std::string& cgroup, const std::string& addr, int port = 80) {
    RunResult r = lab::Run(InSandboxSpec(cgroup, {lab::BinaryPath("egressd-probe"), "batch",
                                                  absl::StrCat("tcp ", addr, " ", port)}));
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? ProbeLine{} : lines[0];
  }
  // The kernel's decision counters, read from the maps (not through the
  // daemon, which a test may have stopped).
  std::map<std::string, long long> KernelCounters() {
    RunResult r = Shared().Ctl({"status", "--json", "--socket", Shared().runtime_dir() + "/no-daemon.sock"});
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    std::map<std::string, long long> c;
    const nlohmann::json counters = JsonObjectOut(r).value("counters", nlohmann::json::object());
    for (const auto& [k, v] : counters.items()) {
      if (v.is_number_integer()) c[k] = v.get<long long>();
    }
    return c;
  }

  static inline std::string config_, task_, runtime_;
  std::optional<lab::Background> daemon_;
  std::vector<std::string> ids_;
  std::vector<std::string> cgroups_;
};

TEST_F(DaemonApply, EachInputAppliedThroughEgressctlTakesEffectInTheKernelIsListedAndDeleted) {
  StartDaemon();
  const uint64_t grant_80 = lab().TcpAccepts(kGrantDest, 80);
  const uint64_t grant_8080 = lab().TcpAccepts(kGrantDest, 8080);
  const uint64_t open_80 = lab().TcpAccepts(kOpen, 80);

  // A task's declaration, a grant on one port, strict, a label.
  const std::string cg_task = Cgroup("task");
  nlohmann::json j = Apply("ctl-task", {"--cgroup", cg_task, "--policy", task_, "--kind", "task", "--grant",
                                        absl::StrCat(kGrantDest, ":8080"), "--strict-audit", "--label", "pod=t"});
  EXPECT_TRUE(j.value("enforced", false)) << j.dump(2);
  EXPECT_TRUE(j.value("strict_audit", false)) << j.dump(2);
  EXPECT_EQ(j.value("labels", nlohmann::json::object()).value("pod", ""), "t") << j.dump(2);
  EXPECT_TRUE(Ok(Connect(cg_task, kTaskDest))) << "the task's declaration";
  EXPECT_TRUE(Ok(Connect(cg_task, kGrantDest, 8080))) << "the grant's address:port";
  EXPECT_EQ(Errno(Connect(cg_task, kGrantDest, 80)), "EPERM") << "the grant names port 8080 only";
  EXPECT_EQ(Errno(Connect(cg_task, kRuntimeDest)), "EPERM") << "a runtime's declaration is not the task's";
  EXPECT_EQ(Errno(Connect(cg_task, kNever)), "EPERM") << "declared: deny-by-default";
  EXPECT_EQ(Errno(Connect(cg_task, kOpen)), "EPERM");

  // A runtime's declaration (kind runtime implied); with kind agent it is
  // bad input, exit 2 naming it, and nothing is registered.
  const std::string cg_rt = Cgroup("runtime");
  j = Apply("ctl-runtime", {"--cgroup", cg_rt, "--runtime", runtime_});
  EXPECT_TRUE(j.value("enforced", false)) << j.dump(2);
  EXPECT_TRUE(Ok(Connect(cg_rt, kRuntimeDest))) << "the runtime's declaration";
  EXPECT_EQ(Errno(Connect(cg_rt, kTaskDest)), "EPERM");
  EXPECT_EQ(Errno(Connect(cg_rt, kNever)), "EPERM");
  const std::string cg_bad = Cgroup("bad");
  RunResult bad = Ctl({"sandbox", "apply", "ctl-bad", "--cgroup", cg_bad, "--runtime", runtime_, "--kind", "agent"});
  EXPECT_EQ(bad.exit_code, 2) << bad.Describe();
  EXPECT_TRUE(absl::StrContains(bad.err, "runtime")) << bad.Describe();
  EXPECT_EQ(CallDaemon("GET", "/v1/sandboxes/ctl-bad").status, 404);

  // Kind: an agent with only a grant is deny-by-default; the same grant
  // under kind task (a raw PUT) keeps the connected default.  Then a task
  // declaration sent as a JSON object, which egressctl sends only as text.
  const std::string cg_agent = Cgroup("agent");
  j = Apply("ctl-agent", {"--cgroup", cg_agent, "--kind", "agent", "--grant", absl::StrCat(kGrantDest, ":8080")});
  EXPECT_TRUE(j.value("enforced", false)) << j.dump(2);
  EXPECT_TRUE(Ok(Connect(cg_agent, kGrantDest, 8080)));
  EXPECT_EQ(Errno(Connect(cg_agent, kOpen)), "EPERM") << "an agent reaches only its grants and the platform";
  daemon::ClientResponse flip = CallDaemon(
      "PUT", "/v1/sandboxes/ctl-agent",
      {{"cgroup", cg_agent}, {"kind", "task"}, {"grants", {absl::StrCat(kGrantDest, ":8080")}}});
  ASSERT_EQ(flip.status, 200) << flip.body.dump(2);
  EXPECT_TRUE(Ok(Connect(cg_agent, kOpen))) << "kind task, nothing declared: the deployment's default";
  flip = CallDaemon("PUT", "/v1/sandboxes/ctl-agent",
                    {{"cgroup", cg_agent},
                     {"kind", "agent"},
                     {"task", {{"egress", {{"allow", {kTaskDest}}}}}},
                     {"grants", {absl::StrCat(kGrantDest, ":8080")}},
                     {"strict_audit", true}});
  ASSERT_EQ(flip.status, 200) << flip.body.dump(2);
  EXPECT_TRUE(flip.body.value("strict_audit", false)) << flip.body.dump(2);
  EXPECT_TRUE(Ok(Connect(cg_agent, kTaskDest))) << "the JSON declaration";
  EXPECT_TRUE(Ok(Connect(cg_agent, kGrantDest, 8080)));
  EXPECT_EQ(Errno(Connect(cg_agent, kOpen)), "EPERM");

  // Audit-only (the config allows it): a denied destination passes and is
  // audited as would-deny; a protected one stays denied.
  const std::string cg_audit = Cgroup("audit");
  j = Apply("ctl-audit", {"--cgroup", cg_audit, "--egress", kTaskDest, "--audit-only"});
  EXPECT_FALSE(j.value("enforced", true)) << "audit-only is never shown enforced: " << j.dump(2);
  EXPECT_TRUE(j.value("audit_only", false)) << j.dump(2);
  EXPECT_EQ(j.value("state", ""), "registered") << j.dump(2);
  EXPECT_TRUE(Ok(Connect(cg_audit, kOpen))) << "a would-deny passes";
  EXPECT_EQ(Errno(Connect(cg_audit, lab::kImds4)), "EPERM") << "protected stays denied";
  nlohmann::json would_deny;
  const bool audited = Lab::WaitFor(
      [&] {
        // The spool as written so far (no follow): the record is there once
        // the daemon's reader drained the ring.
        absl::Status s = daemon::StreamAudit(DaemonSocket(), "/v1/audit?sandbox=ctl-audit&verdict=would-deny&type=connect",
                                             [&](const std::string& line) {
                                               auto rec = nlohmann::json::parse(line, nullptr, false);
                                               if (rec.is_object() && rec.contains("IP") && rec["IP"].is_object() &&
                                                   rec["IP"].value("destination", "") == kOpen) {
                                                 would_deny = rec;
                                               }
                                               return true;
                                             });
        EXPECT_TRUE(s.ok()) << s;
        return !would_deny.is_null() || !s.ok();
      },
      std::chrono::milliseconds(int(10000 * TimeScale())));
  ASSERT_TRUE(audited && !would_deny.is_null()) << "no would-deny record for " << kOpen << " in the daemon's trail";
  EXPECT_EQ(would_deny.value("action", ""), "pass") << would_deny.dump();
  EXPECT_EQ(would_deny.value("reason", ""), "default-deny") << would_deny.dump();

  // The kernel's view (status through the daemon): each mode as applied.
  RunResult st = Ctl({"status", "-o", "json"});
  ASSERT_EQ(st.exit_code, 0) << st.Describe();
  std::map<uint64_t, nlohmann::json> kernel;
  for (const auto& c : JsonObjectOut(st).value("cgroups", nlohmann::json::array())) {
    kernel[c.value("cgroup_id", uint64_t{0})] = c;
  }
  nlohmann::json listed = ListById();
  for (const char* id : {"ctl-task", "ctl-runtime", "ctl-agent", "ctl-audit"}) {
    ASSERT_TRUE(listed.contains(id)) << id << " not listed: " << listed.dump(2);
    const auto found = kernel.find(listed[id].value("cgroup_id", uint64_t{0}));
    const nlohmann::json k = found == kernel.end() ? nlohmann::json::object() : found->second;
    EXPECT_EQ(k.value("kind", ""), "sandbox") << id << ": " << k.dump();
    EXPECT_EQ(k.value("policy_id", 0u), listed[id].value("policy_id", 1u)) << id;
    const bool audit_only = std::string(id) == "ctl-audit";
    const bool strict = std::string(id) == "ctl-task" || std::string(id) == "ctl-agent";
    EXPECT_EQ(listed[id].value("enforced", audit_only), !audit_only) << id;
    EXPECT_EQ(k.value("audit_only", !audit_only), audit_only) << id << " in the kernel's policy header";
    EXPECT_EQ(k.value("strict_audit", !strict), strict) << id << " in the kernel's policy header";
  }
  EXPECT_FALSE(listed.contains("ctl-bad"));
  RunResult text = Ctl({"sandbox", "list"});
  EXPECT_TRUE(absl::StrContains(text.out, "AUDIT-ONLY")) << text.out;

  // Delete: gone from the daemon and the kernel; the cgroup is judged by nothing.
  const uint64_t task_id = listed["ctl-task"].value("cgroup_id", uint64_t{0});
  RunResult del = Ctl({"sandbox", "delete", "ctl-task"});
  EXPECT_EQ(del.exit_code, 0) << del.Describe();
  EXPECT_TRUE(absl::StrContains(del.out, "deleted ctl-task")) << del.out;
  EXPECT_EQ(CallDaemon("GET", "/v1/sandboxes/ctl-task").status, 404);
  EXPECT_FALSE(ListById().contains("ctl-task"));
  st = Ctl({"status", "-o", "json"});
  for (const auto& c : JsonObjectOut(st).value("cgroups", nlohmann::json::array())) {
    EXPECT_NE(c.value("cgroup_id", uint64_t{0}), task_id) << "its kernel entry stayed: " << c.dump();
  }
  EXPECT_TRUE(Ok(Connect(cg_task, kOpen))) << "unregistered: judged by nothing (it was denied above)";
  RunResult again = Ctl({"sandbox", "delete", "ctl-task"});
  EXPECT_EQ(again.exit_code, 2) << "a 404: " << again.Describe();

  // At the lab host: nothing any policy denied arrived, beside what was allowed.
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().FlowsOpenedTo(kNever), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().FlowsOpenedTo(lab::kImds4), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(kGrantDest, 80), grant_80) << "the grant's other port: " << lab().CountersSummary();
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kGrantDest, 8080) == grant_8080 + 3; }))
      << lab().CountersSummary();
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kOpen, 80) == open_80 + 3; }))
      << "kind task, audit-only, deleted: " << lab().CountersSummary();
  EXPECT_GT(lab().TcpAccepts(kTaskDest, 80), 0u) << lab().CountersSummary();
  EXPECT_GT(lab().TcpAccepts(kRuntimeDest, 80), 0u) << lab().CountersSummary();
}

// Strict through the daemon: the daemon's audit reader stopped (SIGSTOP) and
// the ring filled by other sandboxes' denied connects, a strict sandbox's
// allowed connect is refused (its event could not be recorded: strict_deny)
// while a relaxed one's beside it arrives; enforcement never waits for the
// reader.  (A ring read again and the strict sandbox connecting: the
// audit_modes test's, without a daemon.)
TEST_F(DaemonApply, StrictAppliedThroughTheDaemonRefusesWhatCannotBeRecorded) {
  StartDaemon();
  const std::string cg_strict = Cgroup("strict");
  nlohmann::json j = Apply("ctl-strict", {"--cgroup", cg_strict, "--egress", kTaskDest, "--strict-audit"});
  ASSERT_TRUE(j.value("strict_audit", false)) << j.dump(2);
  const std::string cg_relaxed = Cgroup("relaxed");
  j = Apply("ctl-relaxed", {"--cgroup", cg_relaxed, "--egress", kTaskDest});
  ASSERT_FALSE(j.value("strict_audit", true)) << j.dump(2);
  // Fillers: each a sandbox with an audit budget of its own.
  std::vector<std::string> fillers;
  for (int i = 0; i < 12; ++i) {
    fillers.push_back(Cgroup(absl::StrCat("filler-", i)));
    j = Apply(absl::StrCat("ctl-filler-", i), {"--cgroup", fillers.back(), "--egress", kTaskDest});
    ASSERT_TRUE(j.value("enforced", false)) << j.dump(2);
  }
  EXPECT_TRUE(Ok(Connect(cg_strict, kTaskDest))) << "strict, with the reader running";

  ASSERT_EQ(kill(daemon_->pid(), SIGSTOP), 0);
  const long long lost_before = KernelCounters()["event_lost"];
  bool full = false;
  for (size_t i = 0; i < fillers.size() && !full; ++i) {
    RunResult fill = lab::Run(InSandboxSpec(fillers[i], {lab::BinaryPath("egressd-probe"), "tcp-burst", kNever, "80", "20000"}));
    ASSERT_EQ(fill.exit_code, 0) << fill.Describe();
    full = KernelCounters()["event_lost"] > lost_before;
  }
  ASSERT_TRUE(full) << "the ring never filled";
  const auto before = KernelCounters();
  const uint64_t accepts = lab().TcpAccepts(kTaskDest, 80);
  EXPECT_EQ(Errno(Connect(cg_strict, kTaskDest)), "EPERM") << "strict: its event cannot be recorded";
  EXPECT_TRUE(Ok(Connect(cg_relaxed, kTaskDest))) << "a relaxed sandbox beside it carries on";
  const auto after = KernelCounters();
  ASSERT_EQ(kill(daemon_->pid(), SIGCONT), 0);
  EXPECT_EQ(after.at("strict_deny") - before.at("strict_deny"), 1) << "the strict refusal, counted";
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kTaskDest, 80) == accepts + 1; }))
      << "the relaxed connect arrived: " << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(kTaskDest, 80), accepts + 1) << "and only it";
  EXPECT_EQ(lab().FlowsOpenedTo(kNever), 0u) << lab().CountersSummary();
  EXPECT_EQ(CallDaemon("GET", "/healthz").status, 200) << "the daemon serves again";
}

}  // namespace
}  // namespace egressd::test
