// Attacks on egressd's names, on the node-routed lab with the real proxy
// (`egressctl dns serve` in the node netns) and the kernel redirect together:
// spoofed queries at a proxy endpoint, answers forged at the proxy's upstream
// sockets, raw DNS packets, DNS over TLS and HTTPS, SO_MARK, and the load
// test (resolve, then connect at once, thousands of times).  Each attack is
// shown to have reached the hook (its socket made and its send returned, the
// kernel's counters, nftables counters in the node) next to a positive
// control that the same path works for a query the redirect sent.
// Clients: dig, kdig, glibc and egr-dns-attack (tests/lab/dns_attack_tool.cc,
// hand-built packets); nothing the 6.1 guest lacks (no python3).
#include <bpf/bpf.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "dns_sandboxes.h"
#include "egressd_env.h"
#include "lab_dns.h"
#include "maps/dns_endpoints.h"
#include "maps/egressd_abi.h"
#include "maps/resolved_table.h"
#include "userspace/net/ip.h"

namespace egressd::test {
namespace {

using namespace std::chrono_literals;
using lab::DnsServer;
using lab::DnsServerSpec;
using lab::kPodGatewayV4;
using lab::kPodGatewayV6;
using lab::Lab;
using lab::ProbeLine;
using lab::RunResult;
using lab::RunSpec;

constexpr const char* kUpstream = lab::kPublicE4;   // 198.51.100.8: the lab's resolver
constexpr const char* kSlowUpstream = lab::kPublicD4; // 198.51.100.7: holds its answers
constexpr const char* kWorld8 = lab::kDns4;         // 8.8.8.8: must see nothing
constexpr const char* kDoHost = lab::kPublicC4;     // 192.0.2.200: a DoT/DoH provider
constexpr const char* kRealAnswer = lab::kPublicA4; // 192.0.2.10
constexpr const char* kForged = lab::kPublicB4;     // 192.0.2.11: the attacker's address

// Unique names per run: the upstream's log is counted by name.
std::string Tag() {
  static const std::string tag = absl::StrCat("r", getpid());
  return tag;
}
std::string Name(const std::string& what) { return absl::StrCat(what, "-", Tag(), ".attack.test"); }

std::string FirstLine(const std::string& s) {
  return std::string(absl::StripAsciiWhitespace(s.substr(0, s.find('\n'))));
}

using Sandbox = DnsSandbox;

// An nftables counter in the node netns: `hook` (input, output) and a match
// such as "ip daddr 10.244.0.1 udp dport 1053".  What arrives at (or leaves)
// an endpoint or a proxy socket whatever the payload.
class NodeCounter {
 public:
  NodeCounter(std::string table, const std::string& hook, const std::string& match) : table_(std::move(table)) {
    const std::string script = absl::StrCat("add table inet ", table_, "\nadd chain inet ", table_, " c { type filter hook ",
                                            hook, " priority -300; }\nadd rule inet ", table_, " c ", match, " counter\n");
    RunSpec spec{.argv = {"nft", "-f", "-"}};
    spec.netns = Shared().lab().node_netns();
    spec.stdin_data = script;
    RunResult r = lab::Run(spec);
    EXPECT_EQ(r.exit_code, 0) << script << r.Describe();
  }
  ~NodeCounter() {
    RunSpec spec{.argv = {"nft", "delete", "table", "inet", table_}};
    spec.netns = Shared().lab().node_netns();
    lab::Run(spec);
  }
  uint64_t Packets() const {
    RunSpec spec{.argv = {"nft", "-j", "list", "table", "inet", table_}};
    spec.netns = Shared().lab().node_netns();
    auto j = nlohmann::json::parse(lab::Run(spec).out, nullptr, false);
    if (!j.is_object() || !j.contains("nftables")) return ~0ull;
    for (const auto& item : j["nftables"]) {
      if (!item.contains("rule")) continue;
      for (const auto& e : item["rule"]["expr"]) {
        if (e.contains("counter")) return e["counter"]["packets"].get<uint64_t>();
      }
    }
    return ~0ull;
  }

