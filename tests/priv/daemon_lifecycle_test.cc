// The daemon's lifecycle (issue 14) on the node-routed lab, one loaded
// instance for the binary, a daemon process per test:
//   - a sandbox whose cgroup is removed while the daemon runs is collected at
//     once (inotify, no polling): entry, policy reference, DNS endpoint,
//     learned addresses, record; an audit `removed` record says why;
//   - a pinned link detached behind the daemon's back makes /readyz 503
//     naming it (and /v1/status says so); a restart re-attaches it;
//   - a held PUT survives kill -9: the pod's cgroup made while the daemon is
//     down is enforced at its restart before a process waiting in it
//     connects;
//   - a policy change is a flip under a connect loop: nothing neither
//     policy allows ever gets out, counted at the lab host;
//   - kill -9 and restart under a connect loop: every allowed connect
//     passes and every denied one is refused throughout, and a learned
//     address keeps its expiry;
//   - SIGTERM: egressd exits 0 and tears nothing down (every pin, link and
//     program id as before), verdicts stay, the sandbox's DNS fails closed
//     until the next start, which answers again.
#include <bpf/bpf.h>
#include <fcntl.h>
#include <signal.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon_harness.h"
#include "egressd_env.h"
#include "lab_dns.h"
#include "maps/dns_endpoints.h"
#include "maps/egressd_abi.h"
#include "maps/resolved_table.h"
#include "userspace/dns/self_test.h"
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

constexpr const char* kUpstream = lab::kPublicE4;  // the config's dns.upstreams
constexpr const char* kName = "named.example";     // -> kPublicC4
constexpr const char* kTermName = "term.example";  // -> kPublicD4, asked only around the SIGTERM

class DaemonLifecycle : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    auto up = DnsServer::Start(DnsServerSpec{.netns = Shared().lab().world_netns(),
                                             .listen = {kUpstream},
                                             .records = {{kName, {lab::kPublicC4}}, {kTermName, {lab::kPublicD4}}},
                                             .extra_args = {"--local-ttl=300"}});
    ASSERT_TRUE(up.ok()) << up.status();
    upstream_ = std::move(*up).release();
    config_ = Shared().runtime_dir() + "-lifecycle.yaml";
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
    lab().ResetCounters();
  }
  void TearDown() override {
    for (const auto& cg : registered_) Shared().Ctl({"sandbox", "remove", "--cgroup", cg});
    for (const auto& cg : contained_) Shared().Ctl({"sandbox", "remove", "--cgroup", cg});
    if (daemon_) daemon_->Stop();
  }
  Lab& lab() { return Shared().lab(); }
  static std::string socket() { return DaemonSocket(); }

  void StartDaemon(const std::vector<std::string>& extra = {}) {
    auto d = StartDaemonProcess(config_, extra, std::chrono::milliseconds(60000));
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
  // readyz until 200 or a deadline: right after a start its DNS self-test
  // may still be pending (503 "pending"), which is not a failure.
  daemon::ClientResponse WaitReady() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int(5000 * TimeScale()));
    daemon::ClientResponse r;
    do {
      r = Call("GET", "/readyz");
    } while (r.status != 200 && std::chrono::steady_clock::now() < deadline);
    return r;
  }
  std::string Put(const std::string& id, nlohmann::json body, int want = 201) {
    static int n = 0;
    auto cg = lab().MakeCgroup(absl::StrCat("lifecycle-", n++));
    EXPECT_TRUE(cg.ok()) << cg.status();
    if (!cg.ok()) return "";
    body["cgroup"] = *cg;
    registered_.push_back(*cg);
    daemon::ClientResponse r = Call("PUT", "/v1/sandboxes/" + id, body);
    EXPECT_EQ(r.status, want) << r.body.dump(2);
    return *cg;
  }
  RunSpec InSandboxSpec(const std::string& cgroup, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all", "--"});
    RunSpec spec;
    spec.argv = std::move(argv);
    spec.netns = lab().pod().netns;
    spec.cgroup = cgroup;
    spec.timeout = 120s;
    return spec;
  }
  ProbeLine Connect(const std::string& cgroup, const std::string& addr) {
    RunResult r = lab::Run(InSandboxSpec(cgroup, {lab::BinaryPath("egressd-probe"), "batch", absl::StrCat("tcp ", addr, " 80")}));
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? ProbeLine{} : lines[0];
  }
  // A connect loop: `rounds` rounds of a connect to each of `addrs`, one
  // JSON line each, started in the background.
  std::optional<lab::Background> ConnectLoop(const std::string& cgroup, const std::vector<std::string>& addrs,
                                             int rounds) {
    std::vector<std::string> argv = {lab::BinaryPath("egressd-probe"), "batch"};
    for (int i = 0; i < rounds; ++i) {
      for (const auto& a : addrs) argv.push_back(absl::StrCat("tcp ", a, " 80 --timeout-ms 3000"));
    }
    auto bg = lab::Start(InSandboxSpec(cgroup, argv));
    EXPECT_TRUE(bg.ok()) << bg.status();
    if (!bg.ok()) return std::nullopt;
    return std::move(*bg);
  }
  nlohmann::json CtlStatus() {
    RunResult st = Shared().Ctl({"status", "--json"});
    EXPECT_EQ(st.exit_code, 0) << st.Describe();
    return nlohmann::json::parse(st.out, nullptr, false);
  }
  std::optional<egr_resolved_val> Learned(uint64_t sandbox, const std::string& addr) {
    int fd = bpf_obj_get((Shared().pin_root() + "/" EGR_MAP_RESOLVED).c_str());
    EXPECT_GE(fd, 0) << "open pinned " << EGR_MAP_RESOLVED << ": " << strerror(errno);
    if (fd < 0) return std::nullopt;
    maps::ResolvedTable table(fd);
    auto got = table.Get(sandbox, *net::IpAddr::Parse(addr));
    close(fd);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : std::nullopt;
  }
  RunResult Dig(const std::string& cgroup, const std::string& name) {
    RunSpec s = InSandboxSpec(cgroup, {"dig", "+time=1", "+tries=1", "+short", "@8.8.8.8", name});
    s.argv.erase(s.argv.begin(), s.argv.begin() + 6);  // dig needs no hostility
    return lab::Run(s);
  }

  static inline DnsServer* upstream_ = nullptr;
  static inline std::string config_;
  std::optional<lab::Background> daemon_;
  std::vector<std::string> registered_;
  std::vector<std::string> contained_;
};

