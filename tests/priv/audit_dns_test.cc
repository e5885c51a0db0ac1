// The audit trail's user-space sources (issue 13) on the lab: the DNS proxy
// of `egressctl run` and the lifecycle commands writing into the same
// numbered stream as the kernel's records, `run --audit` holding its own
// sandbox's DNS records too, and `egressctl audit suggest` on that real
// stream giving a declaration `egressctl policy check` accepts.  Clients:
// getent, dig and egressd-probe (the 6.1 guest carries them; no python3).
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "egressd_env.h"
#include "lab_dns.h"

namespace egressd::test {
namespace {

using lab::DnsServer;
using lab::DnsServerSpec;
using lab::RunResult;

constexpr const char* kUpstream = lab::kPublicE4;  // the lab's resolver
constexpr const char* kAllowed = "allowed.example";
constexpr const char* kAllowed4 = lab::kPublicA4;
constexpr const char* kDenied = "denied.example";

std::vector<nlohmann::json> ParseLines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << line;
    if (!j.is_discarded()) out.push_back(j);
  }
  return out;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class AuditDns : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    auto up = DnsServer::Start(DnsServerSpec{.netns = Shared().lab().world_netns(),
                                             .listen = {kUpstream},
                                             .records = {{kAllowed, {kAllowed4}},
                                                         {kDenied, {lab::kPublicB4}},
                                                         {"a.sib.example", {lab::kPublicC4}},
                                                         {"b.sib.example", {lab::kPublicC4}}}});
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
    char tmpl[] = "/run/egr-auditdns-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) (void)system(("rm -rf " + dir_).c_str());
  }
  lab::Lab& lab() { return Shared().lab(); }
  std::string File(const std::string& name) const { return dir_ + "/" + name; }

  // A run in the pod's netns that connects to the allowed name's address
  // before asking (denied), resolves it (learned) and connects again
  // (allowed), asks a denied name and two siblings, and connects to an
  // address no answer named; its --audit file is returned.
  RunResult RunDnsWorkload(const std::string& audit) {
    const std::string probe = lab::BinaryPath("egressd-probe");
    const std::string script = absl::StrCat(
        probe, " batch 'tcp ", kAllowed4, " 80'; getent ahostsv4 ", kAllowed, "; ", probe, " batch 'tcp ", kAllowed4,
        " 80'; dig +time=2 +tries=1 @8.8.8.8 ", kDenied, "; dig +time=2 +tries=1 @8.8.8.8 a.sib.example; ",
        "dig +time=2 +tries=1 @8.8.8.8 b.sib.example; ", probe, " batch 'tcp ", lab::kPublicD4, " 80'; ", probe,
        " batch 'tcp ", lab::kImds4, " 80'");
    return Shared().CtlIn(lab().pod().netns, {"run", "--audit", audit, "--label", "pod=web-1", "--label",
                                              "namespace=ci", "--egress", kAllowed, "--upstream-dns", kUpstream,
                                              "--readable", dir_, "--", "sh", "-c", script});
  }

  static DnsServer* upstream_;
  std::string dir_;
};
DnsServer* AuditDns::upstream_ = nullptr;

