// The node daemon (issue 14) on the node-routed lab: egressd runs in the
// node's netns, outside every sandbox cgroup; pods are sandboxes registered
// through its API (HTTP on a unix socket).  One daemon binary, one loaded
// instance (Shared()) for the whole binary; each test starts its own daemon
// process (adopting the pinned programs: milliseconds) and kills it.
//
//   - PUT registers and says enforced only once the kernel and the DNS
//     endpoint serve the policy; GET, list, DELETE; bad input is 400 with
//     every reason and changes nothing.
//   - A PUT the node cannot contain is a 409 node_cannot_contain naming
//     what is missing, on every kernel (an instance loaded without the bpf
//     LSM by fault injection), whether or not the daemon accepts
//     uncontained sandboxes.  (egressctl's apply, list and delete of every
//     per-sandbox input: daemon_apply_test.cc, in this binary.)
//   - Callers inside a sandbox are refused (403), a node caller is served,
//     and a sandboxed caller that exits before its request is read is
//     refused too (its pid could name another process by then).
//   - kill -9: allowed stays allowed, denied stays denied, the sandbox's DNS
//     fails closed (refused, nothing reaches the upstream); a restart adopts
//     the pins and records and answers again on the same endpoint.  Time to
//     ready, median of 10 restarts.
//   - A pod UID instead of a cgroup, both orders (synthetic kubelet systemd
//     layout under a lab cgroup given as --kubelet-cgroup-root): the pod's
//     cgroup exists, then PUT (201, its containers' scopes judged by it);
//     PUT first (202 pending), then the cgroup appears below a contained
//     root and a process started in it before the daemon can act (the
//     daemon stopped) is denied everything, allowed only once GET says
//     enforced; a DELETE of a held PUT cancels it.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
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

constexpr const char* kUpstream = lab::kPublicE4;  // 198.51.100.8: the config's dns.upstreams
constexpr const char* kWorld8 = lab::kDns4;        // 8.8.8.8: must see nothing
constexpr const char* kName = "named.example";     // -> kPublicC4, allowed by name only
constexpr const char* kDownName = "down.example";  // asked only while the daemon is down
// q1..q5.example -> 203.0.113.1..5: answers only (learned, never connected
// to), for the learned-book restart test.

class Daemon : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    Lab& lab = Shared().lab();
    auto up = DnsServer::Start(DnsServerSpec{.netns = lab.world_netns(),
                                             .listen = {kUpstream},
                                             .records = {{kName, {lab::kPublicC4}},
                                                         {kDownName, {lab::kPublicC4}},
                                                         {"q1.example", {"203.0.113.1"}},
                                                         {"q2.example", {"203.0.113.2"}},
                                                         {"q3.example", {"203.0.113.3"}},
                                                         {"q4.example", {"203.0.113.4"}},
                                                         {"q5.example", {"203.0.113.5"}}},
                                             .extra_args = {"--local-ttl=300"}});
    ASSERT_TRUE(up.ok()) << up.status();
    upstream_ = std::move(*up).release();
    auto w = DnsServer::Start(DnsServerSpec{.netns = lab.world_netns(), .listen = {kWorld8},
                                            .records = {{kName, {lab::kPublicD4}}}});
    ASSERT_TRUE(w.ok()) << w.status();
    world8_ = std::move(*w).release();
    config_ = Shared().runtime_dir() + "-daemon.yaml";
    std::ofstream(config_) << "dns:\n  upstreams: [" << kUpstream << "]\n  endpoint4: " << lab::kPodGatewayV4
                           << "\n  endpoint6: " << lab::kPodGatewayV6 << "\n";
  }
  static void TearDownTestSuite() {
    delete upstream_;
    delete world8_;
    upstream_ = world8_ = nullptr;
    unlink(config_.c_str());
  }
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    ASSERT_NE(upstream_, nullptr);
    lab().ResetCounters();
  }
  void TearDown() override {
    // Whatever a test left registered goes, through the daemon if it runs.
    for (const auto& [id, cg] : registered_) {
      if (daemon_) DeleteSandboxBestEffort(socket(), id);
      Shared().Ctl({"sandbox", "remove", "--cgroup", cg});
    }
    for (const auto& cg : contained_) Shared().Ctl({"sandbox", "remove", "--cgroup", cg});
    if (daemon_) daemon_->Stop();
  }
  Lab& lab() { return Shared().lab(); }
  static std::string socket() { return DaemonSocket(); }

  // Starts egressd in the node netns and returns once it said ready.
  void StartDaemon(const std::vector<std::string>& extra = {}) {
    auto d = StartDaemonProcess(config_override_.empty() ? config_ : config_override_, extra);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
  }
  void Kill9() {
    ASSERT_TRUE(daemon_);
    kill(daemon_->pid(), SIGKILL);
    RunResult r = daemon_->Wait();
    EXPECT_EQ(r.exit_code, -SIGKILL) << r.Describe();
    daemon_.reset();
  }

  daemon::ClientResponse Call(const std::string& method, const std::string& target, const nlohmann::json& body = {}) {
    return CallDaemon(method, target, body);
  }
  // Asks /readyz until it says 200 (its DNS self-test answers on the
  // daemon's loop, a moment after start; each call a round trip), or the
  // last answer after the deadline.
  daemon::ClientResponse WaitReady() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int(5000 * TimeScale()));
    daemon::ClientResponse r;
    do {
      r = Call("GET", "/readyz");
    } while (r.status != 200 && std::chrono::steady_clock::now() < deadline);
    return r;
  }
  // A fresh lab cgroup registered as `id` through the API.
  std::string Put(const std::string& id, nlohmann::json body, int want = 201) {
    static int n = 0;
    auto cg = lab().MakeCgroup(absl::StrCat("daemon-", n++));
    EXPECT_TRUE(cg.ok()) << cg.status();
    if (!cg.ok()) return "";
    body["cgroup"] = *cg;
    registered_.emplace_back(id, *cg);
    daemon::ClientResponse r = Call("PUT", "/v1/sandboxes/" + id, body);
    EXPECT_EQ(r.status, want) << r.body.dump(2);
    return *cg;
  }

  RunResult InSandbox(const std::string& cgroup, std::vector<std::string> argv, bool hostile = false) {
    if (hostile) argv.insert(argv.begin(), {"setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all", "--"});
    RunSpec spec;
    spec.argv = std::move(argv);
    spec.netns = lab().pod().netns;
    spec.cgroup = cgroup;
    spec.timeout = 20s;
    return lab::Run(spec);
  }
  ProbeLine Connect(const std::string& cgroup, const std::string& addr) {
    RunResult r = InSandbox(cgroup, {lab::BinaryPath("egressd-probe"), "batch", absl::StrCat("tcp ", addr, " 80")},
                            /*hostile=*/true);
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? ProbeLine{} : lines[0];
  }
  RunResult Dig(const std::string& cgroup, const std::string& name) {
    return InSandbox(cgroup, {"dig", "+time=1", "+tries=1", "+short", "@8.8.8.8", name});
  }

  static inline DnsServer* upstream_ = nullptr;
  static inline DnsServer* world8_ = nullptr;
  static inline std::string config_;
  std::optional<lab::Background> daemon_;
  std::string config_override_;  // non-empty: StartDaemon's --config
  std::vector<std::pair<std::string, std::string>> registered_;
  std::vector<std::string> contained_;
};