std::string FirstLine(const std::string& s) {
  return std::string(absl::StripAsciiWhitespace(s.substr(0, s.find('\n'))));
}

// Every pin under `root` with the kernel object behind it: its id, and for
// a link the program it runs ("link 12 prog 34"), read with bpf_obj_get.  A
// teardown shows as a pin gone, and a re-load as new ids.
std::map<std::string, std::string> PinnedObjects(const std::string& root) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec)) continue;
    const std::string path = it->path().string();
    const int fd = bpf_obj_get(path.c_str());
    if (fd < 0) {
      out[path] = absl::StrCat("unreadable: ", strerror(errno));
      continue;
    }
    // Every info struct starts with its type and id; a link's goes on with
    // its program's id.
    union {
      bpf_prog_info prog;
      bpf_map_info map;
      bpf_link_info link;
    } info;
    memset(&info, 0, sizeof(info));
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) {
      out[path] = absl::StrCat("no info: ", strerror(errno));
    } else if (absl::StrContains(path, "/links/")) {
      out[path] = absl::StrCat("link ", info.link.id, " prog ", info.link.prog_id);
    } else {
      out[path] = absl::StrCat("id ", info.map.id);
    }
    close(fd);
  }
  return out;
}

TEST_F(DaemonLifecycle, ASandboxWhoseCgroupIsRemovedIsCollectedAtOnceFromEveryMap) {
  StartDaemon();
  const std::string cg = Put("pod-gone", {{"egress", {lab::kPublicA4, kName}}, {"labels", {{"pod", "gone"}}}});
  const nlohmann::json got = Call("GET", "/v1/sandboxes/pod-gone").body;
  ASSERT_TRUE(got.value("enforced", false)) << got.dump(2);
  const uint64_t id = got.value("cgroup_id", uint64_t{0});
  const uint32_t policy_id = got.value("policy_id", 0u);
  EXPECT_EQ(FirstLine(Dig(cg, kName).out), lab::kPublicC4);
  ASSERT_TRUE(Ok(Connect(cg, lab::kPublicC4))) << "learned through the daemon's proxy";
  // Everything the sandbox holds, before.
  ASSERT_TRUE(Learned(id, lab::kPublicC4).has_value());
  auto dns = maps::DnsEndpoints::Open(Shared().pin_root());
  ASSERT_TRUE(dns.ok()) << dns.status();
  ASSERT_TRUE(dns->Get(id).ok() && dns->Get(id)->has_value()) << "its DNS endpoint";
  const int served_before = Call("GET", "/v1/status").body["dns"].value("served", 0);
  const nlohmann::json before = CtlStatus();
  auto holds = [&](const nlohmann::json& st) {
    std::vector<std::string> held;
    for (const auto& c : st["cgroups"]) if (c.value("cgroup_id", uint64_t{0}) == id) held.push_back("sandbox entry");
    for (const auto& r : st["records"]) if (r.value("cgroup_id", uint64_t{0}) == id) held.push_back("record");
    for (const auto& p : st["policies"]) if (p.value("policy_id", 0u) == policy_id) held.push_back("policy");
    for (const auto& e : st["learned"]["entries"]) if (e.value("sandbox", uint64_t{0}) == id) held.push_back("learned");
    return held;
  };
  EXPECT_EQ(holds(before), (std::vector<std::string>{"sandbox entry", "record", "policy", "learned"})) << before.dump(2);

  // Its processes exited (each probe ran to its end); the runtime removes it.
  ASSERT_EQ(rmdir(cg.c_str()), 0) << cg << ": " << strerror(errno);
  registered_.clear();
  // The daemon's word that it collected it, then what every map holds.
  ASSERT_TRUE(Lab::WaitFor([&] { return daemon_->err().find(absl::StrCat("cgroup ", cg, " removed: collected")) !=
                                        std::string::npos; },
                           std::chrono::milliseconds(int(5000 * TimeScale()))))
      << daemon_->err();
  EXPECT_EQ(Call("GET", "/v1/sandboxes/pod-gone").status, 404);
  const nlohmann::json after = CtlStatus();
  EXPECT_TRUE(holds(after).empty()) << after.dump(2);
  EXPECT_TRUE(after["consistency"].value("consistent", false)) << after["consistency"].dump();
  EXPECT_FALSE(Learned(id, lab::kPublicC4).has_value());
  auto ep = dns->Get(id);
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_FALSE(ep->has_value()) << "its DNS endpoint went";
  EXPECT_EQ(Call("GET", "/v1/status").body["dns"].value("served", 0), served_before - 1)
      << "its endpoint is no longer served";
}