// First in this binary: `egressctl audit` is the first reader of the
// instance, so it also holds the engine's start (the suite's load).
TEST_F(AuditDns, LifecycleRecordsJoinTheStream) {
  auto cg = lab().MakeCgroup("auditdns-life");
  ASSERT_TRUE(cg.ok()) << cg.status();
  RunResult bad = Shared().Ctl({"sandbox", "add", "--cgroup", *cg, "--egress", "*"});
  ASSERT_EQ(bad.exit_code, 2) << bad.Describe();
  RunResult add = Shared().Ctl({"sandbox", "add", "--cgroup", *cg, "--egress", kAllowed4, "--label", "pod=life"});
  ASSERT_EQ(add.exit_code, 0) << add.Describe();
  RunResult rm = Shared().Ctl({"sandbox", "remove", "--cgroup", *cg});
  ASSERT_EQ(rm.exit_code, 0) << rm.Describe();
  RunResult a = Shared().Ctl({"audit"});
  ASSERT_EQ(a.exit_code, 0) << a.Describe();
  auto lines = ParseLines(a.out);
  const nlohmann::json *engine = nullptr, *rejected = nullptr, *registered = nullptr, *applied = nullptr,
                       *removed = nullptr;
  std::set<uint64_t> seqs;
  for (const auto& j : lines) {
    EXPECT_TRUE(seqs.insert(j["seq"].get<uint64_t>()).second) << "seq twice: " << j.dump();
    const std::string type = j.value("type", ""), event = j.value("event", "");
    if (type == "engine" && event == "started") engine = &j;
    if (type == "policy" && event == "rejected" && j.value("cgroup", "") == *cg) rejected = &j;
    if (type == "sandbox" && event == "registered" && j["sandbox"].value("cgroup", "") == *cg) registered = &j;
    if (type == "policy" && event == "applied" && registered && j["sandbox"]["id"] == (*registered)["sandbox"]["id"])
      applied = &j;
    if (type == "sandbox" && event == "removed" && j["sandbox"].value("cgroup", "") == *cg) removed = &j;
  }
  ASSERT_NE(engine, nullptr) << a.out;
  EXPECT_EQ((*engine)["schema"], "egressd.audit/v1");
  ASSERT_NE(rejected, nullptr) << a.out;
  ASSERT_FALSE((*rejected)["errors"].empty());
  EXPECT_TRUE(absl::StrContains((*rejected)["errors"][0].get<std::string>(), "*")) << rejected->dump();
  ASSERT_NE(registered, nullptr) << a.out;
  EXPECT_EQ((*registered)["sandbox"]["labels"]["pod"], "life");
  EXPECT_EQ((*registered)["pod"]["name"], "life");
  ASSERT_NE(applied, nullptr) << a.out;
  EXPECT_EQ((*applied)["policy"]["default"], "deny");
  EXPECT_EQ((*applied)["policy"]["cidrs"], 1);
  ASSERT_NE(removed, nullptr) << a.out;
  EXPECT_EQ((*removed)["sandbox"]["labels"]["pod"], "life") << "the labels the record had";
  EXPECT_LT((*engine)["seq"].get<uint64_t>(), (*rejected)["seq"].get<uint64_t>());
  EXPECT_LT((*rejected)["seq"].get<uint64_t>(), (*registered)["seq"].get<uint64_t>());
  EXPECT_LT((*registered)["seq"].get<uint64_t>(), (*removed)["seq"].get<uint64_t>());
}

// The value of one series in Prometheus text; -1 when it is not there.
long long Sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stoll(line.substr(series.size() + 1));
  }
  return -1;
}

// The proxy's records feed egressd_dns_queries_total (by verdict and rcode,
// exactly as many as the stream holds), and the connect a learned address
// allowed names the rule that learned it (`match.name`).
TEST_F(AuditDns, DnsQueriesReachTheMetricsAndResolvedConnectsNameTheirRule) {
  ASSERT_EQ(Shared().Ctl({"audit"}).exit_code, 0);  // what was queued is exported first
  const std::string before = File("before.prom"), after = File("after.prom");
  RunResult m = Shared().Ctl({"metrics", "-o", before});
  ASSERT_EQ(m.exit_code, 0) << m.Describe();
  const std::string f = File("run.jsonl");
  RunResult r = RunDnsWorkload(f);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  ASSERT_EQ(Shared().Ctl({"audit"}).exit_code, 0);
  m = Shared().Ctl({"metrics", "-o", after});
  ASSERT_EQ(m.exit_code, 0) << m.Describe();
  lab::RunSpec check{.argv = {"sh", "-c", "promtool check metrics < " + after}};
  RunResult p = lab::Run(check);
  EXPECT_EQ(p.exit_code, 0) << p.Describe() << "\n" << Slurp(after);
  std::map<std::pair<std::string, std::string>, long long> expected;
  int named = 0;
  for (const auto& j : ParseLines(Slurp(f))) {
    if (j["type"] == "dns") ++expected[{j["verdict"].get<std::string>(), j["dns"].value("rcode_name", "none")}];
    if (j["type"] == "connect" && j["reason"] == "resolved-name") {
      EXPECT_EQ(j["match"].value("name", ""), kAllowed) << j.dump();
      ++named;
    }
  }
  EXPECT_EQ(named, 1) << Slurp(f);
  ASSERT_TRUE(expected.count({"allow", "NOERROR"})) << Slurp(f);
  ASSERT_TRUE(expected.count({"deny", "NXDOMAIN"})) << Slurp(f);
  const std::string a = Slurp(after), b = Slurp(before);
  for (const auto& [k, n] : expected) {
    const std::string series =
        absl::StrCat("egressd_dns_queries_total{verdict=\"", k.first, "\",rcode=\"", k.second, "\"}");
    EXPECT_EQ(Sample(a, series) - std::max(0LL, Sample(b, series)), n) << series << "\n" << a;
  }
}