std::string FirstLine(const std::string& s) {
  return std::string(absl::StripAsciiWhitespace(s.substr(0, s.find('\n'))));
}

// error.FIELD of an error answer ("" when the answer is no error).
std::string ErrorField(const nlohmann::json& body, const char* field) {
  if (!body.is_object() || !body.contains("error") || !body["error"].is_object()) return "";
  return body["error"].value(field, "");
}

TEST_F(Daemon, PutEnforcesAndServesDnsGetListDeleteAndBadInputChangesNothing) {
  StartDaemon();
  EXPECT_EQ(Call("GET", "/healthz").status, 200);
  daemon::ClientResponse ready = WaitReady();
  EXPECT_EQ(ready.status, 200) << ready.body.dump();
  daemon::ClientResponse status = Call("GET", "/v1/status");
  EXPECT_EQ(status.body.value("enforcing", false), true) << status.body.dump();
  EXPECT_EQ(status.body.value("programs", ""), "adopted") << "egressctl load pinned this build's programs";

  const std::string cg = Put("pod-a", {{"egress", {lab::kPublicA4, kName}}, {"labels", {{"pod", "a"}}}});
  daemon::ClientResponse got = Call("GET", "/v1/sandboxes/pod-a");
  ASSERT_EQ(got.status, 200) << got.body.dump();
  EXPECT_TRUE(got.body.value("enforced", false)) << got.body.dump(2);
  EXPECT_EQ(got.body["labels"].value("pod", ""), "a");
  ASSERT_TRUE(got.body["dns"].is_object()) << got.body.dump(2);
  EXPECT_TRUE(got.body["dns"].value("served", false));
  const uint32_t policy_id = got.body.value("policy_id", 0u);

  // The kernel half and the DNS half of what PUT said.
  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicA4)));
  EXPECT_EQ(Errno(Connect(cg, lab::kPublicB4)), "EPERM");
  EXPECT_EQ(Errno(Connect(cg, lab::kPublicC4)), "EPERM") << "no answer taught it yet";
  EXPECT_EQ(FirstLine(Dig(cg, kName).out), lab::kPublicC4);
  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicC4))) << "the name's address, learned through the daemon's proxy";

  // Bad input: every reason, 400, nothing changed.
  daemon::ClientResponse bad = Call("PUT", "/v1/sandboxes/pod-a",
                                    {{"cgroup", cg}, {"egress", {"not a target!"}}, {"floor", "airgapped"}});
  EXPECT_EQ(bad.status, 400) << bad.body.dump();
  EXPECT_GE(bad.body["error"]["reasons"].size(), 1u) << bad.body.dump();
  EXPECT_TRUE(absl::StrContains(bad.body.dump(), "floor")) << bad.body.dump();
  daemon::ClientResponse bad2 = Call("PUT", "/v1/sandboxes/pod-a", {{"cgroup", cg}, {"egress", {"not a target!"}}});
  EXPECT_EQ(bad2.status, 400) << bad2.body.dump();
  EXPECT_TRUE(absl::StrContains(bad2.body.dump(), "not a target!")) << "the compiler's message: " << bad2.body.dump();
  EXPECT_EQ(Call("GET", "/v1/sandboxes/pod-a").body.value("policy_id", 0u), policy_id);
  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicA4))) << "the old policy still judges";

  // A flip: B allowed, A no longer.
  EXPECT_EQ(Call("PUT", "/v1/sandboxes/pod-a", {{"cgroup", cg}, {"egress", {lab::kPublicB4}}}).status, 200);
  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicB4)));
  EXPECT_EQ(Errno(Connect(cg, lab::kPublicA4)), "EPERM");

  daemon::ClientResponse list = Call("GET", "/v1/sandboxes");
  bool listed = false;
  for (const auto& s : list.body["sandboxes"]) listed |= s.value("id", nlohmann::json()).is_string() && s["id"] == "pod-a";
  EXPECT_TRUE(listed) << list.body.dump(2);
  // egressctl's client of the same API.
  RunResult ctl = Shared().Ctl({"sandbox", "get", "pod-a", "--socket", socket(), "-o", "json"});
  EXPECT_EQ(ctl.exit_code, 0) << ctl.Describe();
  EXPECT_TRUE(absl::StrContains(ctl.out, "\"enforced\": true")) << ctl.out;

  EXPECT_EQ(Call("DELETE", "/v1/sandboxes/pod-a").status, 200);
  EXPECT_EQ(Call("GET", "/v1/sandboxes/pod-a").status, 404);
  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicA4))) << "unregistered: judged by nothing";
  EXPECT_EQ(Call("DELETE", "/v1/sandboxes/pod-a").status, 404);
}