TEST_F(DaemonLifecycle, ADetachedLinkMakesReadyz503NamingItAndARestartReattachesIt) {
  StartDaemon();
  ASSERT_EQ(WaitReady().status, 200);
  const nlohmann::json st = Call("GET", "/v1/status").body;
  ASSERT_TRUE(st["links"].is_object()) << st.dump(2);
  EXPECT_EQ(st["links"].value("egr_connect4", ""), "attached") << st.dump(2);
  const std::string cg = Put("pod-links", {{"egress", {lab::kPublicA4}}});
  ASSERT_EQ(Errno(Connect(cg, lab::kPublicB4)), "EPERM");

  // Behind its back: the pin stays, the link judges nothing.
  const std::string pin = Shared().pin_root() + "/links/egr_connect4";
  RunResult det = lab::Run(RunSpec{.argv = {"bpftool", "link", "detach", "pinned", pin}});
  ASSERT_EQ(det.exit_code, 0) << det.Describe();
  struct stat sb {};
  ASSERT_EQ(stat(pin.c_str(), &sb), 0) << "the pin stays";
  const daemon::ClientResponse ready = Call("GET", "/readyz");
  EXPECT_EQ(ready.status, 503) << ready.body.dump(2);
  EXPECT_TRUE(absl::StrContains(ready.body["missing"].dump(), "egr_connect4: detached")) << ready.body.dump(2);
  EXPECT_FALSE(ready.body["checks"].value("links_in_force", true)) << ready.body.dump(2);
  EXPECT_NE(Call("GET", "/v1/status").body["links"].value("egr_connect4", "attached"), "attached");
  EXPECT_EQ(Call("GET", "/v1/status").body["links"].value("egr_connect6", ""), "attached") << "only that one";
  // The detach mattered: the connect hook no longer refuses.
  EXPECT_NE(Errno(Connect(cg, lab::kPublicB4)), "EPERM");
  // So the node is not enforcing, and says so; a PUT (which would report
  // enforced: true) is refused naming the link, and changes nothing.
  const nlohmann::json down = Call("GET", "/v1/status").body;
  EXPECT_FALSE(down.value("enforcing", true)) << down.dump(2);
  EXPECT_TRUE(absl::StrContains(down["enforcing_missing"].dump(), "egr_connect4: detached")) << down.dump(2);
  auto other = lab().MakeCgroup("lifecycle-detached");
  ASSERT_TRUE(other.ok()) << other.status();
  registered_.push_back(*other);
  const nlohmann::json put = {{"cgroup", *other}, {"egress", {lab::kPublicA4}}};
  daemon::ClientResponse refused = Call("PUT", "/v1/sandboxes/pod-detached", put);
  EXPECT_EQ(refused.status, 503) << refused.body.dump(2);
  const nlohmann::json error = refused.body.is_object() ? refused.body.value("error", nlohmann::json::object())
                                                         : nlohmann::json::object();
  EXPECT_EQ(error.value("code", ""), "node_not_enforcing") << refused.body.dump(2);
  EXPECT_TRUE(absl::StrContains(error.value("message", ""), "egr_connect4: detached")) << refused.body.dump(2);
  EXPECT_EQ(Call("GET", "/v1/sandboxes/pod-detached").status, 404) << "nothing was registered";
  const uint32_t policy_before = Call("GET", "/v1/sandboxes/pod-links").body.value("policy_id", 0u);
  EXPECT_EQ(Call("PUT", "/v1/sandboxes/pod-links", {{"cgroup", cg}, {"egress", {lab::kPublicB4}}}).status, 503);
  EXPECT_EQ(Call("GET", "/v1/sandboxes/pod-links").body.value("policy_id", 1u), policy_before) << "no flip either";

  // A restart loads (it cannot adopt a detached link) and re-attaches it.
  Kill9();
  StartDaemon();
  EXPECT_EQ(WaitReady().status, 200);
  const nlohmann::json st2 = Call("GET", "/v1/status").body;
  EXPECT_EQ(st2.value("programs", ""), "loaded") << st2.dump(2);
  EXPECT_EQ(st2["links"].value("egr_connect4", ""), "attached") << st2.dump(2);
  EXPECT_EQ(Errno(Connect(cg, lab::kPublicB4)), "EPERM") << "enforced again";
  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicA4)));
  EXPECT_TRUE(st2.value("enforcing", false)) << st2.dump(2);
  EXPECT_FALSE(st2.contains("enforcing_missing")) << st2.dump(2);
  EXPECT_EQ(Call("PUT", "/v1/sandboxes/pod-detached", put).status, 201) << "taken again";
  EXPECT_EQ(Errno(Connect(*other, lab::kPublicB4)), "EPERM");
}

