// The daemon's per-sandbox caps and its sandbox detail (issue 14), on the
// node-routed lab.  One daemon for the binary, started with small caps
// (limits: 2 IPv4 entries, 1 IPv6 entry, 1 name, 4 learned addresses):
//
//   - A PUT past each cap is a 400 naming the cap, its value and the
//     count, and nothing changes: the policy id stays, and a connect the
//     rejected policy would have allowed is still refused by the old one.
//     `egressctl sandbox add` refuses the same way (the same check).
//   - /v1/status has each shared map's capacity and use and the caps;
//     `egressctl metrics` has the names' use and passes promtool.
//   - GET after a real resolution through the daemon's proxy: the learned
//     address with its rule, expiry (seconds left and the wall-clock time),
//     in use after a connect; the audit counters of the sandbox; the caps
//     it takes; `egressctl sandbox get` prints them.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "daemon_harness.h"
#include "egressd_env.h"
#include "lab_dns.h"
#include "maps/egressd_abi.h"
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
constexpr const char* kName = "capped.example";  // -> kPublicC4
constexpr const char* kOther = "other.example";  // a second name: past the cap of 1

class DaemonCaps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    Lab& lab = Shared().lab();
    auto up = DnsServer::Start(DnsServerSpec{.netns = lab.world_netns(),
                                             .listen = {kUpstream},
                                             .records = {{kName, {lab::kPublicC4}}, {kOther, {lab::kPublicD4}}},
                                             .extra_args = {"--local-ttl=300"}});
    ASSERT_TRUE(up.ok()) << up.status();
    upstream_ = std::move(*up).release();
    config_ = Shared().runtime_dir() + "-caps.yaml";
    std::ofstream(config_) << "dns:\n  upstreams: [" << kUpstream << "]\n  endpoint4: " << lab::kPodGatewayV4
                           << "\n  endpoint6: " << lab::kPodGatewayV6 << "\n  maxAddressesPerSandbox: 4"
                           << "\n  maxAddressesPerName: 4\n"
                           << "limits:\n  maxCidrEntriesPerSandbox: 2\n  maxCidr6EntriesPerSandbox: 1\n"
                           << "  maxNamesPerSandbox: 1\n";
    auto d = StartDaemonProcess(config_);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = new lab::Background(std::move(*d));
  }
  static void TearDownTestSuite() {
    if (daemon_) daemon_->Stop();
    delete daemon_;
    delete upstream_;
    daemon_ = nullptr;
    upstream_ = nullptr;
    unlink(config_.c_str());
  }
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    ASSERT_NE(daemon_, nullptr);
  }
  void TearDown() override {
    for (const auto& [id, cg] : registered_) {
      DeleteSandboxBestEffort(Socket(), id);
      Shared().Ctl({"sandbox", "remove", "--cgroup", cg});
    }
  }
  Lab& lab() { return Shared().lab(); }
  static std::string Socket() { return DaemonSocket(); }

  daemon::ClientResponse Call(const std::string& method, const std::string& target, const nlohmann::json& body = {}) {
    return CallDaemon(method, target, body);
  }
  std::string NewCgroup() {
    static int n = 0;
    auto cg = lab().MakeCgroup(absl::StrCat("caps-", n++));
    EXPECT_TRUE(cg.ok()) << cg.status();
    return cg.ok() ? *cg : "";
  }
  std::string Put(const std::string& id, nlohmann::json body) {
    const std::string cg = NewCgroup();
    body["cgroup"] = cg;
    registered_.emplace_back(id, cg);
    daemon::ClientResponse r = Call("PUT", "/v1/sandboxes/" + id, body);
    EXPECT_EQ(r.status, 201) << r.body.dump(2);
    return cg;
  }
  RunResult InSandbox(const std::string& cgroup, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all", "--"});
    RunSpec spec;
    spec.argv = std::move(argv);
    spec.netns = lab().pod().netns;
    spec.cgroup = cgroup;
    spec.timeout = 20s;
    return lab::Run(spec);
  }
  ProbeLine Connect(const std::string& cgroup, const std::string& addr) {
    RunResult r = InSandbox(cgroup, {lab::BinaryPath("egressd-probe"), "batch", absl::StrCat("tcp ", addr, " 80")});
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? ProbeLine{} : lines[0];
  }

  static inline DnsServer* upstream_ = nullptr;
  static inline lab::Background* daemon_ = nullptr;
  static inline std::string config_;
  std::vector<std::pair<std::string, std::string>> registered_;
};