// A sandbox that requires socket containment gets it, or the PUT fails
// naming what is missing: never a success the node cannot honour.  Each
// kernel takes the branch it can (the 6.18 host has no bpf LSM; the 6.1
// guest does), so both run in CI.
TEST_F(Daemon, RequiredContainmentIsGivenOrRefusedNamingWhatIsMissing) {
  StartDaemon();
  if (Call("GET", "/v1/status").body.value("socket_containment", false)) {
    const std::string cg = Put("pod-strict", {{"egress", {lab::kPublicA4}}, {"require_socket_containment", true}});
    daemon::ClientResponse r = Call("GET", "/v1/sandboxes/pod-strict");
    ASSERT_EQ(r.status, 200) << r.body.dump();
    EXPECT_TRUE(r.body.value("enforced", false)) << r.body.dump();
    // What the LSM then refuses a CAP_NET_RAW pod is containment_socket_test's.
    EXPECT_FALSE(cg.empty());
    EXPECT_EQ(Call("DELETE", "/v1/sandboxes/pod-strict").status, 200);
    return;
  }
  const std::string cg = Put("pod-strict", {{"egress", {lab::kPublicA4}}, {"require_socket_containment", true}}, 409);
  daemon::ClientResponse again =
      Call("PUT", "/v1/sandboxes/pod-strict", {{"cgroup", cg}, {"egress", {lab::kPublicA4}}, {"require_socket_containment", true}});
  ASSERT_EQ(again.status, 409) << again.body.dump(2);
  EXPECT_EQ(ErrorField(again.body, "code"), "node_cannot_contain") << again.body.dump(2);
  const std::string message = ErrorField(again.body, "message");
  EXPECT_TRUE(absl::StrContains(message, "socket-family containment is missing")) << message;
  EXPECT_TRUE(absl::StrContains(message, "the bpf LSM is not in force on this node")) << "names what is missing: " << message;
  EXPECT_TRUE(absl::StrContains(message, "nothing was changed")) << message;
  daemon::ClientResponse r = Call("GET", "/v1/sandboxes/pod-strict");
  EXPECT_EQ(r.status, 404) << "nothing was registered: " << r.body.dump();
  RunResult st = Shared().Ctl({"status", "--json"});
  EXPECT_FALSE(absl::StrContains(st.out, cg)) << st.out;
}

// The refusal on every kernel: an instance of its own loaded by egressd
// without the bpf LSM (EGRESSD_FAULT=probe:bpf-lsm reports it inactive, as
// this project's 6.18 host is; Debian's 6.1 has it, so without the fault
// its guests would never take this branch).  /v1/status names what is
// missing; a PUT requiring containment is a 409 node_cannot_contain naming
// it (egressctl: exit 3), even where the daemon accepts uncontained
// sandboxes; a daemon that does not accept them refuses every cgroup PUT
// the same way; nothing is registered by any refusal.
TEST_F(Daemon, WithoutTheBpfLsmEveryKernelRefusesContainmentNamingWhatIsMissing) {
  const InstanceDirs dirs = Shared().Other("daemon-nolsm");
  const std::string sock = dirs.runtime_dir + "/egressd.sock";
  std::optional<lab::Background> d;
  auto start = [&](bool accept) {
    RunSpec s;
    s.netns = lab().node_netns();
    s.env = {{"EGRESSD_NODE_NETNS", lab().node_netns()},
             {"EGRESSD_FAULT", "probe:bpf-lsm"},
             // Not the test environment's opt-out: each start says its own.
             {"EGRESSD_ACCEPT_UNCONTAINED_PACKET_SOCKETS", ""}};
    s.argv = {lab::BinaryPath("egressd"), "--pin-root", dirs.pin_root, "--runtime-dir", dirs.runtime_dir, "--socket", sock};
    if (accept) s.argv.push_back("--accept-uncontained-packet-sockets");
    s.timeout = std::chrono::minutes(10);
    auto bg = lab::Start(s);
    ASSERT_TRUE(bg.ok()) << bg.status();
    // The first start loads the programs (each verified): seconds, more in a guest.
    auto line = bg->ReadOutLine(std::chrono::milliseconds(int(60000 * TimeScale())));
    ASSERT_TRUE(line && absl::StartsWith(*line, "ready:")) << bg->err();
    d = std::move(*bg);
  };
  auto call = [&](const std::string& method, const std::string& target, const nlohmann::json& body = {}) {
    auto r = daemon::Call(sock, method, target, body.is_null() ? "" : body.dump());
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : daemon::ClientResponse{};
  };
  auto refused_naming_it = [&](const daemon::ClientResponse& r) {
    EXPECT_EQ(r.status, 409) << r.body.dump(2);
    EXPECT_EQ(ErrorField(r.body, "code"), "node_cannot_contain") << r.body.dump(2);
    const std::string m = ErrorField(r.body, "message");
    EXPECT_TRUE(absl::StrContains(m, "socket-family containment is missing")) << m;
    EXPECT_TRUE(absl::StrContains(m, "the bpf LSM is not in force on this node")) << "names what is missing: " << m;
    EXPECT_TRUE(absl::StrContains(m, "nothing was changed")) << m;
  };
  auto nothing_registered = [&] {
    RunResult st = Egressd::CtlAt(lab(), dirs, {"status", "--json", "--socket", sock + ".none"});
    auto j = nlohmann::json::parse(st.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << st.Describe();
    EXPECT_TRUE(j.contains("cgroups") && j["cgroups"].empty()) << "a map entry was written: " << st.out;
    EXPECT_TRUE(j.contains("records") && j["records"].empty()) << "a record was written: " << st.out;
  };
  auto cg = lab().MakeCgroup("daemon-nolsm");
  ASSERT_TRUE(cg.ok()) << cg.status();
  const nlohmann::json plain = {{"cgroup", *cg}, {"egress", {lab::kPublicA4}}};
  nlohmann::json strict = plain;
  strict["require_socket_containment"] = true;

  start(/*accept=*/true);
  ASSERT_TRUE(d) << "egressd on the instance without the bpf LSM never said ready";
  nlohmann::json st = call("GET", "/v1/status").body;
  EXPECT_TRUE(st.value("enforcing", false)) << "the cgroup programs are in force: " << st.dump(2);
  EXPECT_FALSE(st.value("socket_containment", true)) << st.dump(2);
  EXPECT_TRUE(absl::StrContains(st.value("socket_containment_missing", ""), "the bpf LSM is not in force")) << st.dump(2);
  EXPECT_TRUE(st.value("accepts_uncontained", false)) << st.dump(2);
  refused_naming_it(call("PUT", "/v1/sandboxes/nolsm-strict", strict));
  EXPECT_EQ(call("GET", "/v1/sandboxes/nolsm-strict").status, 404);
  RunResult ctl = lab::Run(RunSpec{.argv = {lab::BinaryPath("egressctl"), "sandbox", "apply", "nolsm-strict", "--cgroup",
                                            *cg, "--egress", lab::kPublicA4, "--require-socket-containment", "--socket",
                                            sock}});
  EXPECT_EQ(ctl.exit_code, 3) << ctl.Describe();
  EXPECT_TRUE(absl::StrContains(ctl.err, "node_cannot_contain")) << ctl.err;
  EXPECT_TRUE(absl::StrContains(ctl.err, "the bpf LSM is not in force")) << ctl.err;
  nothing_registered();
  // The operator's opt-out takes a sandbox that does not require it, saying so.
  daemon::ClientResponse taken = call("PUT", "/v1/sandboxes/nolsm-plain", plain);
  EXPECT_EQ(taken.status, 201) << taken.body.dump(2);
  EXPECT_TRUE(absl::StrContains(d->err(), "registered anyway")) << d->err();
  EXPECT_EQ(call("DELETE", "/v1/sandboxes/nolsm-plain").status, 200);
  kill(d->pid(), SIGKILL);
  d->Wait();

  start(/*accept=*/false);
  ASSERT_TRUE(d);
  st = call("GET", "/v1/status").body;
  EXPECT_FALSE(st.value("accepts_uncontained", true)) << st.dump(2);
  refused_naming_it(call("PUT", "/v1/sandboxes/nolsm-plain", plain));
  refused_naming_it(call("PUT", "/v1/sandboxes/nolsm-strict", strict));
  nothing_registered();
  kill(d->pid(), SIGKILL);
  d->Wait();
  RunResult unload = Egressd::CtlAt(lab(), dirs, {"unload", "--force"});
  EXPECT_EQ(unload.exit_code, 0) << unload.Describe();
}

// Writes `request` to the daemon's socket from a child in `cgroup`, which
// exits at once without reading any answer; returns once it is reaped.
void ShortLivedClient(const std::string& sock, const std::string& cgroup, const std::string& request) {
  pid_t pid = fork();
  if (pid == 0) {
    int cg = open((cgroup + "/cgroup.procs").c_str(), O_WRONLY);
    if (cg < 0 || write(cg, "0", 1) != 1) _exit(3);
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock.c_str());
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) _exit(4);
    if (write(fd, request.data(), request.size()) != ssize_t(request.size())) _exit(5);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "the client failed at step " << WEXITSTATUS(st);
}

