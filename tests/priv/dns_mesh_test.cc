// A service mesh in the pod (docs/dns.md, "A service mesh in the pod"): the
// pod's own nftables REDIRECT all outbound TCP to an in-pod proxy on
// 127.0.0.1:15001 and port 53 to an in-pod resolver on 127.0.0.1:15053, both
// run inside the sandbox's cgroup, the proxy's own connects exempt from the
// redirect by a mark (as a mesh exempts its sidecar).  egressd's hooks run at
// connect()/sendmsg(), before netfilter: the app's connect is judged on its
// real destination, the mesh proxy's upstream connect is judged again, and a
// UDP query is already steered to egressd's endpoint (no longer port 53)
// when the pod's rules see it, so the mesh's resolver is never asked.  TCP
// DNS is the exception: its rewritten destination is captured by the mesh's
// all-TCP rule, and the mesh proxy's connect to the endpoint is refused (it
// is not the redirected socket), so it fails closed until the mesh exempts
// the endpoint.
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
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

constexpr const char* kUpstream = lab::kPublicE4;
constexpr const char* kWorld8 = lab::kDns4;
constexpr const char* kAllowedName = "mesh-allowed.example";  // egressd's upstream: 192.0.2.10
constexpr const char* kDeniedName = "mesh-denied.example";
constexpr const char* kLearned = lab::kPublicA4;     // only through the allowed name
constexpr const char* kLiteral = lab::kPublicB4;     // allowed by address
constexpr const char* kDenied = lab::kPublicC4;      // allowed by nothing
constexpr const char* kMeshAnswer = lab::kPublicD4;  // what the mesh's resolver says
constexpr int kMeshMark = 1337;

std::string FirstLine(const std::string& s) {
  return std::string(absl::StripAsciiWhitespace(s.substr(0, s.find('\n'))));
}