TEST_F(DaemonCaps, PutPastEachCapIsRefusedNamingItAndTheOldPolicyStaysInForce) {
  const std::string cg = Put("capped", {{"egress", {lab::kPublicA4, kName}}});
  const uint32_t policy_id = Call("GET", "/v1/sandboxes/capped").body.value("policy_id", 0u);
  ASSERT_NE(policy_id, 0u);
  ASSERT_EQ(Errno(Connect(cg, lab::kPublicB4)), "EPERM");

  struct Past {
    std::vector<std::string> egress;
    const char* cap;
    uint64_t limit, count;
  };
  // Each over one cap only, and each allows kPublicB4 but the last: were
  // it applied, B4 would connect.
  for (const Past& p : {Past{{lab::kPublicA4, lab::kPublicB4, lab::kPublicF4}, "limits.maxCidrEntriesPerSandbox", 2, 3},
                        Past{{lab::kPublicB4, lab::kPublicA6, lab::kPublicC6}, "limits.maxCidr6EntriesPerSandbox", 1, 2},
                        Past{{lab::kPublicB4, kName, kOther}, "limits.maxNamesPerSandbox", 1, 2}}) {
    daemon::ClientResponse r = Call("PUT", "/v1/sandboxes/capped", {{"cgroup", cg}, {"egress", p.egress}});
    EXPECT_EQ(r.status, 400) << r.body.dump(2);
    const nlohmann::json& e = r.body["error"];
    EXPECT_EQ(e.value("code", ""), "over_cap") << r.body.dump(2);
    ASSERT_TRUE(e.contains("caps") && e["caps"].size() == 1) << r.body.dump(2);
    EXPECT_EQ(e["caps"][0].value("cap", ""), p.cap);
    EXPECT_EQ(e["caps"][0].value("limit", uint64_t{0}), p.limit);
    EXPECT_EQ(e["caps"][0].value("count", uint64_t{0}), p.count);
    EXPECT_TRUE(absl::StrContains(e.value("message", ""), p.cap)) << r.body.dump(2);
    EXPECT_EQ(Call("GET", "/v1/sandboxes/capped").body.value("policy_id", 0u), policy_id) << p.cap;
    EXPECT_EQ(Errno(Connect(cg, lab::kPublicB4)), "EPERM") << p.cap << ": the old policy still judges";
  }
  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicA4))) << "the old policy's allowed destination";
  // At the caps exactly: applied (the caps bound, they do not forbid).
  EXPECT_EQ(Call("PUT", "/v1/sandboxes/capped",
                 {{"cgroup", cg}, {"egress", {lab::kPublicA4, lab::kPublicB4, lab::kPublicA6, kName}}})
                .status,
            200);
  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicB4)));

  // sandbox add runs the same check: exit 2 naming the cap, nothing registered.
  const std::string other = NewCgroup();
  RunResult add = Shared().Ctl({"sandbox", "add", "--cgroup", other, "--config", config_, "--egress", lab::kPublicA4,
                                "--egress", lab::kPublicB4, "--egress", lab::kPublicF4});
  EXPECT_EQ(add.exit_code, 2) << add.Describe();
  EXPECT_TRUE(absl::StrContains(add.err, "limits.maxCidrEntriesPerSandbox 2: the policy has 3")) << add.Describe();
  RunResult st = Shared().Ctl({"status", "--json"});
  EXPECT_FALSE(absl::StrContains(st.out, other)) << "registered anyway: " << st.out;
  EXPECT_TRUE(Ok(Connect(other, lab::kPublicF4))) << "judged by nothing";

  // The node's capacity and use, and the caps, in /v1/status.
  const nlohmann::json c = Call("GET", "/v1/status").body["capacity"];
  ASSERT_TRUE(c.is_object()) << c.dump(2);
  EXPECT_EQ(c["allow4"].value("capacity", uint64_t{0}), EGR_MAX_ALLOW4) << c.dump(2);
  EXPECT_EQ(c["allow6"].value("capacity", uint64_t{0}), EGR_MAX_ALLOW6) << c.dump(2);
  EXPECT_GE(c["allow4"].value("entries", uint64_t{0}), 2u) << c.dump(2);
  EXPECT_GE(c["allow6"].value("entries", uint64_t{0}), 1u) << c.dump(2);
  EXPECT_EQ(c["resolved"].value("capacity", uint64_t{0}), EGR_MAX_RESOLVED) << c.dump(2);
  EXPECT_EQ(c["cgroups"].value("capacity", uint64_t{0}), uint64_t{EGR_MAX_CGROUPS}) << c.dump(2);
  EXPECT_GE(c["cgroups"].value("entries", uint64_t{0}), 1u) << c.dump(2);
  EXPECT_EQ(c["names"].value("declared", uint64_t{0}), 1u) << "this binary's one sandbox declares one name";
  EXPECT_EQ(c["per_sandbox"].value("maxCidrEntriesPerSandbox", 0u), 2u) << c.dump(2);
  EXPECT_EQ(c["per_sandbox"].value("maxNamesPerSandbox", 0u), 1u) << c.dump(2);
  EXPECT_EQ(c["per_sandbox"].value("maxAddressesPerSandbox", 0u), 4u) << c.dump(2);

  // ... and in the metrics, which promtool accepts.
  const std::string prom = Shared().runtime_dir() + "-caps.prom";
  RunResult m = Shared().Ctl({"metrics", "-o", prom});
  ASSERT_EQ(m.exit_code, 0) << m.Describe();
  RunResult check = lab::Run(RunSpec{.argv = {"sh", "-c", "promtool check metrics < " + prom}});
  EXPECT_EQ(check.exit_code, 0) << check.Describe();
  std::stringstream text;
  text << std::ifstream(prom).rdbuf();
  EXPECT_TRUE(absl::StrContains(text.str(), "\negressd_declared_names 1\n")) << text.str();
  EXPECT_TRUE(absl::StrContains(text.str(), absl::StrCat("egressd_map_capacity{map=\"", EGR_MAP_ALLOW4,
                                                         "\",type=\"lpm_trie\"} ", EGR_MAX_ALLOW4)))
      << text.str();
  unlink(prom.c_str());
}