 private:
  std::string table_;
};

// A counter of /proc/net/snmp or /proc/net/netstat (`section` "Udp", "Tcp",
// "TcpExt": a line of names, then one of values) in another netns, read by
// a shell there (the 6.1 guest has no grep or awk).
uint64_t NetnsCounter(const std::string& netns, const std::string& file, const std::string& section,
                      const std::string& field) {
  RunSpec spec{.argv = {"sh", "-c", absl::StrCat("while read -r l; do case $l in ", section,
                                                 ":*) echo \"$l\";; esac; done < ", file)}};
  spec.netns = netns;
  RunResult r = lab::Run(spec);
  std::vector<std::string> lines = absl::StrSplit(absl::StripAsciiWhitespace(r.out), '\n');
  if (lines.size() < 2) return ~0ull;
  std::vector<std::string> names = absl::StrSplit(lines[0], ' ', absl::SkipEmpty());
  std::vector<std::string> values = absl::StrSplit(lines[1], ' ', absl::SkipEmpty());
  for (size_t i = 1; i < names.size() && i < values.size(); ++i) {
    uint64_t v = 0;
    if (names[i] == field && absl::SimpleAtoi(values[i], &v)) return v;
  }
  return ~0ull;
}
uint64_t NodeUdpCounter(const std::string& field) {
  return NetnsCounter(Shared().lab().node_netns(), "/proc/net/snmp", "Udp", field);
}

class DnsAttack : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    Lab& lab = Shared().lab();
    if (lab.pod_count() < 2) {
      ASSERT_TRUE(lab.AddPod().ok());
    }
    auto up = DnsServer::Start(DnsServerSpec{.netns = lab.world_netns(),
                                             .listen = {kUpstream},
                                             .records = {{Name("control"), {kRealAnswer}},
                                                         {Name("spoof-a"), {lab::kPublicC4}},
                                                         {Name("spoof-b"), {lab::kPublicD4}},
                                                         {Name("spoof-c"), {lab::kPublicF4}},
                                                         {Name("spoof-d"), {lab::kPublicB4}},
                                                         {Name("raw"), {lab::kPublicC4}},
                                                         {Name("marked"), {kRealAnswer}}}});
    ASSERT_TRUE(up.ok()) << up.status();
    upstream_ = std::move(*up).release();
    auto w = DnsServer::Start(DnsServerSpec{.netns = lab.world_netns(),
                                            .listen = {kWorld8},
                                            .records = {{Name("control"), {lab::kPublicD4}}}});
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
    if (serve_) serve_->Stop();
    sandboxes_.RemoveAll();
  }
  Lab& lab() { return Shared().lab(); }

  // Registered with the pod gateway as its DNS endpoint (dns_sandboxes.h).
  Sandbox Register(const std::vector<std::string>& policy) { return sandboxes_.Add(policy); }

  // `egressctl dns serve` in the node netns, outside every sandbox cgroup,
  // once it said ready (every endpoint bound).
  void Serve(const std::vector<std::string>& extra = {"--upstream-dns", kUpstream}) {
    auto bg = ServeDns(extra);
    ASSERT_TRUE(bg.ok()) << bg.status();
    serve_ = std::move(*bg);
  }

  // Hostile: uid 0 with only CAP_NET_RAW.  `caps` overrides the bounding set.
  RunResult InSandbox(const Sandbox& s, std::vector<std::string> argv, const std::string& caps = "",
                      size_t pod = 0, std::chrono::milliseconds timeout = 20s) {
    if (!caps.empty()) argv.insert(argv.begin(), {"setpriv", "--bounding-set", caps, "--inh-caps", "-all", "--"});
    RunSpec spec;
    spec.argv = std::move(argv);
    spec.netns = lab().pod(pod).netns;
    spec.cgroup = s.cgroup;
    spec.timeout = timeout;
    return lab::Run(spec);
  }
  static constexpr const char* kNetRaw = "-all,+net_raw";
  RunResult Dig(const Sandbox& s, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"dig", "+time=2", "+tries=1"};
    argv.insert(argv.end(), args.begin(), args.end());
    return InSandbox(s, argv);
  }
  // egr-dns-attack's lines, from the hostile sandbox.
  std::vector<ProbeLine> Attack(const Sandbox& s, const std::vector<std::string>& args, size_t pod = 0) {
    std::vector<std::string> argv = {lab::BinaryPath("egr-dns-attack")};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = InSandbox(s, argv, kNetRaw, pod, Scaled(30s));
    last_ = r.Describe();
    return Lines(r);
  }
  ProbeLine Connect(const Sandbox& s, const std::string& addr, uint16_t port = 80) {
    RunResult r = InSandbox(s, {lab::BinaryPath("egressd-probe"), "batch", absl::StrCat("tcp ", addr, " ", port)},
                            kNetRaw);
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? ProbeLine{} : lines[0];
  }
  // Whether egr_resolved_v2 holds `addr` for sandbox s (read from the kernel).
  bool Learned(const Sandbox& s, const std::string& addr) {
    int fd = bpf_obj_get((Shared().pin_root() + "/" EGR_MAP_RESOLVED).c_str());
    EXPECT_GE(fd, 0) << "open pinned " << EGR_MAP_RESOLVED << ": " << strerror(errno);
    if (fd < 0) return false;
    maps::ResolvedTable table(fd);
    auto ip = net::IpAddr::Parse(addr);
    EXPECT_TRUE(ip.ok()) << addr;
    auto got = table.Get(s.id, *ip);
    close(fd);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() && got->has_value();
  }
  uint64_t Counter(const std::string& name) {
    RunResult st = Shared().Ctl({"status", "--json"});
    auto j = nlohmann::json::parse(st.out, nullptr, false);
    const bool found = j.is_object() && j.contains("counters") && j["counters"].contains(name);
    EXPECT_TRUE(found) << "no counter " << name << ": " << st.Describe();
    return found ? j["counters"][name].get<uint64_t>() : 0;
  }
  void ExpectWorld8SawNothing() {
    ASSERT_TRUE(lab().Drain().ok());
    EXPECT_EQ(world8_->Queries(), world8_before_) << world8_->Log();
    EXPECT_EQ(lab().PacketsTo(kWorld8), 0u) << lab().CountersSummary();
  }
  static std::chrono::milliseconds Scaled(std::chrono::milliseconds d) {
    return std::chrono::milliseconds(static_cast<int64_t>(d.count() * TimeScale()));
  }
  std::string Table() { return absl::StrCat("egratk", getpid() % 10000, "x", counter_++); }

  static inline DnsServer* upstream_ = nullptr;
  static inline DnsServer* world8_ = nullptr;
  static inline int counter_ = 0;
  uint64_t world8_before_ = 0;
  DnsSandboxes sandboxes_{"dnsatk-"};
  std::optional<lab::Background> serve_;
  std::string last_;
};