class DnsMesh : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    Lab& lab = Shared().lab();
    auto u = DnsServer::Start(DnsServerSpec{.netns = lab.world_netns(),
                                            .listen = {kUpstream},
                                            .records = {{kAllowedName, {kLearned}}, {kDeniedName, {kDenied}}}});
    ASSERT_TRUE(u.ok()) << u.status();
    upstream_ = std::move(*u).release();
    auto w = DnsServer::Start(
        DnsServerSpec{.netns = lab.world_netns(), .listen = {kWorld8}, .records = {{kAllowedName, {kMeshAnswer}}}});
    ASSERT_TRUE(w.ok()) << w.status();
    world8_ = std::move(*w).release();
  }
  static void TearDownTestSuite() {
    delete upstream_;
    delete world8_;
    upstream_ = world8_ = nullptr;
  }
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    ASSERT_NE(upstream_, nullptr);
    lab().ResetCounters();
    world8_before_ = world8_->Queries();
  }
  void TearDown() override {
    if (!table_.empty()) Nft(absl::StrCat("delete table ip ", table_, "\n"));
    if (mesh_proxy_) mesh_proxy_->Stop();
    mesh_resolver_.reset();
    if (serve_) serve_->Stop();
    sandboxes_.RemoveAll();
  }
  Lab& lab() { return Shared().lab(); }

  RunResult Nft(const std::string& script) {
    RunSpec spec;
    spec.argv = {"nft", "-f", "-"};
    spec.netns = lab().pod().netns;
    spec.stdin_data = script;
    return lab::Run(spec);
  }
  // The mesh's rules in the pod netns (Istio's shape: its own traffic and
  // loopback exempt, DNS to the resolver, every other TCP to the proxy);
  // `exempt` adds a return for one more destination before the captures.
  void MeshRules(const std::string& exempt = "") {
    if (!table_.empty()) Nft(absl::StrCat("delete table ip ", table_, "\n"));
    table_ = absl::StrCat("egrmesh", counter_++);
    std::string rules = absl::StrCat("add table ip ", table_, "\n", "add chain ip ", table_,
                                     " out { type nat hook output priority -100; policy accept; }\n");
    for (const std::string& r :
         {absl::StrCat("meta mark ", kMeshMark, " return"), std::string("ip daddr 127.0.0.0/8 return"), exempt,
          std::string("udp dport 53 redirect to :15053"), std::string("tcp dport 53 redirect to :15053"),
          std::string("meta l4proto tcp redirect to :15001")}) {
      if (!r.empty()) absl::StrAppend(&rules, "add rule ip ", table_, " out ", r, "\n");
    }
    RunResult r = Nft(rules);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
  }
  // The sandbox, the proxy serving it, and the mesh inside it.
  void StartPod(const std::vector<std::string>& policy) {
    s_ = sandboxes_.Add(policy);
    ASSERT_NE(s_.port, 0) << DnsSandboxes::Record(s_).dump();
    auto serve = ServeDns({"--upstream-dns", kUpstream});
    ASSERT_TRUE(serve.ok()) << serve.status();
    serve_ = std::move(*serve);
    auto r = DnsServer::Start(DnsServerSpec{.netns = lab().pod().netns,
                                            .listen = {"127.0.0.1"},
                                            .port = 15053,
                                            .records = {{kAllowedName, {kMeshAnswer}}, {kDeniedName, {kMeshAnswer}}},
                                            .cgroup = s_.cgroup});
    ASSERT_TRUE(r.ok()) << r.status();
    mesh_resolver_ = std::move(*r);
    RunSpec p;
    p.argv = {lab::BinaryPath("egr-mesh-proxy"), "15001", std::to_string(kMeshMark)};
    p.netns = lab().pod().netns;
    p.cgroup = s_.cgroup;
    p.timeout = 10min;
    auto bg = lab::Start(p);
    ASSERT_TRUE(bg.ok()) << bg.status();
    mesh_proxy_ = std::move(*bg);
    ASSERT_EQ(mesh_proxy_->ReadOutLine(10s).value_or(""), "ready") << mesh_proxy_->err();
    MeshRules();
  }
  // The mesh proxy's next connection line ({"none": ...} when there is none).
  nlohmann::json NextMeshLine() {
    auto line = mesh_proxy_->ReadOutLine(5s);
    auto j = line ? nlohmann::json::parse(*line, nullptr, false) : nlohmann::json();
    return j.is_object() ? j : nlohmann::json{{"none", line.value_or("")}};
  }
  // A command in the pod's netns: in the sandbox (hostile: only CAP_NET_RAW)
  // or, with `sandboxed` false, an unregistered process of the pod.
  RunResult InPod(std::vector<std::string> argv, bool sandboxed = true) {
    RunSpec spec;
    spec.argv = std::move(argv);
    spec.netns = lab().pod().netns;
    if (sandboxed) spec.cgroup = s_.cgroup;
    spec.hostile = sandboxed;
    spec.timeout = 20s;
    return lab::Run(spec);
  }
  ProbeLine Connect(const std::string& addr, bool sandboxed = true) {
    RunResult r = InPod({lab::BinaryPath("egressd-probe"), "batch", absl::StrCat("tcp ", addr, " 80")}, sandboxed);
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? ProbeLine{} : lines[0];
  }
  RunResult Dig(const std::vector<std::string>& args, bool sandboxed = true) {
    std::vector<std::string> argv = {"dig", "+time=2", "+tries=1"};
    argv.insert(argv.end(), args.begin(), args.end());
    return InPod(argv, sandboxed);
  }
  // The mesh's resolver saw no query since it had `before`: one more from an
  // unregistered process of the pod is logged, and it is the only one.  (Its
  // answer never comes back: the resolver is in the sandbox, and its reply
  // goes to the pod's own address, not loopback, which the policy does not
  // allow.)
  void ExpectMeshResolverAskedOnlyByTheControl(uint64_t before) {
    Dig({"+short", "@8.8.8.8", kAllowedName}, /*sandboxed=*/false);
    EXPECT_TRUE(Lab::WaitFor([&] { return mesh_resolver_->Queries() >= before + 1; }, 5s)) << mesh_resolver_->Log();
    EXPECT_EQ(mesh_resolver_->Queries(), before + 1) << "the mesh's resolver was asked: " << mesh_resolver_->Log();
  }
  uint64_t Counter(const std::string& name) {
    RunResult st = Shared().Ctl({"status", "--json"});
    auto j = nlohmann::json::parse(st.out, nullptr, false);
    return j.is_object() && j.contains("counters") && j["counters"].contains(name) ? j["counters"][name].get<uint64_t>()
                                                                                   : ~0ull;
  }

  static inline DnsServer* upstream_ = nullptr;
  static inline DnsServer* world8_ = nullptr;
  static inline int counter_ = 0;
  uint64_t world8_before_ = 0;
  DnsSandboxes sandboxes_{"dnsmesh-"};
  DnsSandbox s_;
  std::optional<lab::Background> serve_, mesh_proxy_;
  std::unique_ptr<DnsServer> mesh_resolver_;
  std::string table_;
};