TEST_F(DaemonCaps, GetShowsTheLearnedAddressWithItsExpiryRuleUseAndTheSandboxsCounters) {
  const std::string cg = Put("detail", {{"egress", {lab::kPublicA4, kName}}});
  RunResult dig = InSandbox(cg, {"dig", "+time=1", "+tries=1", "+short", "@8.8.8.8", kName});
  ASSERT_EQ(std::string(absl::StripAsciiWhitespace(dig.out)), lab::kPublicC4) << dig.Describe();
  const absl::Time resolved = absl::Now();
  EXPECT_TRUE(Ok(Connect(cg, lab::kPublicC4)));
  EXPECT_EQ(Errno(Connect(cg, lab::kPublicB4)), "EPERM");

  // The audit reader counts what the kernel recorded as the ring is read.
  nlohmann::json got;
  EXPECT_TRUE(Lab::WaitFor([&] {
    got = Call("GET", "/v1/sandboxes/detail").body;
    const nlohmann::json& o = got["counters"]["occurrences"]["connect"];
    return o.is_object() && o.value("allow", 0u) >= 1 && o.value("deny", 0u) >= 1;
  }, 10s)) << got.dump(2);
  EXPECT_TRUE(got["counters"].value("reading", false)) << got.dump(2);
  // A new sandbox: the one refused connect above and no other.
  EXPECT_EQ(got["counters"]["occurrences"]["connect"].value("deny", 0u), 1u) << got.dump(2);

  const nlohmann::json& l = got["learned"];
  ASSERT_EQ(l.value("total", 0u), 1u) << got.dump(2);
  const nlohmann::json& e = l["entries"][0];
  EXPECT_EQ(e.value("address", ""), lab::kPublicC4);
  EXPECT_EQ(e["rules"], nlohmann::json::array({kName})) << got.dump(2);
  const int64_t left = e.value("expires_in_s", int64_t{-1});
  EXPECT_GT(left, 300 - 30) << "TTL 300 (+ the grace)";
  EXPECT_LE(left, 300 + 120) << got.dump(2);
  absl::Time at;
  std::string err;
  ASSERT_TRUE(absl::ParseTime("%Y-%m-%dT%H:%M:%SZ", e.value("expires_at", ""), &at, &err)) << err;
  EXPECT_LE(absl::AbsDuration(at - (resolved + absl::Seconds(left))), absl::Seconds(5)) << e.dump();
  EXPECT_TRUE(e.value("in_use", false)) << "a connect used it within the grace: " << e.dump();
  EXPECT_TRUE(e.contains("last_used_s_ago")) << e.dump();
  EXPECT_EQ(got["caps"]["learned_addresses"].value("count", 0u), 1u) << got.dump(2);
  EXPECT_EQ(got["caps"]["learned_addresses"].value("limit", 0u), 4u) << got.dump(2);
  EXPECT_EQ(got["caps"]["names"].value("count", 0u), 1u) << got.dump(2);
  EXPECT_EQ(got["caps"]["cidr4_entries"].value("count", 0u), 1u) << got.dump(2);

  RunResult ctl = Shared().Ctl({"sandbox", "get", "detail", "--socket", Socket()});
  EXPECT_EQ(ctl.exit_code, 0) << ctl.Describe();
  EXPECT_TRUE(absl::StrContains(ctl.out, "learned addresses: 1")) << ctl.out;
  EXPECT_TRUE(absl::StrContains(ctl.out, lab::kPublicC4)) << ctl.out;
  EXPECT_TRUE(absl::StrContains(ctl.out, absl::StrCat("via ", kName, " in use"))) << ctl.out;
  EXPECT_TRUE(absl::StrContains(ctl.out, "caps: cidr4_entries 1/2")) << ctl.out;
  EXPECT_TRUE(absl::StrContains(ctl.out, "connect allow")) << ctl.out;
}

}  // namespace
}  // namespace egressd::test