// 1. Queries at sandbox A's endpoint that the redirect did not send there:
// hand-built on a raw socket with A's own source address, with another pod's
// source, and from sandbox B's own UDP and TCP sockets.  None is answered
// (nothing leaves the endpoint), forwarded (the upstream's log) or learned
// (egr_resolved_v2), while A's own redirected query, right after, is all
// three.  What stops them: the backstop (bpf/lib/dns_redirect.h) drops a
// packet to an endpoint unless a redirected socket of the endpoint's own
// sandbox sends it, and the sock_addr hooks refuse naming an endpoint.
TEST_F(DnsAttack, SpoofedQueriesAtAnEndpointAreNeitherAnsweredForwardedNorLearned) {
  Sandbox a = Register({"--egress", Name("control"), "--egress", Name("spoof-a"), "--egress", Name("spoof-b"),
                        "--egress", Name("spoof-c"), "--egress", Name("spoof-d")});
  Sandbox b = Register({"--egress", Name("spoof-a"), "--egress", Name("spoof-b"), "--egress", Name("spoof-c"),
                        "--egress", Name("spoof-d")});
  ASSERT_NE(a.port, 0);
  ASSERT_NE(b.port, 0);
  Serve();
  const std::string pa = std::to_string(a.port);
  NodeCounter in_a(Table(), "input", absl::StrCat("ip daddr ", kPodGatewayV4, " udp dport ", a.port));
  NodeCounter in_a_tcp(Table(), "input", absl::StrCat("ip daddr ", kPodGatewayV4, " tcp dport ", a.port));
  NodeCounter out_a(Table(), "output", absl::StrCat("ip saddr ", kPodGatewayV4, " udp sport ", a.port));
  const uint64_t deny_before = Counter("dns_deny");

  // From sandbox B (hostile: CAP_NET_RAW) in pod 0, where A lives too.
  auto spoof_own = Attack(b, {"spoof-query", lab().pod(0).v4, "40000", kPodGatewayV4, pa, Name("spoof-a")});
  auto spoof_other = Attack(b, {"spoof-query", lab().pod(1).v4, "40001", kPodGatewayV4, pa, Name("spoof-b")});
  auto raw_udp = Attack(b, {"raw-query", kPodGatewayV4, pa, Name("spoof-c")});
  for (auto* l : {&spoof_own, &spoof_other, &raw_udp}) {
    ASSERT_EQ(l->size(), 1u) << last_;
    EXPECT_ATTEMPTED((*l)[0], last_);
  }
  RunResult by_udp = Dig(b, {"-p", pa, absl::StrCat("@", kPodGatewayV4), Name("spoof-d")});
  RunResult by_tcp = Dig(b, {"+tcp", "-p", pa, absl::StrCat("@", kPodGatewayV4), Name("spoof-d")});
  EXPECT_EQ(by_udp.out.find(lab::kPublicB4), std::string::npos) << by_udp.Describe();
  EXPECT_EQ(by_tcp.out.find(lab::kPublicB4), std::string::npos) << by_tcp.Describe();
  // Counted by the kernel: three raw packets dropped by the backstop, two
  // connect()s refused by the redirect (dig reports the send error and stops).
  EXPECT_GE(Counter("dns_deny") - deny_before, 5u) << "the attacks did not all reach a hook";
  EXPECT_EQ(in_a.Packets(), 0u) << "an attack reached A's endpoint";
  EXPECT_EQ(in_a_tcp.Packets(), 0u) << "an attack reached A's endpoint over TCP";

  // Positive control, right beside it: A's own query, which the redirect
  // sent, arrives, is forwarded, answered and learned.
  RunResult control = Dig(a, {"+short", "@8.8.8.8", Name("control")});
  EXPECT_EQ(FirstLine(control.out), kRealAnswer) << control.Describe();
  EXPECT_TRUE(Learned(a, kRealAnswer)) << "positive control: the answer was learned";
  EXPECT_EQ(upstream_->QueriesFor(Name("control")), 1u) << upstream_->Log();
  EXPECT_EQ(in_a.Packets(), 1u) << "the endpoint counter saw the control query";
  EXPECT_EQ(out_a.Packets(), 1u) << "only the control's answer left A's endpoint";

  for (const char* n : {"spoof-a", "spoof-b", "spoof-c", "spoof-d"}) {
    EXPECT_EQ(upstream_->QueriesFor(Name(n)), 0u) << n << " was forwarded: " << upstream_->Log();
  }
  for (const char* addr : {lab::kPublicC4, lab::kPublicD4, lab::kPublicF4, lab::kPublicB4}) {
    EXPECT_FALSE(Learned(a, addr)) << addr << " learned for A";
    EXPECT_FALSE(Learned(b, addr)) << addr << " learned for B";
  }
  ExpectWorld8SawNothing();
}