// The daemon's self-test socket (dns_host.cc): UDP, connected from
// 127.0.0.1:client to the proxy's self-test endpoint 127.0.0.1:proxy, found
// in the daemon's own table of its network namespace among its own fds.
struct SelfTestPorts {
  uint16_t client = 0;
  uint16_t proxy = 0;
};
absl::StatusOr<SelfTestPorts> FindSelfTestSocket(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fds = absl::StrCat("/proc/", pid, "/fd");
  for (const auto& e : std::filesystem::directory_iterator(fds)) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (absl::StartsWith(target, "socket:[")) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::ifstream table(absl::StrCat("/proc/", pid, "/net/udp"));
  std::string line;
  std::getline(table, line);  // the header
  std::vector<SelfTestPorts> found;
  while (std::getline(table, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...; 0100007F is 127.0.0.1.
    if (f.size() < 10 || f[3] != "01" || !inodes.count(f[9])) continue;
    if (!absl::StartsWith(f[1], "0100007F:") || !absl::StartsWith(f[2], "0100007F:")) continue;
    found.push_back({static_cast<uint16_t>(std::stoul(f[1].substr(9), nullptr, 16)),
                     static_cast<uint16_t>(std::stoul(f[2].substr(9), nullptr, 16))});
  }
  if (found.size() != 1) {
    return absl::NotFoundError(absl::StrCat(found.size(), " connected loopback UDP sockets of pid ", pid,
                                            " (want exactly the self-test's)"));
  }
  return found[0];
}

// The proxy's own answer to SelfTestQuery(id), asked from a socket of ours.
absl::StatusOr<dns::Bytes> AskSelfTestEndpoint(const std::string& netns, uint16_t port, uint16_t id) {
  dns::Bytes answer(512);
  absl::Status st = lab::InNetns(netns, [&]() -> absl::Status {
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
    sockaddr_in to{.sin_family = AF_INET, .sin_port = htons(port), .sin_addr = {htonl(INADDR_LOOPBACK)}};
    const dns::Bytes q = dns::SelfTestQuery(id);
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    ssize_t n = -1;
    if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0 && send(fd, q.data(), q.size(), 0) > 0 &&
        poll(&p, 1, static_cast<int>(5000 * TimeScale())) == 1) {
      n = recv(fd, answer.data(), answer.size(), 0);
    }
    const int e = errno;
    close(fd);
    if (n <= 0) return absl::InternalError(absl::StrCat("no answer from 127.0.0.1:", port, ": ", strerror(e)));
    answer.resize(static_cast<size_t>(n));
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  return answer;
}

// `payload` to 127.0.0.1:to from 127.0.0.1:from: egr-dns-attack's spoofed
// datagram (the source port is the proxy's, which no socket of ours can bind).
absl::Status SendUdpFromLoopbackPort(const std::string& netns, uint16_t from, uint16_t to, const dns::Bytes& payload) {
  std::string hex;
  for (uint8_t byte : payload) absl::StrAppend(&hex, absl::Hex(byte, absl::kZeroPad2));
  RunResult r = lab::Run(RunSpec{.argv = {lab::BinaryPath("egr-dns-attack"), "spoof-bytes", "127.0.0.1",
                                          std::to_string(from), "127.0.0.1", std::to_string(to), hex},
                                 .netns = netns});
  if (r.exit_code != 0 || !absl::StrContains(r.out, "\"sent\":1")) {
    return absl::InternalError(absl::StrCat("egr-dns-attack spoof-bytes: ", r.Describe()));
  }
  return absl::OkStatus();
}

// The value of an unlabelled sample in Prometheus text; nullopt if absent.
std::optional<uint64_t> MetricSample(const std::string& text, const std::string& name) {
  for (absl::string_view l : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&l, name + " ")) {
      uint64_t v = 0;
      if (absl::SimpleAtoi(l, &v)) return v;
    }
  }
  return std::nullopt;
}