TEST_F(AuditDns, RunsAuditHoldsItsDnsRecordsInTheOneSequence) {
  const std::string f = File("run.jsonl");
  RunResult r = RunDnsWorkload(f);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  if (const char* keep = std::getenv("EGR_AUDIT_DNS_KEEP")) {
    // The docs' examples come from this stream.
    std::ofstream(keep) << Slurp(f);
  }
  auto probe = Lines(r);
  ASSERT_EQ(probe.size(), 4u) << r.Describe();
  EXPECT_EQ(Errno(probe[0]), "EPERM") << r.Describe();
  EXPECT_TRUE(Ok(probe[1])) << r.Describe();
  auto lines = ParseLines(Slurp(f));
  std::set<uint64_t> ids, seqs;
  const nlohmann::json* answered = nullptr;
  std::set<std::string> denied;
  size_t kernel = 0;
  bool registered = false;
  for (const auto& j : lines) {
    ASSERT_TRUE(j.contains("sandbox")) << j.dump();
    ids.insert(j["sandbox"]["id"].get<uint64_t>());
    EXPECT_TRUE(seqs.insert(j["seq"].get<uint64_t>()).second) << "seq twice: " << j.dump();
    // The probe's four TCP connects (dig's and getent's connected UDP
    // sockets to port 53 are connects too, redirected to the endpoint).
    if (j["type"] == "connect" && j.contains("l4") && j["l4"].contains("TCP")) ++kernel;
    if (j["type"] == "sandbox" && j["event"] == "registered") registered = true;
    if (j["type"] != "dns") continue;
    EXPECT_EQ(j["pod"]["name"], "web-1") << j.dump();
    EXPECT_EQ(j["pod"]["namespace"], "ci") << j.dump();
    const auto& d = j["dns"];
    if (j["verdict"] == "allow" && d.value("query", "") == absl::StrCat(kAllowed, ".") && d["qtypes"][0] == "A") {
      answered = &j;
    }
    if (j["verdict"] == "deny") {
      EXPECT_EQ(j["reason"], "name-not-in-scope");
      EXPECT_EQ(d["rcode"], 3);
      EXPECT_FALSE(d.contains("learn_latency_ns")) << j.dump();
      denied.insert(d.value("query", ""));
    }
  }
  EXPECT_EQ(ids.size(), 1u) << "another sandbox's lines in " << f;
  EXPECT_TRUE(registered);
  EXPECT_EQ(kernel, 4u);
  ASSERT_NE(answered, nullptr) << Slurp(f);
  EXPECT_EQ((*answered)["dns"]["rcode"], 0);
  EXPECT_EQ((*answered)["dns"]["ips"], nlohmann::json::array({kAllowed4}));
  EXPECT_EQ((*answered)["dns"]["learned"][0]["ip"], kAllowed4);
  EXPECT_EQ((*answered)["dns"]["rule"], kAllowed);
  EXPECT_GT((*answered)["dns"]["upstream_latency_ns"].get<uint64_t>(), 0u);
  EXPECT_GT((*answered)["dns"]["learn_latency_ns"].get<uint64_t>(), 0u);
  EXPECT_TRUE((*answered)["dns"].contains("ttl"));
  EXPECT_EQ(denied, (std::set<std::string>{"denied.example.", "a.sib.example.", "b.sib.example."}));
  // Kernel and DNS records interleave in one numbering: the allowed connect
  // after the answer comes after it.
  uint64_t answer_seq = (*answered)["seq"], allowed_connect_seq = 0;
  for (const auto& j : lines) {
    if (j["type"] == "connect" && j["verdict"] == "allow") allowed_connect_seq = j["seq"];
  }
  EXPECT_GT(allowed_connect_seq, 0u);
  EXPECT_NE(answer_seq, allowed_connect_seq);
}