// 3. Hand-made DNS packets that no socket call names: to the upstream itself
// (its real address and port 53) on a raw UDP socket and with IP_HDRINCL, from
// a default-allow sandbox.  Dropped by the backstop (port 53 passes only
// through the redirect), counted (dns_deny), and the upstream sees nothing;
// the same packets from outside any sandbox reach it (positive control).  A
// packet socket is the other way to hand-build a frame: where the bpf LSM is
// in force its socket() is refused (tests/priv/containment_socket_test.cc);
// without it a registration must accept that it is uncontained.
TEST_F(DnsAttack, RawDnsPacketsAreDroppedCountedAndNeverReachTheUpstream) {
  Sandbox s = Register({"--floor", "connected"});
  Serve();
  const uint64_t deny_before = Counter("dns_deny");
  const uint64_t asked_before = upstream_->QueriesFor(Name("raw"));
  auto raw = Attack(s, {"raw-query", kUpstream, "53", Name("raw")});
  auto hdrincl = Attack(s, {"spoof-query", lab().pod(0).v4, "40002", kUpstream, "53", Name("raw")});
  ASSERT_EQ(raw.size(), 1u) << last_;
  ASSERT_EQ(hdrincl.size(), 1u) << last_;
  EXPECT_ATTEMPTED(raw[0], last_);
  EXPECT_ATTEMPTED(hdrincl[0], last_);
  EXPECT_EQ(Counter("dns_deny") - deny_before, 2u) << "each raw packet dropped and counted";
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().PacketsTo(kUpstream), 0u) << lab().CountersSummary();
  EXPECT_EQ(upstream_->QueriesFor(Name("raw")), asked_before) << upstream_->Log();

  // Positive control: the same packet from the pod, outside any sandbox.
  RunSpec control{.argv = {"setpriv", "--bounding-set", kNetRaw, "--inh-caps", "-all", "--",
                           lab::BinaryPath("egr-dns-attack"), "raw-query", kUpstream, "53", Name("raw")}};
  control.netns = lab().pod().netns;
  RunResult r = lab::Run(control);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_TRUE(Lab::WaitFor([&] { return upstream_->QueriesFor(Name("raw")) == asked_before + 1; }))
      << "positive control: " << upstream_->Log();
}