// A self-test whose answer comes after its 1 s timeout leaves that answer on
// the self-test's socket. The next test must drop it and pass on its own
// answer. Judged instead, every later test read its predecessor's answer and
// failed on the id, and readyz stayed 503 for good after one slow moment
// (CI, a 6.1 guest under TCG, 2026-12-07: a restart's first test was slow).
// The late answer is put there, not waited for: the proxy's own answer for
// another id, sent from the proxy's address and port to the self-test's
// socket (holding the daemon with SIGSTOP past the timeout produced the case
// in 3-8 holds here, in none of 30 in a CI run).
TEST_F(DaemonLifecycle, ASelfTestAnsweredAfterItsTimeoutDoesNotHoldReadyzAt503) {
  // /metrics on the node's loopback, to see the operator's counter of such
  // answers; a port of this run's own, below daemon_endpoints_test's range
  // and the ephemeral ports.
  const std::string metrics_address = absl::StrCat("127.0.0.1:", 10000 + getpid() % 10000);
  StartDaemon({"--metrics-address", metrics_address});
  daemon::ClientResponse r = WaitReady();
  ASSERT_EQ(r.status, 200) << r.body.dump(2);
  auto ports = FindSelfTestSocket(daemon_->pid());
  ASSERT_TRUE(ports.ok()) << ports.status();
  // Two earlier ids: the daemon's are random, so one of them may be the id
  // of the test in flight (then judged its own answer, rightly); never both.
  const uint64_t dropped_before = Call("GET", "/v1/status").body["dns"].value("self_test_late_answers", uint64_t{0});
  for (const uint16_t earlier : {uint16_t{0x5a5a}, uint16_t{0xa5a5}}) {
    auto late = AskSelfTestEndpoint(lab().node_netns(), ports->proxy, earlier);
    ASSERT_TRUE(late.ok()) << late.status();
    ASSERT_TRUE(dns::CheckSelfTestAnswer(*late, earlier).ok()) << "the proxy's NXDOMAIN for id " << earlier;
    ASSERT_TRUE(SendUdpFromLoopbackPort(lab().node_netns(), ports->proxy, ports->client, *late).ok());
  }
  // Each readyz starts the next test; the one in flight, or the next, reads it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int(5000 * TimeScale()));
  uint64_t dropped = dropped_before;
  while (dropped == dropped_before && std::chrono::steady_clock::now() < deadline) {
    r = Call("GET", "/readyz");
    dropped = Call("GET", "/v1/status").body["dns"].value("self_test_late_answers", uint64_t{0});
  }
  // At least one (a test of the daemon's own that took over 1 s would add one).
  ASSERT_GE(dropped, dropped_before + 1) << "the late answer reached the self-test's receive and was dropped; readyz: "
                                         << r.body.dump(2);
  // Operators alert on it: /metrics carries the same count (between the
  // status read above and one read after the scrape: tests go on meanwhile).
  RunSpec scrape;
  scrape.argv = {"curl", "-sS", "--max-time", "10", "http://" + metrics_address + "/metrics"};
  scrape.netns = lab().node_netns();
  scrape.timeout = 20s;
  RunResult text = lab::Run(scrape);
  ASSERT_EQ(text.exit_code, 0) << text.Describe();
  const uint64_t after = Call("GET", "/v1/status").body["dns"].value("self_test_late_answers", uint64_t{0});
  const std::optional<uint64_t> exported = MetricSample(text.out, "egressd_dns_self_test_late_answers_total");
  ASSERT_TRUE(exported.has_value()) << text.out;
  EXPECT_GE(*exported, dropped);
  EXPECT_LE(*exported, after);
  r = WaitReady();
  EXPECT_EQ(r.status, 200) << r.body.dump(2);
  // And it stays so: the tests after read their own answers.
  for (int i = 0; i < 20; ++i) {
    r = Call("GET", "/readyz");
    if (r.status != 200) break;
  }
  EXPECT_EQ(r.status, 200) << r.body.dump(2);
}