TEST_F(AuditDns, SuggestFromARealStreamPassesPolicyCheck) {
  const std::string f = File("suggest.jsonl");
  RunResult r = RunDnsWorkload(f);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  RunResult s = Shared().Ctl({"audit", "suggest", "--input", f, "--floor", "connected"});
  ASSERT_EQ(s.exit_code, 0) << s.Describe();
  const std::string& y = s.out;
  // The denied name, the siblings as one wildcard, the address no answer
  // named; the allowed name's address (denied before it was asked) as the
  // name, never as the address; never the protected address.
  EXPECT_NE(y.find("- 'denied.example'"), std::string::npos) << y;
  EXPECT_NE(y.find("- '*.sib.example'"), std::string::npos) << y;
  EXPECT_NE(y.find(absl::StrCat("- '", lab::kPublicD4, "'")), std::string::npos) << y;
  EXPECT_NE(y.find(absl::StrCat("- '", kAllowed, "'")), std::string::npos) << y;
  EXPECT_EQ(y.find(absl::StrCat("- '", kAllowed4, "'")), std::string::npos) << y;
  EXPECT_EQ(y.find(absl::StrCat("- '", lab::kImds4)), std::string::npos) << y;
  EXPECT_NE(y.find(absl::StrCat("#   ", lab::kImds4)), std::string::npos) << "listed as not suggested: " << y;
  EXPECT_EQ(y.find("- '*'"), std::string::npos) << y;
  const std::string task = File("task.yaml");
  std::ofstream(task) << y;
  RunResult check = Shared().Ctl({"policy", "check", "--floor", "connected", "--policy", task});
  EXPECT_EQ(check.exit_code, 0) << check.Describe() << "\n" << y;
  // And with it, the same workload is denied nothing the suggestion covers.
  const std::string g = File("again.jsonl");
  const std::string probe = lab::BinaryPath("egressd-probe");
  RunResult again = Shared().CtlIn(
      lab().pod().netns,
      {"run", "--audit", g, "--policy", task, "--upstream-dns", kUpstream, "--readable", dir_, "--", "sh", "-c",
       absl::StrCat("dig +short +time=2 +tries=1 @8.8.8.8 a.sib.example; ", probe, " batch 'tcp ", lab::kPublicD4,
                    " 80'")});
  ASSERT_EQ(again.exit_code, 0) << again.Describe();
  EXPECT_NE(again.out.find(lab::kPublicC4), std::string::npos) << again.Describe();
  for (const auto& j : ParseLines(Slurp(g))) {
    if (j["type"] == "dns" || j["type"] == "connect") {
      EXPECT_EQ(j["verdict"], "allow") << j.dump();
    }
  }
}

// `egressctl dns serve` (a pod registered with `sandbox add` and its
// endpoint on the pod gateway): its records reach `egressctl audit
// --sandbox ID` with the sandbox's labels, as the kernel's do.
TEST_F(AuditDns, DnsServesRecordsReachEveryReader) {
  auto cg = lab().MakeCgroup("auditdns-served");
  ASSERT_TRUE(cg.ok()) << cg.status();
  struct stat st {};
  ASSERT_EQ(stat(cg->c_str(), &st), 0);
  const uint64_t id = st.st_ino;
  RunResult add = Shared().Ctl({"sandbox", "add", "--cgroup", *cg, "--dns-endpoint4", lab::kPodGatewayV4,
                                "--egress", kAllowed, "--label", "pod=served"});
  ASSERT_EQ(add.exit_code, 0) << add.Describe();
  struct Remove {
    std::string cg;
    ~Remove() { Shared().Ctl({"sandbox", "remove", "--cgroup", cg}); }
  } remove{*cg};
  lab::RunSpec spec;
  spec.argv = {lab::BinaryPath("egressctl"), "dns", "serve", "--upstream-dns", kUpstream};
  spec.netns = lab().node_netns();
  spec.env = Shared().CtlEnv();
  auto serve = lab::Start(spec);
  ASSERT_TRUE(serve.ok()) << serve.status();
  for (;;) {
    auto line = serve->ReadOutLine(std::chrono::seconds(10));
    ASSERT_TRUE(line) << "dns serve never said ready: " << serve->err();
    if (absl::StartsWith(*line, "ready:")) break;
  }
  for (const char* name : {kAllowed, kDenied}) {
    lab::RunSpec dig;
    dig.argv = {"dig", "+time=2", "+tries=1", "@8.8.8.8", name};
    dig.netns = lab().pod().netns;
    dig.cgroup = *cg;
    RunResult r = lab::Run(dig);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
  }
  // SIGTERM: the proxy stops and its writer writes what it queued.
  ASSERT_EQ(kill(serve->pid(), SIGTERM), 0);
  RunResult served = serve->Wait();
  EXPECT_EQ(served.exit_code, 0) << served.Describe();
  RunResult a = Shared().Ctl({"audit", "--sandbox", std::to_string(id)});
  ASSERT_EQ(a.exit_code, 0) << a.Describe();
  std::map<std::string, nlohmann::json> dns;
  for (const auto& j : ParseLines(a.out)) {
    EXPECT_EQ(j["sandbox"]["id"], id) << j.dump();
    if (j["type"] == "dns") dns[j["dns"].value("query", "")] = j;
  }
  ASSERT_EQ(dns.size(), 2u) << a.out;
  const auto& allowed = dns[absl::StrCat(kAllowed, ".")];
  EXPECT_EQ(allowed["verdict"], "allow") << allowed.dump();
  EXPECT_EQ(allowed["dns"]["ips"], nlohmann::json::array({kAllowed4})) << allowed.dump();
  EXPECT_EQ(allowed["pod"]["name"], "served") << allowed.dump();
  const auto& denied = dns[absl::StrCat(kDenied, ".")];
  EXPECT_EQ(denied["verdict"], "deny") << denied.dump();
  EXPECT_EQ(denied["dns"]["rcode_name"], "NXDOMAIN") << denied.dump();
}

}  // namespace
}  // namespace egressd::test