// 4. DNS over TLS (kdig +tls, port 853) and over HTTPS (kdig +https, a POST to
// /dns-query on 443) to a lab host: refused at connect() unless the policy
// allows that address, and nothing arrives there; allowed, both connect.
// Allowing a DoT/DoH provider's address reopens DNS for that sandbox: the
// proxy sees port 53 only (docs/dns.md).
TEST_F(DnsAttack, DotAndDohAreRefusedUnlessTheProvidersAddressIsAllowed) {
  RunSpec ls{.argv = {lab::BinaryPath("egr-dns-attack"), "tcp-count", kDoHost, "853"}};
  ls.netns = lab().world_netns();
  ls.timeout = 5min;
  auto dot = lab::Start(ls);
  ASSERT_TRUE(dot.ok()) << dot.status();
  auto listening = dot->ReadOutLine(10s);
  ASSERT_TRUE(listening && absl::StrContains(*listening, "listening")) << dot->err();

  Sandbox denied = Register({"--egress", Name("control")});
  Sandbox allowed = Register({"--egress", Name("control"), "--egress", kDoHost});
  Serve();
  auto kdig = [&](const Sandbox& s, const char* mode) {
    return InSandbox(s, {"kdig", "+timeout=2", "+retry=0", mode, absl::StrCat("@", kDoHost), Name("control")},
                     kNetRaw);
  };
  RunResult t = kdig(denied, "+tls");
  RunResult h = kdig(denied, "+https");
  EXPECT_NE(t.exit_code, 0) << t.Describe();
  EXPECT_NE(h.exit_code, 0) << h.Describe();
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().FlowsOpenedTo(kDoHost), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(kDoHost, 443), 0u);
  EXPECT_EQ(Errno(Connect(denied, kDoHost, 853)), "EPERM");

  // Allowed: both connect (the handshake then fails: no TLS server, and the
  // lab's 443 only echoes; a connection is all this shows).
  kdig(allowed, "+tls");
  auto accepted = dot->ReadOutLine(10s);
  EXPECT_TRUE(accepted && absl::StrContains(*accepted, "\"accepted\":1")) << "positive control: DoT connected";
  kdig(allowed, "+https");
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kDoHost, 443) >= 1; })) << lab().CountersSummary();
}

// 5. SO_MARK buys nothing: every mark 0-0xff on a denied connect and on a
// DNS query to 8.8.8.8 (TCP, through the redirect to the real proxy), from a
// hostile sandbox (CAP_NET_RAW suffices to set SO_MARK since 5.17) and from
// one with CAP_NET_ADMIN.  tests/priv/bypass_test.cc (three marks, to the
// metadata address) and dns_redirect_test.cc (every mark, to a stand-in
// proxy) cover the rest; this is every mark against the real proxy and a
// name-only policy, and the CAP_NET_ADMIN sandbox.
TEST_F(DnsAttack, NoSoMarkValueFromAnySandboxGainsAnything) {
  Sandbox s = Register({"--egress", Name("marked")});
  Serve();
  // Every SYN to the proxy's TCP endpoint, whatever its mark.
  NodeCounter syns(Table(), "input",
                   absl::StrCat("ip daddr ", kPodGatewayV4, " tcp dport ", s.port, " tcp flags & (syn|ack) == syn"));
  // The proxy never echoes the probe's bytes: each query line waits out its
  // timeout, which only has to cover a connect to the node.
  const auto wait = Scaled(20ms);
  for (const std::string caps : {"-all,+net_raw", "-all,+net_admin"}) {
    std::vector<std::string> batch = {lab::BinaryPath("egressd-probe"), "batch"};
    for (int mark = 0; mark <= 0xff; ++mark) {
      batch.push_back(absl::StrCat("so-mark ", mark, " ", kRealAnswer, " 80 --timeout-ms ", wait.count()));
      batch.push_back(absl::StrCat("so-mark ", mark, " ", kWorld8, " 53 --timeout-ms ", wait.count()));
    }
    RunResult r = InSandbox(s, batch, caps, 0, Scaled(60s));
    auto lines = Lines(r);
    ASSERT_EQ(lines.size(), 512u) << caps << ": " << r.Describe();
    size_t marked = 0, refused = 0, redirected = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      marked += lines[i]["mark_result"] == "ok";
      if (i % 2 == 0) {
        refused += Errno(lines[i]) == "EPERM";
      } else {
        // Connected (to the proxy's endpoint, which does not echo the probe's
        // bytes back: the line then fails at a later stage than connect).
        redirected += Ok(lines[i]) || (lines[i]["result"] == "error" && lines[i]["stage"] != "connect");
      }
    }
    EXPECT_EQ(marked, 512u) << caps << ": every mark must really be set: " << r.Describe();
    EXPECT_EQ(refused, 256u) << caps << ": a marked connect to an address no answer taught";
    EXPECT_EQ(redirected, 256u) << caps << ": a marked query still reaches the proxy: " << r.Describe().substr(0, 2000);
  }
  EXPECT_EQ(syns.Packets(), 512u) << "every marked query arrived at the proxy's endpoint";
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().TcpAccepts(kRealAnswer, 80), 0u) << lab().CountersSummary();
  EXPECT_FALSE(Learned(s, kRealAnswer)) << "nothing was asked, nothing learned";
  ExpectWorld8SawNothing();
}