TEST_F(Daemon, CallersInsideASandboxAreRefusedEvenOnesThatExitBeforeTheirRequestIsRead) {
  StartDaemon();
  const std::string victim = Put("victim", {{"egress", {lab::kPublicA4}}});
  const std::string attacker = Put("attacker", {{"egress", {lab::kPublicA4}}});
  // A sandboxed root that stays: 403, the victim untouched.
  RunResult stay = InSandbox(attacker, {lab::BinaryPath("egressctl"), "sandbox", "delete", "victim", "--socket", socket()});
  EXPECT_NE(stay.exit_code, 0) << stay.Describe();
  EXPECT_TRUE(absl::StrContains(stay.err, "403")) << stay.Describe();
  EXPECT_TRUE(absl::StrContains(stay.err, "inside a sandbox")) << stay.Describe();
  // Below a sandbox counts as inside it.
  auto below = lab().MakeCgroup(absl::StrCat(attacker.substr(lab().cgroup_base().size() + 1), "/child"));
  ASSERT_TRUE(below.ok()) << below.status();
  RunResult deeper = InSandbox(*below, {lab::BinaryPath("egressctl"), "sandbox", "list", "--socket", socket()});
  EXPECT_TRUE(absl::StrContains(deeper.err, "403")) << deeper.Describe();

  // One that exits before the daemon reads its request: the daemon is
  // stopped, the connection waits in the backlog, the client exits and is
  // reaped; then the daemon runs on.
  const uint64_t refused_before = Call("GET", "/v1/status").body.value("refused_callers", 0u);
  kill(daemon_->pid(), SIGSTOP);
  ShortLivedClient(socket(), attacker,
                   "DELETE /v1/sandboxes/victim HTTP/1.1\r\nHost: egressd\r\nContent-Length: 0\r\n\r\n");
  kill(daemon_->pid(), SIGCONT);
  // The status request is queued behind the dead client's connection.
  daemon::ClientResponse after = Call("GET", "/v1/status");
  EXPECT_EQ(after.body.value("refused_callers", 0u), refused_before + 1) << after.body.dump();
  EXPECT_EQ(Call("GET", "/v1/sandboxes/victim").status, 200) << "the dead client's DELETE was acted on";
  // Its log says why (the pidfd found the process gone).
  EXPECT_TRUE(Lab::WaitFor([&] { return daemon_->err().find("cannot be verified") != std::string::npos; }))
      << daemon_->err();
  EXPECT_EQ(Errno(Connect(victim, lab::kPublicB4)), "EPERM") << "the victim is still enforced";

  // A node caller (this test, in no sandbox) is served: the positive control.
  EXPECT_EQ(Call("DELETE", "/v1/sandboxes/victim").status, 200);
}