TEST_F(DaemonLifecycle, AHeldPutSurvivesKill9AndIsEnforcedAtRestartBeforeTheWaitingPodConnects) {
  // A synthetic kubelet (systemd layout) whose pods' parent is a contained root.
  auto root = lab().MakeCgroup("kubelet-h");
  ASSERT_TRUE(root.ok()) << root.status();
  const std::string rel = "kubelet-h/kubepods.slice/kubepods-burstable.slice";
  auto qos = lab().MakeCgroup(rel);
  ASSERT_TRUE(qos.ok()) << qos.status();
  RunResult c = Shared().Ctl({"sandbox", "contain", "--cgroup", *qos});
  ASSERT_EQ(c.exit_code, 0) << c.Describe();
  contained_.push_back(*qos);
  const std::string uid = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
  const std::string pod_rel = rel + "/kubepods-burstable-pod0a1b2c3d_4e5f_4a6b_8c7d_9e0f1a2b3c4d.slice";
  const std::string pod = lab().cgroup_base() + "/" + pod_rel;
  registered_.push_back(pod);

  StartDaemon({"--kubelet-cgroup-root", *root});
  daemon::ClientResponse held = Call("PUT", "/v1/sandboxes/pod-held", {{"pod_uid", uid}, {"egress", {lab::kPublicA4}}});
  ASSERT_EQ(held.status, 202) << held.body.dump(2);
  const std::string file = Shared().runtime_dir() + "/held/pod-held.json";
  struct stat sb {};
  ASSERT_EQ(stat(file.c_str(), &sb), 0) << "held on disk: " << file;
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  Kill9();

  // While no daemon runs: the pod's cgroup, and a process in it that waits
  // for our signal (a FIFO opened for writing) before it connects.
  auto made = lab().MakeCgroup(pod_rel);
  ASSERT_TRUE(made.ok()) << made.status();
  const std::string fifo = Shared().runtime_dir() + "/held-go.fifo";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << strerror(errno);
  auto waiting = lab::Start(InSandboxSpec(pod, {"sh", "-c", absl::StrCat("read go < ", fifo, " && exec ",
                                                                         lab::BinaryPath("egressd-probe"), " batch 'tcp ",
                                                                         lab::kPublicB4, " 80' 'tcp ", lab::kPublicA4, " 80'")}));
  ASSERT_TRUE(waiting.ok()) << waiting.status();

  StartDaemon({"--kubelet-cgroup-root", *root});
  const nlohmann::json got = Call("GET", "/v1/sandboxes/pod-held").body;
  EXPECT_EQ(got.value("state", ""), "enforced") << "applied at start, before the API answered: " << got.dump(2);
  EXPECT_EQ(got.value("cgroup", ""), pod);
  EXPECT_NE(stat(file.c_str(), &sb), 0) << "applied: no longer held on disk";
  {
    std::ofstream go(fifo);
    go << "go\n";
  }
  RunResult r = waiting->Wait(std::chrono::milliseconds(int(20000 * TimeScale())));
  unlink(fifo.c_str());
  auto lines = Lines(r);
  ASSERT_EQ(lines.size(), 2u) << r.Describe();
  EXPECT_EQ(Errno(lines[0]), "EPERM") << "denied by the pod's policy";
  EXPECT_TRUE(Ok(lines[1])) << "allowed by it (not merely contained)";
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().FlowsOpenedTo(lab::kPublicB4), 0u) << lab().CountersSummary();

  // A held PUT deleted is gone from disk too, and stays gone at restart.
  const std::string uid2 = "5f4e3d2c-1b0a-4f9e-8d7c-6b5a49382716";
  ASSERT_EQ(Call("PUT", "/v1/sandboxes/pod-held2", {{"pod_uid", uid2}, {"egress", {lab::kPublicA4}}}).status, 202);
  ASSERT_EQ(stat((Shared().runtime_dir() + "/held/pod-held2.json").c_str(), &sb), 0);
  EXPECT_EQ(Call("DELETE", "/v1/sandboxes/pod-held2").status, 200);
  EXPECT_NE(stat((Shared().runtime_dir() + "/held/pod-held2.json").c_str(), &sb), 0);
}