// 2. Answers forged at the proxy's upstream socket.  The upstream holds its
// answer (a slow resolver: the window is real), and a default-allow hostile
// sandbox in another pod, told the exact port the proxy asks from (the
// strongest attacker: the test reads it from the upstream), sprays an answer
// for every ID 0-65535 with the upstream's address and port as source and the
// attacker's address as the answer.  The spray reaches the node (an nftables
// counter at its input); the victim's answer is still the real one, and the
// forged address is never learned.  What stops it: not the backstop (it
// judges the destination, the node's uplink address, which a default-allow
// sandbox may reach), not the pod's routing (IP_HDRINCL picks any source),
// not the node (it delivers to its own addresses from any interface; the
// lab's rp_filter is off, and a loose one passes too), and not c-ares'
// matching alone (a 16-bit ID and the question, both sprayed or known):
// before the fix the forged address was answered and learned.  Two guards
// now (userspace/dns/upstream_socket.h): the socket's address and port in
// egr_dnsep_v1, owned by no sandbox, so the attacker's own egress hook drops
// every forgery (dns_deny; nothing reaches the node), and, shown with that
// entry removed for one spray, the socket's binding to the interface its
// upstream is routed over (the kernel matches no socket for a packet that
// came in on a pod's veth: UDP NoPorts).  A sandbox whose packets arrive on
// the upstream's own interface is dns_upstream_guard_test's.  docs/dns.md,
// "Forged answers".
TEST_F(DnsAttack, AnswersForgedAtTheProxysUpstreamSocketAreNeverLearned) {
  RunSpec hs{.argv = {lab::BinaryPath("egr-dns-attack"), "hold-server", kSlowUpstream, "53", Name("slow"),
                      kRealAnswer}};
  hs.netns = lab().world_netns();
  hs.timeout = 5min;
  auto hold = lab::Start(hs);
  ASSERT_TRUE(hold.ok()) << hold.status();
  auto listening = hold->ReadOutLine(10s);
  ASSERT_TRUE(listening && absl::StrContains(*listening, "listening")) << hold->err();

  Sandbox victim = Register({"--egress", Name("slow")});
  Sandbox attacker = Register({"--floor", "connected"});
  // The proxy waits for the held answer far longer than the spray takes.
  const auto window = Scaled(20s);
  Serve({"--upstream-dns", kSlowUpstream, "--upstream-timeout-ms", std::to_string(window.count()), "--upstream-tries",
         "1"});

  RunSpec ask{.argv = {"dig", "+short", absl::StrCat("+time=", window.count() / 1000 + 5), "+tries=1", "@8.8.8.8",
                       Name("slow")}};
  ask.netns = lab().pod(0).netns;
  ask.cgroup = victim.cgroup;
  ask.timeout = window + 20s;
  auto dig = lab::Start(ask);
  ASSERT_TRUE(dig.ok()) << dig.status();
  // The proxy's question, held: where it came from is the socket to attack.
  std::string from;
  std::string port;
  for (;;) {
    auto line = hold->ReadOutLine(10s);
    ASSERT_TRUE(line) << "the proxy never asked: " << hold->err() << serve_->err();
    auto l = lab::ParseProbeLine(*line);
    ASSERT_TRUE(l.ok()) << *line;
    if ((*l)["query"] != Name("slow")) continue;
    from = (*l)["from"];
    port = (*l)["port"];
    break;
  }
  NodeCounter sprayed(Table(), "input",
                      absl::StrCat("ip saddr ", kSlowUpstream, " ip daddr ", from, " udp sport 53 udp dport ", port,
                                   " iifname \"", lab().pod(1).node_ifname, "\""));
  uint32_t p_ = 0;
  ASSERT_TRUE(absl::SimpleAtoi(port, &p_) && p_ <= 65535) << port;
  const uint16_t p = static_cast<uint16_t>(p_);
  auto eps = maps::DnsEndpoints::Open(Shared().pin_root());
  ASSERT_TRUE(eps.ok()) << eps.status();
  const auto addr = net::IpAddr::Parse(from);
  ASSERT_TRUE(addr.ok()) << from;
  auto guards = eps->UpstreamGuards();
  ASSERT_TRUE(guards.ok()) << guards.status();
  ASSERT_NE(std::find(guards->begin(), guards->end(), std::make_pair(*addr, p)), guards->end())
      << "the asking socket's address and port are guarded in " << EGR_MAP_DNSEP;

  // a. The guard's entry removed: the spray leaves the attacker's pod and
  // arrives at the node, where the socket's interface binding is all that
  // keeps it out (UDP NoPorts).
  ASSERT_TRUE(eps->RemoveUpstreamGuard(*addr, p).ok());
  const uint64_t noports_before = NodeUdpCounter("NoPorts");
  auto forged = Attack(attacker, {"forge", kSlowUpstream, "53", from, port, Name("slow"), kForged}, /*pod=*/1);
  ASSERT_TRUE(eps->AddUpstreamGuard(*addr, p).ok()) << "the guard restored";
  ASSERT_EQ(forged.size(), 1u) << last_;
  EXPECT_ATTEMPTED(forged[0], last_);
  EXPECT_EQ(forged[0]["sent"], "65536") << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return sprayed.Packets() >= 65536; }))
      << "the spray did not reach the node: " << sprayed.Packets() << " packets";
  EXPECT_GE(NodeUdpCounter("NoPorts") - noports_before, 65536u) << "forged datagrams were delivered to a socket";

  // b. With the guard: every forgery dropped in the attacker's own cgroup
  // egress hook (dns_deny), nothing more at the node.
  const uint64_t at_node = sprayed.Packets();
  const uint64_t denied = Counter("dns_deny");
  auto guarded = Attack(attacker, {"forge", kSlowUpstream, "53", from, port, Name("slow"), kForged}, /*pod=*/1);
  ASSERT_EQ(guarded.size(), 1u) << last_;
  EXPECT_ATTEMPTED(guarded[0], last_);
  // Refused at each send: the backstop dropped it in the sender's cgroup
  // egress hook, which a raw socket's send reports as EPERM.
  EXPECT_EQ(guarded[0]["tried"], "65536") << last_;
  EXPECT_EQ(guarded[0]["sent"], "0") << last_;
  EXPECT_EQ(guarded[0]["send_errno"], "EPERM") << last_;
  EXPECT_GE(Counter("dns_deny") - denied, 65536u) << "each forgery refused by the upstream socket's guard";
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(sprayed.Packets(), at_node) << "a guarded forgery reached the node";

  ASSERT_EQ(kill(hold->pid(), SIGUSR1), 0);
  RunResult answer = dig->Wait(window + 20s);
  EXPECT_EQ(FirstLine(answer.out), kRealAnswer) << "the victim's answer: " << answer.Describe();
  EXPECT_EQ(answer.out.find(kForged), std::string::npos) << answer.Describe();
  EXPECT_FALSE(Learned(victim, kForged)) << "a forged answer was learned";
  EXPECT_TRUE(Learned(victim, kRealAnswer)) << "positive control: the real answer was learned";
  EXPECT_EQ(Errno(Connect(victim, kForged)), "EPERM");
}