TEST_F(Daemon, Kill9KeepsEnforcementDnsFailsClosedAndARestartResumesOnTheSameEndpoint) {
  StartDaemon();
  const std::string cg = Put("pod-r", {{"egress", {lab::kPublicA4, kName, kDownName}}});
  const nlohmann::json before = Call("GET", "/v1/sandboxes/pod-r").body;
  ASSERT_TRUE(before["dns"].is_object()) << before.dump(2);
  EXPECT_EQ(FirstLine(Dig(cg, kName).out), lab::kPublicC4);
  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicC4)));

  Kill9();
  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicA4))) << "allowed stays allowed";
  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicC4))) << "a learned address keeps its expiry";
  EXPECT_EQ(Errno(Connect(cg, lab::kPublicB4)), "EPERM") << "denied stays denied";
  const uint64_t up_before = upstream_->QueriesFor(kDownName);
  const uint64_t w8_before = world8_->Queries();
  RunResult down = Dig(cg, kDownName);
  const std::string said = down.out + down.err;
  EXPECT_TRUE(absl::StrContains(said, "connection refused") || absl::StrContains(said, "timed out"))
      << "DNS fails closed while the daemon is down: " << down.Describe();
  EXPECT_EQ(FirstLine(down.out).find(lab::kPublicC4), std::string::npos) << down.Describe();

  StartDaemon();
  EXPECT_EQ(WaitReady().status, 200);
  const nlohmann::json after = Call("GET", "/v1/sandboxes/pod-r").body;
  EXPECT_EQ(after["dns"], before["dns"]) << "the same endpoint";
  EXPECT_EQ(after.value("policy_id", 0u), before.value("policy_id", 0u));
  EXPECT_EQ(FirstLine(Dig(cg, kDownName).out), lab::kPublicC4) << "answered again";
  EXPECT_TRUE(upstream_->WaitForQuery(kDownName, 3s)) << "positive control: " << upstream_->Log();
  EXPECT_EQ(upstream_->QueriesFor(kDownName), up_before + 1) << "nothing reached the upstream while down";
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(world8_->Queries(), w8_before) << world8_->Log();
  EXPECT_EQ(lab().PacketsTo(kWorld8), 0u) << lab().CountersSummary();

  // Time to ready: from exec to /readyz answering 200, ten restarts.
  std::vector<double> ms;
  for (int i = 0; i < 10; ++i) {
    Kill9();
    const auto t0 = std::chrono::steady_clock::now();
    StartDaemon();
    ASSERT_EQ(WaitReady().status, 200);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double median = (ms[4] + ms[5]) / 2;
  std::printf("egressd time to ready (exec to /readyz 200, 1 sandbox, 10 restarts): median %.1f ms, min %.1f, max %.1f\n",
              median, ms.front(), ms.back());
  EXPECT_LT(median, 1000 * TimeScale()) << "goal: under 1 s";
}

// A synthetic kubelet (systemd cgroup driver, burstable QoS) below a lab
// cgroup: <root>/kubepods.slice/kubepods-burstable.slice/... (no kubelet
// runs here; the layouts' unit tests are tests/unit/pod_cgroup_test.cc).
struct FakeKubelet {
  std::string root;  // --kubelet-cgroup-root
  std::string qos;   // the pods' parent
  std::string rel;   // qos below the lab's cgroup base
  static std::string PodDir(const std::string& uid) {
    std::string u = uid;
    std::replace(u.begin(), u.end(), '-', '_');
    return "kubepods-burstable-pod" + u + ".slice";
  }
};

class DaemonPods : public Daemon {
 protected:
  FakeKubelet MakeKubelet(const std::string& name) {
    FakeKubelet k;
    auto root = lab().MakeCgroup(name);
    EXPECT_TRUE(root.ok()) << root.status();
    k.root = root.ok() ? *root : "";
    k.rel = name + "/kubepods.slice/kubepods-burstable.slice";
    auto qos = lab().MakeCgroup(k.rel);
    EXPECT_TRUE(qos.ok()) << qos.status();
    k.qos = qos.ok() ? *qos : "";
    return k;
  }
  // GETs until the sandbox's state is `want` (each GET a round trip to the
  // daemon's loop, which applies a held PUT when inotify tells it).
  nlohmann::json WaitForState(const std::string& id, const std::string& want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int(10000 * TimeScale()));
    nlohmann::json last;
    while (std::chrono::steady_clock::now() < deadline) {
      daemon::ClientResponse r = Call("GET", "/v1/sandboxes/" + id);
      last = r.body;
      if (r.status == 200 && last.value("state", "") == want) return last;
      if (r.status != 200 || last.value("state", "") == "failed") break;
    }
    ADD_FAILURE() << id << " never reached state " << want << ": " << last.dump(2);
    return last;
  }
};

TEST_F(DaemonPods, PodUidWhoseCgroupExistsIsRegisteredAndItsContainersAreJudgedByIt) {
  const FakeKubelet k = MakeKubelet("kubelet-a");
  const std::string uid = "5b0c6f7e-1d2a-4b3c-9d8e-7f6a5b4c3d2e";
  auto pod = lab().MakeCgroup(k.rel + "/" + FakeKubelet::PodDir(uid));
  ASSERT_TRUE(pod.ok()) << pod.status();
  auto ctr = lab().MakeCgroup(k.rel + "/" + FakeKubelet::PodDir(uid) + "/cri-containerd-0f1e2d3c.scope");
  ASSERT_TRUE(ctr.ok()) << ctr.status();
  StartDaemon({"--kubelet-cgroup-root", k.root});
  registered_.emplace_back("pod-uid-a", *pod);
  daemon::ClientResponse r = Call("PUT", "/v1/sandboxes/pod-uid-a", {{"pod_uid", uid}, {"egress", {lab::kPublicA4}}});
  ASSERT_EQ(r.status, 201) << r.body.dump(2);
  EXPECT_EQ(r.body.value("cgroup", ""), *pod) << "the pod-level cgroup is the sandbox";
  EXPECT_EQ(r.body.value("pod_uid", ""), uid);
  EXPECT_EQ(r.body.value("state", ""), "enforced");
  EXPECT_TRUE(Ok(Connect(*ctr, lab::kPublicA4))) << "a container's scope below the pod";
  EXPECT_EQ(Errno(Connect(*ctr, lab::kPublicB4)), "EPERM");
  // A malformed UID is a 400 naming it, and changes nothing.
  daemon::ClientResponse bad = Call("PUT", "/v1/sandboxes/pod-uid-a", {{"pod_uid", "5B0C"}, {"egress", {lab::kPublicB4}}});
  EXPECT_EQ(bad.status, 400) << bad.body.dump();
  EXPECT_TRUE(absl::StrContains(bad.body.dump(), "5B0C")) << bad.body.dump();
  EXPECT_EQ(Errno(Connect(*ctr, lab::kPublicB4)), "EPERM") << "nothing changed";
}