// X allowed by A, Y by B, Z by neither: a loop connects to all three while
// the policy flips between A and B.  Every connect is judged wholly by A or
// wholly by B: ok or EPERM, and Z never.
TEST_F(DaemonLifecycle, APolicyChangeIsAFlipUnderAConnectLoop) {
  const char* x = lab::kPublicA4;
  const char* y = lab::kPublicB4;
  const char* z = lab::kPublicD4;
  StartDaemon();
  const std::string cg = Put("pod-flip", {{"egress", {x}}});
  // A loop longer than the flips; stopped once they are done.
  auto loop = ConnectLoop(cg, {x, y, z}, 3000);
  ASSERT_TRUE(loop);
  // Lines read while the loop runs leave its remaining output (Wait): keep
  // them, every connect is counted.
  std::string seen;
  auto read_line = [&] {
    auto line = loop->ReadOutLine(20s);
    if (line) seen += *line + "\n";
    return line.has_value();
  };
  ASSERT_TRUE(read_line()) << "the loop never started: " << loop->err();
  const int want_flips = 10;
  int flips = 0;
  for (; flips < want_flips; ++flips) {
    const nlohmann::json policy = {{"cgroup", cg}, {"egress", {flips % 2 == 0 ? y : x}}};
    daemon::ClientResponse r = Call("PUT", "/v1/sandboxes/pod-flip", policy);
    ASSERT_EQ(r.status, 200) << r.body.dump();
    // The positive control, per window: before the next flip a connect to
    // the destination only the new policy allows succeeds (lines the loop
    // wrote before this flip may come first: read on until one does).
    const char* opened = flips % 2 == 0 ? y : x;
    bool seen_open = false;
    const auto window_deadline = std::chrono::steady_clock::now() + 20s;
    while (!seen_open && std::chrono::steady_clock::now() < window_deadline) {
      auto line = loop->ReadOutLine(20s);
      if (!line) {
        // Seen once (2026-12-07): the loop's output ended after 3.5 s with
        // nothing on stderr, long before its 9,000 connects.  How it ended
        // (exit code or signal) and where, for whoever sees it next.
        const bool ended = !loop->running();
        RunResult end = loop->Wait(std::chrono::milliseconds(1000));
        FAIL() << "the loop stalled at flip " << flips << " after " << seen.size() << " bytes of output ("
               << (ended ? "it had ended: " : "it was still running: ") << end.Describe() << "); last lines:\n"
               << seen.substr(seen.size() > 600 ? seen.size() - 600 : 0);
      }
      seen += *line + "\n";
      for (const auto& l : lab::ParseProbeLines(*line)) {
        seen_open |= Ok(l) && l.count("dst") && l.at("dst") == opened;
      }
    }
    ASSERT_TRUE(seen_open) << "flip " << flips << ": no connect to " << opened
                           << " succeeded under the policy allowing it";
  }
  ASSERT_TRUE(loop->running()) << "the loop ended before the flips did";
  kill(loop->pid(), SIGKILL);
  RunResult out = loop->Wait();
  out.out = seen + out.out;
  auto lines = Lines(out);
  ASSERT_GT(lines.size(), size_t(3 * want_flips)) << out.Describe();
  int ok_x = 0, ok_y = 0, refused = 0, cut = 0;
  for (const auto& l : lines) {
    const std::string dst = l.count("dst") ? l.at("dst") : "";
    if (Ok(l)) {
      EXPECT_NE(dst, z) << "a connect neither policy allows succeeded";
      ok_x += dst == x;
      ok_y += dst == y;
    } else if (Errno(l) == "ETIMEDOUT" && dst != z) {
      // In flight at a flip: allowed at connect() by one policy, its later
      // packets judged by the other (the backstop), so it is cut, as
      // docs/dns.md says a flip cuts flows the new policy does not allow.
      ++cut;
    } else {
      EXPECT_EQ(Errno(l), "EPERM") << "neither A's nor B's verdict: " << dst;
      ++refused;
    }
  }
  std::printf("flip under a connect loop: %d flips, %zu connects (%d to X ok, %d to Y ok, %d refused, %d cut in flight)\n",
              flips, lines.size(), ok_x, ok_y, refused, cut);
  EXPECT_GT(ok_x, 0);
  EXPECT_GT(ok_y, 0);
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().FlowsOpenedTo(z), 0u) << "a SYN to Z got out: " << lab().CountersSummary();
  EXPECT_GT(lab().FlowsOpenedTo(x), 0u) << lab().CountersSummary();
  EXPECT_GT(lab().FlowsOpenedTo(y), 0u) << lab().CountersSummary();
}

// kill -9 and restart while a loop connects: no connect's verdict changes.
TEST_F(DaemonLifecycle, Kill9AndRestartUnderAConnectLoopChangeNoVerdictAndLearnedExpiriesStay) {
  StartDaemon();
  const std::string cg = Put("pod-k9", {{"egress", {lab::kPublicA4, kName}}});
  const uint64_t id = Call("GET", "/v1/sandboxes/pod-k9").body.value("cgroup_id", uint64_t{0});
  EXPECT_EQ(FirstLine(Dig(cg, kName).out), lab::kPublicC4);
  const auto learned = Learned(id, lab::kPublicC4);
  ASSERT_TRUE(learned.has_value());

  // A loop longer than the restart; stopped once the daemon is back.
  auto loop = ConnectLoop(cg, {lab::kPublicA4, lab::kPublicC4, lab::kPublicB4}, 3000);
  ASSERT_TRUE(loop);
  auto first = loop->ReadOutLine(20s);
  ASSERT_TRUE(first) << loop->err();
  Kill9();
  StartDaemon();
  const daemon::ClientResponse ready = WaitReady();
  ASSERT_EQ(ready.status, 200) << ready.body.dump(2);
  auto after_restart = loop->ReadOutLine(20s);
  ASSERT_TRUE(after_restart) << "a connect after the restart";
  ASSERT_TRUE(loop->running()) << "the loop ended before the restart";
  kill(loop->pid(), SIGKILL);
  RunResult out = loop->Wait();
  out.out = *first + "\n" + *after_restart + "\n" + out.out;  // Wait gives only what was not read
  std::vector<ProbeLine> lines = Lines(out);
  ASSERT_GT(lines.size(), 3u) << out.Describe();
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string dst = lines[i]["dst"];
    if (dst == lab::kPublicB4) {
      EXPECT_EQ(Errno(lines[i]), "EPERM") << "connect " << i << ": denied stays denied";
    } else {
      EXPECT_TRUE(Ok(lines[i])) << "connect " << i << " to " << dst << ": allowed stays allowed";
    }
  }
  const auto after = Learned(id, lab::kPublicC4);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->expires_boot_ns, learned->expires_boot_ns) << "the learned address keeps its expiry";
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().FlowsOpenedTo(lab::kPublicB4), 0u) << lab().CountersSummary();
}