TEST_F(DnsMesh, ThePodGetsExactlyItsPolicyThroughTheMeshsRedirects) {
  StartPod({"--egress", kAllowedName, "--egress", kLiteral});

  // Positive controls, from a process of the pod in no sandbox: the mesh's
  // rules are in force (its resolver receives 8.8.8.8's queries, its proxy
  // carries a connect).
  Dig({"+short", "@8.8.8.8", kAllowedName}, /*sandboxed=*/false);
  EXPECT_TRUE(mesh_resolver_->WaitForQuery(kAllowedName, 5s)) << mesh_resolver_->Log();
  EXPECT_TRUE(Ok(Connect(kLiteral, /*sandboxed=*/false)));
  nlohmann::json control = NextMeshLine();
  EXPECT_EQ(control.value("orig", ""), absl::StrCat(kLiteral, ":80")) << control.dump();
  EXPECT_EQ(control.value("result", ""), "ok") << control.dump();

  // The app's connect is judged on its real destination, before the pod's
  // NAT: refused ones never reach the mesh proxy (the next line it prints is
  // the allowed connect's).
  EXPECT_EQ(Errno(Connect(kDenied)), "EPERM") << "a destination the policy does not allow";
  EXPECT_EQ(Errno(Connect(kLearned)), "EPERM") << "an address no answer taught yet";
  EXPECT_TRUE(Ok(Connect(kLiteral)));
  nlohmann::json literal = NextMeshLine();
  EXPECT_EQ(literal.value("orig", ""), absl::StrCat(kLiteral, ":80")) << literal.dump();
  EXPECT_EQ(literal.value("result", ""), "ok") << literal.dump();

  // A UDP query reaches egressd's endpoint, not the mesh's resolver: the
  // answer is the upstream's, learned for the sandbox.
  const uint64_t mesh_queries = mesh_resolver_->Queries();
  RunResult d = Dig({"+short", "@8.8.8.8", kAllowedName});
  EXPECT_EQ(FirstLine(d.out), kLearned) << d.Describe();
  EXPECT_GE(upstream_->QueriesFor(kAllowedName), 1u) << upstream_->Log();
  // Then the learned address through the mesh proxy, whose own connect is
  // the one judged at the lab host's side.
  EXPECT_TRUE(Ok(Connect(kLearned)));
  nlohmann::json learned = NextMeshLine();
  EXPECT_EQ(learned.value("orig", ""), absl::StrCat(kLearned, ":80")) << learned.dump();
  EXPECT_EQ(learned.value("result", ""), "ok") << learned.dump();
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kLearned, 80) == 1; })) << lab().CountersSummary();

  RunResult denied = Dig({"@8.8.8.8", kDeniedName});
  EXPECT_NE(denied.out.find("status: NXDOMAIN"), std::string::npos) << denied.Describe();
  EXPECT_NE(denied.out.find("EDE: 15 (Blocked)"), std::string::npos) << denied.Describe();
  EXPECT_EQ(upstream_->QueriesFor(kDeniedName), 0u) << upstream_->Log();
  ExpectMeshResolverAskedOnlyByTheControl(mesh_queries);

  // The mesh proxy is bound by the policy too: carrying an unregistered
  // client's connect to a destination the sandbox may not reach, its own
  // connect is refused and nothing arrives.
  Connect(kDenied, /*sandboxed=*/false);
  nlohmann::json carried = NextMeshLine();
  EXPECT_EQ(carried.value("orig", ""), absl::StrCat(kDenied, ":80")) << carried.dump();
  EXPECT_EQ(carried.value("errno", ""), "EPERM") << carried.dump();
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().TcpAccepts(kDenied, 80), 0u) << lab().CountersSummary();
  EXPECT_EQ(world8_->Queries(), world8_before_) << world8_->Log();
  EXPECT_EQ(lab().PacketsTo(kWorld8), 0u) << lab().CountersSummary();
}

// The limit: a mesh capturing every TCP connection also captures a TCP
// query already steered to the endpoint; its proxy's connect to the
// endpoint is not the redirected socket and is refused, so TCP DNS fails
// closed (nothing asked upstream) until the mesh exempts the endpoint.
TEST_F(DnsMesh, TcpDnsThroughAMeshCapturingAllTcpFailsClosedUntilTheEndpointIsExempt) {
  StartPod({"--egress", kAllowedName});
  const uint64_t deny_before = Counter("dns_deny");
  const uint64_t asked_before = upstream_->QueriesFor(kAllowedName);
  RunResult d = Dig({"+short", "+tcp", "@8.8.8.8", kAllowedName});
  EXPECT_EQ(d.out.find(kLearned), std::string::npos) << d.Describe();
  nlohmann::json captured = NextMeshLine();
  EXPECT_EQ(captured.value("orig", ""), absl::StrCat(lab::kPodGatewayV4, ":", s_.port)) << captured.dump();
  EXPECT_EQ(captured.value("errno", ""), "EPERM") << captured.dump();
  EXPECT_GT(Counter("dns_deny"), deny_before);
  EXPECT_EQ(Errno(Connect(kLearned)), "EPERM") << "nothing was learned";

  // The mesh's documented fix: exempt the endpoint from its capture.
  MeshRules(absl::StrCat("ip daddr ", lab::kPodGatewayV4, " tcp dport ", s_.port, " return"));
  RunResult exempt = Dig({"+short", "+tcp", "@8.8.8.8", kAllowedName});
  EXPECT_EQ(FirstLine(exempt.out), kLearned) << exempt.Describe();
  EXPECT_TRUE(Ok(Connect(kLearned)));
  nlohmann::json learned = NextMeshLine();
  EXPECT_EQ(learned.value("orig", ""), absl::StrCat(kLearned, ":80"))
      << "the first line since the exemption: " << learned.dump();
  // The exempt query is the only one the upstream saw: the captured one
  // asked nothing.
  EXPECT_TRUE(Lab::WaitFor([&] { return upstream_->QueriesFor(kAllowedName) >= asked_before + 1; }, 5s));
  EXPECT_EQ(upstream_->QueriesFor(kAllowedName), asked_before + 1) << upstream_->Log();
  ExpectMeshResolverAskedOnlyByTheControl(0);
}

}  // namespace
}  // namespace egressd::test