TEST_F(DaemonPods, PutBeforeThePodsCgroupIsHeldAndAProcessStartedInItAtOnceIsNeverMoreOpenThanThePolicy) {
  const FakeKubelet k = MakeKubelet("kubelet-b");
  // The sandbox-only pool's pods' parent as a contained root (docs/api.md):
  // a pod's cgroup is denied everything from its mkdir until its PUT applies.
  RunResult c = Shared().Ctl({"sandbox", "contain", "--cgroup", k.qos});
  ASSERT_EQ(c.exit_code, 0) << c.Describe();
  contained_.push_back(k.qos);
  StartDaemon({"--kubelet-cgroup-root", k.root});
  const std::string uid = "9e8d7c6b-5a49-4837-a625-140f0e1d2c3b";
  const std::string cancelled = "11111111-2222-4333-8444-555555555555";
  const std::string pod = k.qos + "/" + FakeKubelet::PodDir(uid);
  registered_.emplace_back("pod-uid-b", pod);

  // A held PUT that is cancelled stays cancelled when its cgroup appears.
  daemon::ClientResponse h = Call("PUT", "/v1/sandboxes/pod-cancel", {{"pod_uid", cancelled}, {"egress", {lab::kPublicB4}}});
  ASSERT_EQ(h.status, 202) << h.body.dump(2);
  daemon::ClientResponse del = Call("DELETE", "/v1/sandboxes/pod-cancel");
  EXPECT_EQ(del.status, 200) << del.body.dump();
  EXPECT_EQ(del.body.value("state", ""), "pending");
  auto cancelled_dir = lab().MakeCgroup(k.rel + "/" + FakeKubelet::PodDir(cancelled));
  ASSERT_TRUE(cancelled_dir.ok()) << cancelled_dir.status();

  // A bad policy is refused at the PUT, not held.
  EXPECT_EQ(Call("PUT", "/v1/sandboxes/pod-uid-b", {{"pod_uid", uid}, {"egress", {"not a target!"}}}).status, 400);
  daemon::ClientResponse held = Call("PUT", "/v1/sandboxes/pod-uid-b", {{"pod_uid", uid}, {"egress", {lab::kPublicA4}}});
  ASSERT_EQ(held.status, 202) << held.body.dump(2);
  EXPECT_EQ(held.body.value("state", ""), "pending");
  EXPECT_FALSE(held.body.value("enforced", true));
  daemon::ClientResponse got = Call("GET", "/v1/sandboxes/pod-uid-b");
  EXPECT_EQ(got.body.value("state", ""), "pending") << got.body.dump(2);
  EXPECT_TRUE(absl::StrContains(got.body["waiting_on"].dump(), k.qos)) << got.body.dump(2);

  // The runtime makes the pod's cgroup and starts a process in it at once.
  // The daemon is stopped meanwhile, so the process surely runs before the
  // PUT applies (the worst case of the race): the contained parent judges
  // it, everything denied, the allowed address too.
  ASSERT_EQ(kill(daemon_->pid(), SIGSTOP), 0);
  auto made = lab().MakeCgroup(k.rel + "/" + FakeKubelet::PodDir(uid));
  RunResult first;
  if (made.ok()) {
    first = InSandbox(pod, {lab::BinaryPath("egressd-probe"), "batch", absl::StrCat("tcp ", lab::kPublicB4, " 80"),
                            absl::StrCat("tcp ", lab::kPublicA4, " 80")}, /*hostile=*/true);
  }
  ASSERT_EQ(kill(daemon_->pid(), SIGCONT), 0);
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_EQ(*made, pod);
  auto lines = Lines(first);
  ASSERT_EQ(lines.size(), 2u) << first.Describe();
  EXPECT_EQ(Errno(lines[0]), "EPERM") << "the denied connect, before the PUT applied";
  EXPECT_EQ(Errno(lines[1]), "EPERM") << "the allowed one too: not applied yet, contained";

  const nlohmann::json enforced = WaitForState("pod-uid-b", "enforced");
  EXPECT_EQ(enforced.value("cgroup", ""), pod);
  EXPECT_TRUE(Ok(Connect(pod, lab::kPublicA4))) << "applied: the allowed connect passes";
  EXPECT_EQ(Errno(Connect(pod, lab::kPublicB4)), "EPERM");
  // Had the DELETE not cancelled it, the held PUT after it would have found
  // its cgroup (made before) and applied it, allowing B.
  EXPECT_EQ(Call("GET", "/v1/sandboxes/pod-cancel").status, 404);
  EXPECT_EQ(Errno(Connect(*cancelled_dir, lab::kPublicB4)), "EPERM") << "judged by the contained root only";
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().PacketsTo(lab::kPublicB4), 0u) << lab().CountersSummary();
  EXPECT_GT(lab().PacketsTo(lab::kPublicA4), 0u) << "positive control: " << lab().CountersSummary();
}