// SIGTERM (a graceful stop: a DaemonSet's rollout, a node drain) tears
// nothing down, unlike the incumbent's sidecar: egressd exits 0, every pin
// holds the same kernel object (links running the same programs), the
// kernel's entries, policies and records are as before, an allowed connect
// passes and a denied one is refused (counted at the lab host), and the
// sandbox's DNS fails closed (nothing listens on its endpoint, nothing
// reaches the upstream) until a new egressd starts and answers it.
TEST_F(DaemonLifecycle, SigtermTearsNothingDownAndDnsFailsClosedUntilTheNextStart) {
  StartDaemon();
  ASSERT_EQ(WaitReady().status, 200);
  const std::string cg = Put("pod-term", {{"egress", {lab::kPublicA4, kName, kTermName}}});
  EXPECT_EQ(FirstLine(Dig(cg, kName).out), lab::kPublicC4) << "served before the SIGTERM";
  ASSERT_TRUE(Ok(Connect(cg, lab::kPublicC4))) << "learned through the daemon's proxy";
  const std::map<std::string, std::string> pins = PinnedObjects(Shared().pin_root());
  ASSERT_GT(pins.size(), 10u) << "the instance's maps and links";
  auto kernel_view = [&] {
    const nlohmann::json st = CtlStatus();
    if (!st.is_object()) return nlohmann::json();
    return nlohmann::json{{"cgroups", st.value("cgroups", nlohmann::json())},
                          {"policies", st.value("policies", nlohmann::json())},
                          {"records", st.value("records", nlohmann::json())}};
  };
  const nlohmann::json before = kernel_view();
  ASSERT_FALSE(before["records"].empty()) << before.dump(2);

  ASSERT_EQ(kill(daemon_->pid(), SIGTERM), 0);
  RunResult stopped = daemon_->Wait(std::chrono::milliseconds(int(10000 * TimeScale())));
  daemon_.reset();
  EXPECT_EQ(stopped.exit_code, 0) << stopped.Describe();
  EXPECT_TRUE(absl::StrContains(stopped.err, "enforcement stays in force")) << stopped.err;
  EXPECT_EQ(PinnedObjects(Shared().pin_root()), pins) << "a pin went, or holds another object";
  EXPECT_EQ(kernel_view(), before) << "the maps' entries, policies or records changed";

  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicA4))) << "allowed stays allowed";
  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicC4))) << "a learned address stays learned";
  EXPECT_EQ(Errno(Connect(cg, lab::kPublicB4)), "EPERM") << "denied stays denied";
  RunResult down = Dig(cg, kTermName);
  const std::string said = down.out + down.err;
  EXPECT_TRUE(absl::StrContains(said, "connection refused") || absl::StrContains(said, "timed out"))
      << "DNS fails closed while no daemon runs: " << down.Describe();
  EXPECT_EQ(FirstLine(down.out).find(lab::kPublicD4), std::string::npos) << down.Describe();
  EXPECT_EQ(upstream_->QueriesFor(kTermName), 0u) << "nothing reached the upstream: " << upstream_->Log();

  StartDaemon();
  ASSERT_EQ(WaitReady().status, 200);
  EXPECT_EQ(Call("GET", "/v1/status").body.value("programs", ""), "adopted") << "nothing to re-load";
  EXPECT_EQ(FirstLine(Dig(cg, kTermName).out), lab::kPublicD4) << "answered again";
  EXPECT_TRUE(upstream_->WaitForQuery(kTermName, 3s)) << "positive control: " << upstream_->Log();
  EXPECT_EQ(upstream_->QueriesFor(kTermName), 1u) << "asked once, after the restart: " << upstream_->Log();
  EXPECT_EQ(PinnedObjects(Shared().pin_root()), pins) << "the new daemon adopted the same objects";
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().FlowsOpenedTo(lab::kPublicB4), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(lab::kDns4), 0u) << "a query leaked to the resolver it named: " << lab().CountersSummary();
  EXPECT_GT(lab().TcpAccepts(lab::kPublicA4, 80), 0u) << "positive control: " << lab().CountersSummary();
}

}  // namespace
}  // namespace egressd::test