// 6. Load: rounds of "resolve a unique allowed name through the proxy with
// glibc, then connect at once to the address it returned", each name with an
// address of its own (198.18.0.0/16 is local to the world), so every connect
// depends on that round's learning.  No connect may be refused and no SYN
// retransmitted (the client pod's TCPSynRetrans and RetransSegs, read by the
// client before and after): the map is written before the answer is
// released.  10,000 rounds, scaled down under EGR_TIME_SCALE; the
// assertions are not.
TEST_F(DnsAttack, TenThousandResolveThenConnectRoundsHaveNoRefusalAndNoSynRetransmit) {
  const int rounds = std::max(100, static_cast<int>(10000 / TimeScale()));
  char dir[] = "/run/egr-dnsload-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string hosts = absl::StrCat(dir, "/hosts"), conf = absl::StrCat(dir, "/resolv.conf");
  const std::string config = absl::StrCat(dir, "/egressd.yaml");
  struct Cleanup {
    std::string dir, hosts, conf, config, world;
    ~Cleanup() {
      unlink(hosts.c_str());
      unlink(conf.c_str());
      unlink(config.c_str());
      rmdir(dir.c_str());
      lab::Run(RunSpec{.argv = {"ip", "-n", world, "route", "del", "local", "198.18.0.0/16", "dev", "lo"}});
    }
  } cleanup{dir, hosts, conf, config, lab().world_netns_name()};
  {
    std::ofstream h(hosts);
    for (int i = 0; i < rounds; ++i) h << "198.18." << i / 250 << "." << i % 250 + 1 << " n" << i << "." << Tag() << ".load.test\n";
    std::ofstream(conf) << "nameserver 10.96.0.10\noptions timeout:2 attempts:1\n";
    // Every round learns a new address: the sandbox's quota (default 4096,
    // docs/dns.md "Bounds") must hold them all, or the rounds past it are
    // SERVFAIL by design rather than by a race.
    std::ofstream(config) << "dns:\n  maxAddressesPerSandbox: " << rounds + 100 << "\n";
  }
  RunResult route = lab::Run(
      RunSpec{.argv = {"ip", "-n", lab().world_netns_name(), "route", "add", "local", "198.18.0.0/16", "dev", "lo"}});
  ASSERT_EQ(route.exit_code, 0) << route.Describe();
  RunSpec up{.argv = {"dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
                      "--no-poll", "--bind-interfaces", "--user=root", "--group=root", "--pid-file=",
                      "--log-facility=-", "--port=53", absl::StrCat("--listen-address=", lab::kPublicF4),
                      absl::StrCat("--addn-hosts=", hosts)}};
  up.netns = lab().world_netns();
  up.timeout = 10min;
  auto dnsmasq = lab::Start(up);
  ASSERT_TRUE(dnsmasq.ok()) << dnsmasq.status();
  ASSERT_TRUE(Lab::WaitFor([&] { return absl::StrContains(dnsmasq->err(), absl::StrCat("read ", hosts)); }, 10s))
      << dnsmasq->err();

  // Its own listener on every address of 198.18/16: a backlog the rounds
  // cannot overflow (the lab's port-80 server has 128, and its overflows
  // show as SYN retransmits that are not egressd's).
  RunSpec ls{.argv = {lab::BinaryPath("egr-dns-attack"), "tcp-count", "0.0.0.0", "9080"}};
  ls.netns = lab().world_netns();
  ls.timeout = 10min;
  auto listener = lab::Start(ls);
  ASSERT_TRUE(listener.ok()) << listener.status();
  auto listening = listener->ReadOutLine(10s);
  ASSERT_TRUE(listening && absl::StrContains(*listening, "listening")) << listener->err();

  Sandbox s = Register({"--egress", absl::StrCat("*.", Tag(), ".load.test")});
  Serve({"--upstream-dns", lab::kPublicF4, "--config", config});
  EXPECT_EQ(Errno(Connect(s, "198.18.0.1")), "EPERM") << "before any answer";
  auto world_counter = [&](const char* field) {
    return NetnsCounter(lab().world_netns(), "/proc/net/netstat", "TcpExt", field);
  };
  const uint64_t overflows_before = world_counter("ListenOverflows"), drops_before = world_counter("ListenDrops");
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = InSandbox(s, {"unshare", "--mount", "--", "sh", "-c",
                              absl::StrCat("mount --bind ", conf, " /etc/resolv.conf && exec ",
                                           lab::BinaryPath("egr-dns-attack"), " rounds n .", Tag(), ".load.test 0 ",
                                           rounds, " 9080")},
                          "", 0, 10min);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  auto lines = Lines(r);
  ASSERT_EQ(lines.size(), 1u) << r.Describe();
  ProbeLine& sum = lines[0];
  std::printf("load: %d rounds in %.1f s (%.2f ms per round), slowest %s ms\n", rounds, secs, secs * 1000 / rounds,
              sum["max_round_ms"].c_str());
  EXPECT_EQ(sum["counters_read"], "true") << r.Describe();
  EXPECT_EQ(sum["resolved"], std::to_string(rounds)) << r.Describe();
  EXPECT_EQ(sum["connected"], std::to_string(rounds)) << r.Describe();
  EXPECT_EQ(sum["refused"], "0") << r.Describe();
  EXPECT_EQ(sum["other"], "0") << r.Describe();
  EXPECT_EQ(sum["syn_retrans"], "0") << r.Describe() << " (the lab server's ListenOverflows +"
                                      << world_counter("ListenOverflows") - overflows_before << ", ListenDrops +"
                                      << world_counter("ListenDrops") - drops_before << ")";
  // RetransSegs is reported, not asserted: it counts every retransmitted
  // segment (a FIN under a slow emulated guest, say), which says nothing of
  // whether an answer came before its address was allowed; the SYN count
  // above does (a connect to an address not yet in the map is refused at
  // once, or, under --on-deny drop, shows as a SYN retransmit).
  std::printf("load: RetransSegs +%s (SYN retransmits: %s)\n", sum["retrans_segs"].c_str(), sum["syn_retrans"].c_str());
  // Every round's connection arrived at the listener.
  std::string last;
  for (int i = 0; i < rounds; ++i) {
    auto line = listener->ReadOutLine(10s);
    if (!line) break;
    last = *line;
  }
  EXPECT_TRUE(absl::StrContains(last, absl::StrCat("\"accepted\":", rounds, "}"))) << last;
}

}  // namespace
}  // namespace egressd::test