// egressctl explain through the daemon: the rule that decides, for each
// step the kernel takes (an allowed CIDR, a learned address with its name
// and expiry, a protected range, the DNS redirect, the default), each beside
// the kernel's own verdict for the same connect; bad input is exit 2 naming
// the value.  (Its verdicts over every policy vector against the kernel's:
// explain_differential_test.)
TEST_F(Daemon, ExplainNamesTheRuleThatDecidesAndBadInputIsExit2NamingIt) {
  StartDaemon();
  const std::string cg = Put("pod-x", {{"egress", {lab::kPublicA4, kName}}});
  ASSERT_EQ(FirstLine(Dig(cg, kName).out), lab::kPublicC4);
  auto explain = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"explain", "--socket", socket()});
    return Shared().Ctl(args);
  };
  auto json = [&](const std::string& id, const std::string& dest, const std::string& proto = "tcp") {
    RunResult r = explain({id, dest, "--proto", proto, "-o", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    return nlohmann::json::parse(r.out, nullptr, false);
  };

  nlohmann::json j = json("pod-x", absl::StrCat(lab::kPublicA4, ":80"));
  EXPECT_EQ(j.value("rule", ""), "allowed") << j.dump(2);
  EXPECT_EQ(j.value("cidr", ""), absl::StrCat(lab::kPublicA4, "/32"));
  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicA4)));

  j = json("pod-x", absl::StrCat(lab::kPublicC4, ":80"));
  EXPECT_EQ(j.value("rule", ""), "resolved") << j.dump(2);
  ASSERT_TRUE(j["learned"].is_object()) << j.dump(2);
  EXPECT_EQ(j["learned"]["names"], nlohmann::json::array({kName}));
  EXPECT_GT(j["learned"].value("expires_in_ms", 0), 0);
  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicC4)));

  j = json("pod-x", absl::StrCat(lab::kPublicB4, ":80"));
  EXPECT_EQ(j.value("verdict", ""), "deny") << j.dump(2);
  EXPECT_EQ(j.value("rule", ""), "default");
  EXPECT_EQ(Errno(Connect(cg, lab::kPublicB4)), "EPERM");

  j = json("pod-x", "169.254.169.254:80");
  EXPECT_EQ(j.value("rule", ""), "protected") << j.dump(2);
  EXPECT_TRUE(absl::StartsWith(j.value("source", ""), "floor ")) << j.dump(2);
  EXPECT_EQ(Errno(Connect(cg, "169.254.169.254")), "EPERM");

  j = json("pod-x", "8.8.8.8:53", "udp");
  EXPECT_EQ(j.value("rule", ""), "dns_redirect") << j.dump(2);
  EXPECT_EQ(j["endpoint"].value("addr", ""), lab::kPodGatewayV4) << j.dump(2);

  RunResult text = explain({"pod-x", "169.254.169.254:80"});
  EXPECT_EQ(text.exit_code, 0) << text.Describe();
  EXPECT_TRUE(absl::StrContains(text.out, "DENY (reject) by protected: 169.254.169.254 is in the protected range"))
      << text.out;

  for (const auto& [args, named] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"no-such-pod", "192.0.2.10:80"}, "no-such-pod"},
           {{"pod-x", "not-an-address"}, "not-an-address"},
           {{"pod-x", "192.0.2.10:70000"}, "70000"},
           {{"pod-x", "192.0.2.10", "--proto", "sctp"}, "sctp"}}) {
    RunResult bad = explain(args);
    EXPECT_EQ(bad.exit_code, 2) << bad.Describe();
    EXPECT_TRUE(absl::StrContains(bad.err, named)) << bad.Describe();
  }
}

// egressctl run beside a daemon registers through it: the daemon serves the
// sandbox's DNS (run starts no proxy: while the daemon is down the name fails
// closed), kill -9 of the daemon mid-run changes no verdict, the restarted
// daemon serves the name again, and the sandbox is gone from the daemon (and
// the node) once run exits.  The command waits on a FIFO the test writes
// once the daemon is back.
TEST_F(Daemon, RunRegistersWithTheDaemonSurvivesItsKill9AndIsGoneOnceItExits) {
  StartDaemon();
  const std::string dir = Shared().runtime_dir() + "-run-fifo";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0) << dir;
  const std::string fifo = dir + "/go";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string probe = absl::StrCat(lab::ResolveInPath("setpriv"), " --bounding-set -all,+net_raw --inh-caps -all -- ",
                                         lab::BinaryPath("egressd-probe"), " batch 'tcp ", lab::kPublicB4, " 80'");
  const std::string dig = absl::StrCat("dig +time=2 +tries=1 +short @8.8.8.8 ", kName, " | head -n1");
  const std::string script = absl::StrCat("echo \"answer1 $(", dig, ")\"; ", probe, "; echo phase1; read x < ", fifo,
                                          "; echo \"answer2 $(", dig, ")\"; ", probe, "; echo phase2");
  RunSpec s;
  s.netns = lab().pod().netns;
  s.env = Shared().CtlEnv();
  s.argv = {lab::BinaryPath("egressctl"), "run", "--host-root", "--egress", lab::kPublicA4, "--egress", kName,
            "--readable", dir, "--", "sh", "-c", script};
  s.timeout = 2min;
  auto run = lab::Start(s);
  ASSERT_TRUE(run.ok()) << run.status();
  auto next = [&] { return run->ReadOutLine(std::chrono::milliseconds(int(20000 * TimeScale()))).value_or("(none)"); };

  EXPECT_EQ(next(), absl::StrCat("answer1 ", lab::kPublicC4)) << run->err();
  auto denied = lab::ParseProbeLine(next());
  ASSERT_TRUE(denied.ok()) << denied.status() << run->err();
  EXPECT_EQ(Errno(*denied), "EPERM");
  ASSERT_EQ(next(), "phase1") << run->err();

  // The daemon has it, serves its DNS on the config's endpoint.
  std::string id, cg;
  const daemon::ClientResponse listed = Call("GET", "/v1/sandboxes");
  for (const auto& sb : listed.body["sandboxes"]) {
    if (sb["id"].is_string() && absl::StartsWith(sb["id"].get<std::string>(), "run-")) {
      id = sb["id"].get<std::string>();
      cg = sb.value("cgroup", "");
      EXPECT_TRUE(sb.value("enforced", false)) << sb.dump(2);
      ASSERT_TRUE(sb["dns"].is_object()) << sb.dump(2);
      EXPECT_EQ(sb["dns"].value("endpoint", "").rfind(lab::kPodGatewayV4, 0), 0u) << sb.dump(2);
      EXPECT_TRUE(sb["dns"].value("served", false)) << sb.dump(2);
    }
  }
  ASSERT_FALSE(id.empty()) << "run's sandbox is not the daemon's: " << Call("GET", "/v1/sandboxes").body.dump(2);

  Kill9();
  EXPECT_EQ(Errno(Connect(cg, lab::kPublicB4)), "EPERM") << "denied stays denied";
  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicA4))) << "allowed stays allowed";
  const uint64_t up_before = upstream_->QueriesFor(kDownName);
  RunResult down = Dig(cg, kDownName);
  EXPECT_EQ(down.out.find(lab::kPublicC4), std::string::npos) << "no proxy of run's answers while the daemon is down: "
                                                               << down.Describe();
  EXPECT_TRUE(absl::StrContains(down.out + down.err, "timed out") || absl::StrContains(down.out + down.err, "refused"))
      << down.Describe();
  EXPECT_EQ(upstream_->QueriesFor(kDownName), up_before) << "nothing reached the upstream";

  StartDaemon();
  std::ofstream(fifo) << "go\n";
  EXPECT_EQ(next(), absl::StrCat("answer2 ", lab::kPublicC4)) << run->err();
  denied = lab::ParseProbeLine(next());
  ASSERT_TRUE(denied.ok()) << denied.status() << run->err();
  EXPECT_EQ(Errno(*denied), "EPERM");
  EXPECT_EQ(next(), "phase2");
  RunResult done = run->Wait(std::chrono::milliseconds(int(20000 * TimeScale())));
  EXPECT_EQ(done.exit_code, 0) << done.Describe();
  EXPECT_EQ(Call("GET", "/v1/sandboxes/" + id).status, 404) << "run DELETEd its sandbox";
  RunResult st = Shared().Ctl({"status", "--json"});
  EXPECT_FALSE(absl::StrContains(st.out, id)) << st.out;
  unlink(fifo.c_str());
  rmdir(dir.c_str());
}

// /readyz names each check; the DNS check is a query through the proxy's
// own socket and code (its self-test endpoint on 127.0.0.1), answered
// NXDOMAIN by the proxy itself: the upstream is never asked for it.
TEST_F(Daemon, ReadyzNamesEachCheckAndItsDnsSelfTestIsAnsweredByTheProxyItself) {
  StartDaemon();
  daemon::ClientResponse r = WaitReady();
  ASSERT_EQ(r.status, 200) << r.body.dump(2);
  const nlohmann::json& checks = r.body["checks"];
  for (const char* name : {"programs_attached", "maps_open", "dns_upstream", "dns_self_test"}) {
    EXPECT_EQ(checks.value(name, false), true) << name << ": " << r.body.dump(2);
  }
  EXPECT_EQ(checks.value("dns_endpoints_unserved", 99), 0) << r.body.dump(2);
  EXPECT_FALSE(r.body.contains("reasons")) << r.body.dump(2);
  // Every readyz starts the next self-test: still answered.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(WaitReady().status, 200);
  EXPECT_EQ(upstream_->QueriesFor("self-test.egressd.invalid"), 0u) << upstream_->Log();
}

// Without dns.upstreams the daemon serves no DNS (a sandbox's DNS fails
// closed) and is not ready: 503 naming the upstream and the self-test.
TEST_F(Daemon, WithoutADnsUpstreamReadyzIs503NamingItAndNoDnsIsServed) {
  config_override_ = Shared().runtime_dir() + "-daemon-noup.yaml";
  std::ofstream(config_override_) << "dns:\n  endpoint4: " << lab::kPodGatewayV4 << "\n";
  StartDaemon();
  daemon::ClientResponse r = Call("GET", "/readyz");
  unlink(config_override_.c_str());
  config_override_.clear();
  ASSERT_EQ(r.status, 503) << r.body.dump(2);
  EXPECT_EQ(r.body["checks"].value("dns_upstream", true), false) << r.body.dump(2);
  EXPECT_EQ(r.body["checks"].value("dns_self_test", true), false) << r.body.dump(2);
  EXPECT_TRUE(absl::StrContains(r.body["reasons"].value("dns_upstream", ""), "no dns.upstreams")) << r.body.dump(2);
  EXPECT_TRUE(absl::StrContains(r.body["reasons"].value("dns_self_test", ""), "no DNS proxy runs")) << r.body.dump(2);
  EXPECT_EQ(r.body["checks"].value("programs_attached", false), true) << "the other checks still pass";
  daemon::ClientResponse st = Call("GET", "/v1/status");
  EXPECT_EQ(st.body["dns"].value("served", 99), 0) << st.body.dump(2);
}

// Issue 12: a restart does not reset a sandbox's learned-address quota.
// The new daemon's learned book starts from what egr_resolved_v2 still
// holds (3 addresses, one name each), so with a quota of 4 only one more
// address is learned after the restart: q4 is answered, q5 is SERVFAIL.
// Before the seeding the book started empty and both were learned.
TEST_F(Daemon, AfterKill9TheLearnedAddressesStillCountAgainstTheQuota) {
  config_override_ = Shared().runtime_dir() + "-daemon-quota.yaml";
  std::ofstream(config_override_) << "dns:\n  upstreams: [" << kUpstream << "]\n  endpoint4: " << lab::kPodGatewayV4
                                  << "\n  endpoint6: " << lab::kPodGatewayV6
                                  << "\n  maxAddressesPerSandbox: 4\n  maxAddressesPerName: 4\n";
  StartDaemon();
  const std::string cg =
      Put("pod-q", {{"egress", {"q1.example", "q2.example", "q3.example", "q4.example", "q5.example"}}});
  for (int i = 1; i <= 3; ++i) {
    EXPECT_EQ(FirstLine(Dig(cg, absl::StrCat("q", i, ".example")).out), absl::StrCat("203.0.113.", i));
  }

  Kill9();
  StartDaemon();
  unlink(config_override_.c_str());
  config_override_.clear();
  ASSERT_EQ(WaitReady().status, 200);
  EXPECT_EQ(FirstLine(Dig(cg, "q4.example").out), "203.0.113.4") << "the quota's last room";
  RunResult q5 = Dig(cg, "q5.example");
  EXPECT_EQ(FirstLine(q5.out), "") << "quota 4, 3 held from before the restart, 1 since: " << q5.Describe()
                                   << daemon_->err();
  EXPECT_TRUE(absl::StrContains(daemon_->err(), "booked against its quota")) << daemon_->err();
  // Those learned before the restart are still answered (a refresh takes no room).
  EXPECT_EQ(FirstLine(Dig(cg, "q1.example").out), "203.0.113.1");
}

}  // namespace
}  // namespace egressd::test
