// Issue 17: onDeny at a sandbox's veth, and the tc program's audit records.
// The pod's processes are in no registered cgroup (a netstack or a guest in
// their place): only the tc program on the node end of the veth judges them,
// and a denial comes back as a RST (TCP) or ICMP administratively prohibited
// (anything else), rate-limited per sandbox; onDeny drop drops.  Every
// "nothing arrived" is counted at the lab hosts after a Drain, next to an
// allowed destination of the same probe that did arrive.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "egressd_env.h"
#include "maps/egressd_abi.h"
#include "maps/if_sandbox_table.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;
using Bytes = std::vector<uint8_t>;

constexpr int kTcActShot = 2;
constexpr int kTcActRedirect = 7;

std::vector<uint64_t> TcStats() {
  auto s = maps::ReadTcStats(Shared().pin_root());
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : std::vector<uint64_t>(EGR_TC_STAT_MAX, 0);
}

// A counter of the pod's own kernel (/proc/net/snmp or snmp6 read in its
// netns): what it received, whatever a socket made of it.
uint64_t PodSnmp(const std::string& netns, const std::string& file, const std::string& group,
                 const std::string& name) {
  RunSpec spec;
  spec.argv = {"cat", file};
  spec.netns = netns;
  RunResult r = lab::Run(spec);
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n');
  if (file.find("snmp6") != std::string::npos) {
    for (const auto& l : lines) {
      std::istringstream in(l);
      std::string k;
      uint64_t v = 0;
      if (in >> k >> v && k == name) return v;
    }
    ADD_FAILURE() << name << " not in " << file;
    return 0;
  }
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    std::vector<std::string> keys = absl::StrSplit(lines[i], ' ', absl::SkipEmpty());
    std::vector<std::string> vals = absl::StrSplit(lines[i + 1], ' ', absl::SkipEmpty());
    if (keys.empty() || keys[0] != group + ":" || keys.size() != vals.size() || vals[0] != keys[0]) continue;
    for (size_t k = 1; k < keys.size(); ++k) {
      uint64_t v = 0;
      if (keys[k] == name && absl::SimpleAtoi(vals[k], &v)) return v;
    }
  }
  ADD_FAILURE() << group << " " << name << " not in " << file;
  return 0;
}


class TcReject : public testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    lab().ResetCounters();
  }
  void TearDown() override {
    for (const auto& cg : registered_) Shared().Ctl({"sandbox", "remove", "--cgroup", cg});
    registered_.clear();
  }
  Lab& lab() { return Shared().lab(); }
  // An empty cgroup: the sandbox's identity, with no process of the pod in it.
  std::string Cgroup() {
    auto cg = lab().MakeCgroup(absl::StrCat("tcrej-", counter_++));
    EXPECT_TRUE(cg.ok()) << cg.status();
    return cg.ok() ? *cg : "";
  }
  static uint64_t SandboxId(const std::string& cg) {
    struct stat st {};
    EXPECT_EQ(stat(cg.c_str(), &st), 0) << cg;
    return st.st_ino;
  }
  // Pod 0 registered by its interface: A (v4 and v6) allowed, the rest
  // denied, with the lab's Drain markers allowed (tc_veth_test says why).
  RunResult Add(const std::string& cg, std::vector<std::string> args = {}) {
    std::vector<std::string> argv = {"sandbox", "add", "--cgroup", cg, "--interface", lab().pod(0).node_ifname,
                                     "--egress", kPublicA4, "--egress", kPublicA6, "--label", "pod=tc-reject"};
    for (const char* marker : {lab::kWorldLinkV4, lab::kWorldLinkV6}) argv.insert(argv.end(), {"--egress", marker});
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = Shared().Ctl(argv);
    if (r.exit_code == 0) registered_.push_back(cg);
    return r;
  }
  std::vector<ProbeLine> InPod(const std::vector<std::string>& args) {
    RunResult r = lab().ProbeIn(lab().pod(0).netns, args, "", /*hostile=*/true);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    last_ = r.Describe();
    return Lines(r);
  }
  static long Ms(const ProbeLine& l) {
    auto it = l.find("ms");
    long v = -1;
    if (it != l.end()) absl::SimpleAtoi(it->second, &v);
    return v;
  }
  static std::string Field(const ProbeLine& l, const std::string& k) {
    auto it = l.find(k);
    return it == l.end() ? "" : it->second;
  }
  std::vector<std::string> registered_;
  std::string last_;
  static inline int counter_ = 0;
};

// A denied connect fails at once with ECONNREFUSED: the RST came from the
// veth (its counter), the SYN never reached the lab host, and the same probe
// reached the allowed host.  Unregistered, the same connect succeeds (the
// denied host is there and listening).
TEST_F(TcReject, DeniedTcpConnectIsRefusedAtOnceByARst) {
  auto before = InPod({"tcp", kPublicB4, "80"});
  ASSERT_EQ(before.size(), 1u) << last_;
  ASSERT_TRUE(Ok(before[0])) << "unregistered, B is reachable: " << last_;
  lab().ResetCounters();

  const std::string cg = Cgroup();
  RunResult add = Add(cg);
  ASSERT_EQ(add.exit_code, 0) << add.Describe();
  const auto s0 = TcStats();
  const uint64_t fails0 = PodSnmp(lab().pod(0).netns, "/proc/net/snmp", "Tcp", "AttemptFails");
  auto l = InPod({"tcp", kPublicA4, "80", "--then", "tcp", kPublicB4, "80", "--timeout-ms", "5000", "--then", "tcp",
                  kPublicB6, "443", "--timeout-ms", "5000"});
  ASSERT_EQ(l.size(), 3u) << last_;
  EXPECT_TRUE(Ok(l[0])) << "allowed: " << last_;
  for (int i : {1, 2}) {
    EXPECT_EQ(Errno(l[i]), "ECONNREFUSED") << last_;
    EXPECT_EQ(Field(l[i], "stage"), "connect") << last_;
    // Answered at the first SYN: the first retransmission would be 1 s
    // later, a drop would be the 5 s deadline.
    EXPECT_GE(Ms(l[i]), 0) << last_;
    EXPECT_LT(Ms(l[i]), 500 * TimeScale()) << last_;
    RecordProperty(absl::StrCat("refused_ms_", i), static_cast<int>(Ms(l[i])));
  }
  const auto s1 = TcStats();
  EXPECT_EQ(s1[EGR_TC_STAT_REJECT_RST] - s0[EGR_TC_STAT_REJECT_RST], 2u);
  EXPECT_EQ(s1[EGR_TC_STAT_REJECT_ICMP] - s0[EGR_TC_STAT_REJECT_ICMP], 0u);
  EXPECT_GE(s1[EGR_TC_STAT_DROP] - s0[EGR_TC_STAT_DROP], 2u);
  EXPECT_EQ(PodSnmp(lab().pod(0).netns, "/proc/net/snmp", "Tcp", "AttemptFails") - fails0, 2u)
      << "the pod's kernel took both RSTs";
  if (absl::Status d = lab().Drain(lab().pod(0).netns); !d.ok()) FAIL() << d;
  EXPECT_EQ(lab().TcpAccepts(kPublicA4, 80), 1u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kPublicB4), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kPublicB6), 0u) << lab().CountersSummary();
}

// The node's metrics carry the tc program's counters (egressd_tc_frames_total
// by outcome), the only kernel figures that see a veth pod's frames: a pass
// and two rejected SYNs move them by exactly what the map counted.
uint64_t MetricSample(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, series) || !absl::ConsumePrefix(&line, " ")) continue;
    uint64_t v = 0;
    EXPECT_TRUE(absl::SimpleAtoi(line, &v)) << line;
    return v;
  }
  ADD_FAILURE() << series << " not in the metrics:\n" << text;
  return 0;
}

TEST_F(TcReject, TheMetricsCountTheVethsFramesByOutcome) {
  const std::string cg = Cgroup();
  ASSERT_EQ(Add(cg).exit_code, 0) << last_;
  RunResult m0 = Shared().Ctl({"metrics"});
  ASSERT_EQ(m0.exit_code, 0) << m0.Describe();
  const auto s0 = TcStats();
  auto l = InPod({"tcp", kPublicA4, "80", "--then", "tcp", kPublicB4, "80", "--timeout-ms", "5000", "--then", "tcp",
                  kPublicB6, "443", "--timeout-ms", "5000"});
  ASSERT_EQ(l.size(), 3u) << last_;
  EXPECT_TRUE(Ok(l[0])) << last_;
  const auto s1 = TcStats();
  RunResult m1 = Shared().Ctl({"metrics"});
  ASSERT_EQ(m1.exit_code, 0) << m1.Describe();
  const std::string rst = "egressd_tc_frames_total{outcome=\"reject-rst\"}";
  const std::string deny = "egressd_tc_frames_total{outcome=\"deny\"}";
  const std::string pass = "egressd_tc_frames_total{outcome=\"pass\"}";
  EXPECT_EQ(MetricSample(m0.out, rst), s0[EGR_TC_STAT_REJECT_RST]);
  EXPECT_EQ(MetricSample(m1.out, rst) - MetricSample(m0.out, rst), 2u) << "the two refused SYNs";
  EXPECT_GE(MetricSample(m1.out, deny) - MetricSample(m0.out, deny), 2u);
  EXPECT_GE(MetricSample(m1.out, pass), s1[EGR_TC_STAT_PASS]) << "counted since the map was read";
  EXPECT_GT(MetricSample(m1.out, pass), MetricSample(m0.out, pass)) << "the allowed connect's frames";
  for (const char* outcome : {"spoofed", "frame-dropped", "neighbour", "flow-untracked", "reject-limited"}) {
    MetricSample(m1.out, absl::StrCat("egressd_tc_frames_total{outcome=\"", outcome, "\"}"));
  }
}

// A denied datagram on a connected socket: the ICMP error reaches the
// socket (v4 "communication administratively prohibited" is EHOSTUNREACH,
// ICMPv6 "administratively prohibited" EACCES) and the pod's kernel counted
// one destination-unreachable per family; the allowed one was echoed.
TEST_F(TcReject, DeniedUdpGetsAdministrativelyProhibited) {
  const std::string cg = Cgroup();
  ASSERT_EQ(Add(cg).exit_code, 0) << last_;
  const std::string& ns = lab().pod(0).netns;
  const uint64_t in4 = PodSnmp(ns, "/proc/net/snmp", "Icmp", "InDestUnreachs");
  const uint64_t in6 = PodSnmp(ns, "/proc/net/snmp6", "", "Icmp6InDestUnreachs");
  const uint64_t bad4 = PodSnmp(ns, "/proc/net/snmp", "Icmp", "InCsumErrors");
  const auto s0 = TcStats();
  auto l = InPod({"udp-connected", kPublicA4, "7000", "--wait-ms", "1000", "--then", "udp-connected", kPublicB4,
                  "7000", "--wait-ms", "1000", "--then", "udp-connected", kPublicB6, "7001", "--wait-ms", "1000"});
  ASSERT_EQ(l.size(), 3u) << last_;
  EXPECT_TRUE(Ok(l[0]) && Field(l[0], "echo") == "true") << "allowed: " << last_;
  EXPECT_EQ(Field(l[0], "recv_errno"), "") << last_;
  EXPECT_TRUE(Ok(l[1])) << "the send itself succeeds: " << last_;
  EXPECT_EQ(Field(l[1], "recv_errno"), "EHOSTUNREACH") << last_;
  EXPECT_EQ(Field(l[2], "recv_errno"), "EACCES") << last_;
  const auto s1 = TcStats();
  EXPECT_EQ(s1[EGR_TC_STAT_REJECT_ICMP] - s0[EGR_TC_STAT_REJECT_ICMP], 2u);
  EXPECT_EQ(PodSnmp(ns, "/proc/net/snmp", "Icmp", "InDestUnreachs") - in4, 1u);
  EXPECT_EQ(PodSnmp(ns, "/proc/net/snmp6", "", "Icmp6InDestUnreachs") - in6, 1u);
  EXPECT_EQ(PodSnmp(ns, "/proc/net/snmp", "Icmp", "InCsumErrors") - bad4, 0u);
  if (absl::Status d = lab().Drain(ns); !d.ok()) FAIL() << d;
  EXPECT_EQ(lab().UdpDatagrams(kPublicA4, 7000), 1u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kPublicB4), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kPublicB6), 0u) << lab().CountersSummary();
}

// onDeny drop: the same denials vanish.  The connect times out at the
// probe's own deadline, the datagram's socket hears nothing, no answer was
// counted, and still nothing arrived.
TEST_F(TcReject, OnDenyDropTimesOutInstead) {
  const std::string cg = Cgroup();
  ASSERT_EQ(Add(cg, {"--on-deny", "drop"}).exit_code, 0) << last_;
  const auto s0 = TcStats();
  auto l = InPod({"tcp", kPublicA4, "80", "--then", "tcp", kPublicB4, "80", "--timeout-ms", "1500", "--then",
                  "udp-connected", kPublicB4, "7000", "--wait-ms", "800"});
  ASSERT_EQ(l.size(), 3u) << last_;
  EXPECT_TRUE(Ok(l[0])) << last_;
  EXPECT_EQ(Errno(l[1]), "ETIMEDOUT") << last_;
  EXPECT_GE(Ms(l[1]), 1400) << last_;
  EXPECT_TRUE(Ok(l[2])) << last_;
  EXPECT_EQ(Field(l[2], "recv_errno"), "") << "no ICMP error: " << last_;
  const auto s1 = TcStats();
  EXPECT_EQ(s1[EGR_TC_STAT_REJECT_RST] - s0[EGR_TC_STAT_REJECT_RST], 0u);
  EXPECT_EQ(s1[EGR_TC_STAT_REJECT_ICMP] - s0[EGR_TC_STAT_REJECT_ICMP], 0u);
  EXPECT_GE(s1[EGR_TC_STAT_DROP] - s0[EGR_TC_STAT_DROP], 2u) << "it reached the hook";
  if (absl::Status d = lab().Drain(lab().pod(0).netns); !d.ok()) FAIL() << d;
  EXPECT_EQ(lab().TcpAccepts(kPublicA4, 80), 1u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kPublicB4), 0u) << lab().CountersSummary();
}

// A flood of denied datagrams is not a flood of answers: every one of them
// is either answered or counted as limited, the answers stay within the
// sandbox's bucket (EGR_TC_REJECT_BURST at once, EGR_TC_REJECT_RATE_PER_S
// after, plus one per CPU racing), and the pod's kernel received exactly
// the answers counted.
TEST_F(TcReject, AnswersToAFloodStayWithinTheBucket) {
  const std::string cg = Cgroup();
  ASSERT_EQ(Add(cg).exit_code, 0) << last_;
  const std::string& ns = lab().pod(0).netns;
  constexpr int kFlood = 2000;
  const uint64_t in0 = PodSnmp(ns, "/proc/net/snmp", "Icmp", "InDestUnreachs");
  const auto s0 = TcStats();
  const auto start = std::chrono::steady_clock::now();
  auto l = InPod({"udp-burst", kPublicB4, "7000", std::to_string(kFlood)});
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(l.size(), 1u) << last_;
  ASSERT_EQ(Field(l[0], "sent"), std::to_string(kFlood)) << last_;
  const auto s1 = TcStats();
  const uint64_t answered = s1[EGR_TC_STAT_REJECT_ICMP] - s0[EGR_TC_STAT_REJECT_ICMP];
  const uint64_t limited = s1[EGR_TC_STAT_REJECT_LIMITED] - s0[EGR_TC_STAT_REJECT_LIMITED];
  RecordProperty("answered", static_cast<int>(answered));
  RecordProperty("limited", static_cast<int>(limited));
  RecordProperty("flood_ms", static_cast<int>(elapsed_s * 1000));
  EXPECT_EQ(answered + limited, static_cast<uint64_t>(kFlood)) << answered << " answered, " << limited << " limited";
  EXPECT_GE(answered, 1u);
  const double bound = EGR_TC_REJECT_BURST + EGR_TC_REJECT_RATE_PER_S * elapsed_s +
                       std::thread::hardware_concurrency();
  EXPECT_LE(static_cast<double>(answered), bound) << "in " << elapsed_s << " s";
  EXPECT_EQ(PodSnmp(ns, "/proc/net/snmp", "Icmp", "InDestUnreachs") - in0, answered);
  if (absl::Status d = lab().Drain(ns); !d.ok()) FAIL() << d;
  EXPECT_EQ(lab().PacketsTo(kPublicB4), 0u) << lab().CountersSummary();
  // Another sandbox's bucket is its own: pod 0 re-registered under a new
  // sandbox is answered at once though the first one's bucket is empty.
  ASSERT_EQ(Shared().Ctl({"sandbox", "remove", "--cgroup", cg}).exit_code, 0);
  registered_.clear();
  const std::string other = Cgroup();
  ASSERT_EQ(Add(other).exit_code, 0) << last_;
  auto again = InPod({"tcp", kPublicB4, "80", "--timeout-ms", "3000"});
  ASSERT_EQ(again.size(), 1u) << last_;
  EXPECT_EQ(Errno(again[0]), "ECONNREFUSED") << last_;
}

std::vector<nlohmann::json> AuditOf(uint64_t id) {
  RunResult a = Shared().Ctl({"audit", "--sandbox", std::to_string(id)});
  EXPECT_EQ(a.exit_code, 0) << a.Describe();
  std::vector<nlohmann::json> out;
  std::istringstream in(a.out);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.push_back(j);
  }
  return out;
}

// Every tc denial is on the record as a `tc` record naming the sandbox (its
// labels) and the interface (index and name); an enforced sandbox's passes
// are not (a strict one's are, below).
TEST_F(TcReject, TcDecisionsAreAuditedWithSandboxAndInterface) {
  const std::string cg = Cgroup();
  ASSERT_EQ(Add(cg).exit_code, 0) << last_;
  const uint64_t id = SandboxId(cg);
  const uint32_t ifindex = lab().NodeIfindex(lab().pod(0).node_ifname);
  ASSERT_NE(ifindex, 0u);
  auto l = InPod({"tcp", kPublicA4, "80", "--then", "tcp", kPublicB4, "80", "--timeout-ms", "3000", "--then",
                  "udp-connected", kPublicB6, "7001", "--then", "tcp", kImds4, "80", "--timeout-ms", "3000"});
  ASSERT_EQ(l.size(), 4u) << last_;
  std::map<std::string, nlohmann::json> tc;
  for (const auto& j : AuditOf(id)) {
    if (j.value("type", "") != "tc") continue;
    tc[j["IP"].value("destination", "")] = j;
  }
  ASSERT_TRUE(tc.count(kPublicB4) && tc.count(kPublicB6) && tc.count(kImds4)) << tc.size();
  EXPECT_FALSE(tc.count(kPublicA4)) << "a pass of an enforced sandbox: " << tc[kPublicA4].dump();
  for (const char* dst : {kPublicB4, kPublicB6, kImds4}) {
    const auto& j = tc[dst];
    EXPECT_EQ(j["verdict"], "deny") << j.dump();
    EXPECT_EQ(j["action"], "reject") << j.dump();
    EXPECT_EQ(j["sandbox"]["id"], id) << j.dump();
    EXPECT_EQ(j["sandbox"]["labels"]["pod"], "tc-reject") << j.dump();
    EXPECT_EQ(j["interface"]["index"], ifindex) << j.dump();
    EXPECT_EQ(j["interface"]["name"], lab().pod(0).node_ifname) << j.dump();
    EXPECT_FALSE(j.contains("process")) << j.dump();
  }
  EXPECT_EQ(tc[kPublicB4]["reason"], "default-deny");
  EXPECT_EQ(tc[kPublicB4]["l4"]["TCP"]["destination_port"], 80);
  EXPECT_EQ(tc[kPublicB6]["l4"]["UDP"]["destination_port"], 7001);
  EXPECT_EQ(tc[kImds4]["reason"], "protected");
  EXPECT_TRUE(tc[kImds4].contains("match")) << tc[kImds4].dump();
}

// A strict sandbox's passes at the veth are on the record too: its allowed
// connect's SYN as a record, its allowed datagrams folded per destination.
TEST_F(TcReject, StrictSandboxPassesAreRecorded) {
  const std::string cg = Cgroup();
  RunResult add = Add(cg, {"--strict-audit"});
  ASSERT_EQ(add.exit_code, 0) << add.Describe();
  const uint64_t id = SandboxId(cg);
  auto l = InPod({"tcp", kPublicA4, "443", "--then", "udp-sendto", kPublicA4, "7001", "--then", "udp-sendto",
                  kPublicA4, "7001"});
  ASSERT_EQ(l.size(), 3u) << last_;
  EXPECT_TRUE(Ok(l[0])) << last_;
  uint64_t syn = 0, udp = 0;
  // The folded datagrams are a summary at the end of a window: read until
  // it is there (each read closes what it can).
  ASSERT_TRUE(Lab::WaitFor(
      [&] {
        for (const auto& j : AuditOf(id)) {
          if (j.value("type", "") != "tc" || j.value("verdict", "") != "allow") continue;
          if (j["l4"].contains("TCP") && j["l4"]["TCP"].value("destination_port", 0) == 443) syn += j.value("count", 0);
          if (j["l4"].contains("UDP") && j["l4"]["UDP"].value("destination_port", 0) == 7001) udp += j.value("count", 0);
        }
        return syn >= 1 && udp >= 2;
      },
      std::chrono::milliseconds(static_cast<int>(8000 * TimeScale()))))
      << "syn " << syn << " udp " << udp;
  EXPECT_EQ(syn, 1u);
  EXPECT_EQ(udp, 2u);
}

// ---- BPF_PROG_TEST_RUN: the answers' bytes ----------------------------------
void Put16(Bytes& b, uint16_t v) {
  b.push_back(v >> 8);
  b.push_back(v & 0xff);
}
void Put32(Bytes& b, uint32_t v) {
  Put16(b, v >> 16);
  Put16(b, v & 0xffff);
}
void PutAddr(Bytes& b, const char* a) {
  uint8_t buf[16];
  if (inet_pton(AF_INET, a, buf) == 1) {
    b.insert(b.end(), buf, buf + 4);
    return;
  }
  inet_pton(AF_INET6, a, buf);
  b.insert(b.end(), buf, buf + 16);
}
const Bytes kPodMac = {0x02, 0, 0, 0, 0, 2}, kNodeMac = {0x02, 0, 0, 0, 0, 1};
Bytes Eth(uint16_t proto, const Bytes& dst = kNodeMac) {
  Bytes b = dst;
  b.insert(b.end(), kPodMac.begin(), kPodMac.end());
  Put16(b, proto);
  return b;
}
Bytes Tcp(uint16_t dport, uint8_t flags, uint32_t seq, uint32_t ack, size_t payload = 0) {
  Bytes b;
  Put16(b, 40000);
  Put16(b, dport);
  Put32(b, seq);
  Put32(b, ack);
  b.push_back(5 << 4);
  b.push_back(flags);
  Put16(b, 64240);
  Put16(b, 0x1234);  // not checked by anyone: a partial checksum, say
  Put16(b, 0);
  b.resize(b.size() + payload, 'x');
  return b;
}
Bytes Udp(uint16_t dport, size_t payload = 4) {
  Bytes b;
  Put16(b, 40000);
  Put16(b, dport);
  Put16(b, 8 + payload);
  Put16(b, 0);
  b.resize(b.size() + payload, 'u');
  return b;
}
Bytes V4(const char* src, const char* dst, uint8_t proto, const Bytes& l4, uint16_t frag = 0,
         const Bytes& dmac = kNodeMac) {
  Bytes b = Eth(0x0800, dmac);
  b.push_back(0x45);
  b.push_back(0);
  Put16(b, 20 + l4.size());
  Put16(b, 7);
  Put16(b, frag);
  b.push_back(64);
  b.push_back(proto);
  Put16(b, 0);
  PutAddr(b, src);
  PutAddr(b, dst);
  b.insert(b.end(), l4.begin(), l4.end());
  return b;
}
Bytes V6(const char* src, const char* dst, uint8_t next, const Bytes& l4) {
  Bytes b = Eth(0x86DD);
  b.insert(b.end(), {0x60, 0, 0, 0});
  Put16(b, l4.size());
  b.push_back(next);
  b.push_back(64);
  PutAddr(b, src);
  PutAddr(b, dst);
  b.insert(b.end(), l4.begin(), l4.end());
  return b;
}

uint32_t Sum(const uint8_t* p, size_t n, uint32_t s = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) s += (p[i] << 8) | p[i + 1];
  if (n % 2) s += p[n - 1] << 8;
  return s;
}
bool ChecksumOk(uint32_t s) {
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return s == 0xffff;
}
uint16_t Get16(const Bytes& b, size_t off) { return (b[off] << 8) | b[off + 1]; }
uint32_t Get32(const Bytes& b, size_t off) { return (uint32_t{Get16(b, off)} << 16) | Get16(b, off + 2); }

struct RunOut {
  int retval = -1;
  int err = 0;
  Bytes out;
};

RunOut TestRun(int prog_fd, uint32_t ifindex, const std::string& node_netns, const Bytes& frame) {
  RunOut r;
  std::thread t([&] {
    int ns = open(node_netns.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) {
      r.err = errno;
      if (ns >= 0) close(ns);
      return;
    }
    close(ns);
    __sk_buff ctx{};
    ctx.ifindex = ifindex;
    Bytes out(frame.size() + 512);
    DECLARE_LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = frame.data(), .data_out = out.data(),
                        .data_size_in = static_cast<uint32_t>(frame.size()),
                        .data_size_out = static_cast<uint32_t>(out.size()), .ctx_in = &ctx,
                        .ctx_size_in = sizeof(ctx));
    if (bpf_prog_test_run_opts(prog_fd, &o) != 0) {
      r.err = errno;
      return;
    }
    r.retval = static_cast<int>(o.retval);
    out.resize(o.data_size_out);
    r.out = std::move(out);
  });
  t.join();
  return r;
}

// The answer's Ethernet header goes back to the pod from the node.
void ExpectEthBack(const Bytes& a, uint16_t proto, const std::string& what) {
  ASSERT_GE(a.size(), 14u) << what;
  EXPECT_EQ(Bytes(a.begin(), a.begin() + 6), kPodMac) << what;
  EXPECT_EQ(Bytes(a.begin() + 6, a.begin() + 12), kNodeMac) << what;
  EXPECT_EQ(Get16(a, 12), proto) << what;
}

class TcRejectFrames : public TcReject {
 protected:
  void SetUp() override {
    TcReject::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(Add(Cgroup()).exit_code, 0) << last_;
    ifindex_ = lab().NodeIfindex(lab().pod(0).node_ifname);
    ASSERT_NE(ifindex_, 0u);
    const std::string pin = Shared().pin_root() + "/progs/egr_tc_ingress";
    prog_ = bpf_obj_get(pin.c_str());
    ASSERT_GE(prog_, 0) << pin << ": " << std::strerror(errno);
  }
  void TearDown() override {
    if (prog_ >= 0) close(prog_);
    TcReject::TearDown();
  }
  RunOut Run(const Bytes& frame) { return TestRun(prog_, ifindex_, lab().node_netns(), frame); }
  uint32_t ifindex_ = 0;
  int prog_ = -1;
};

TEST_F(TcRejectFrames, RstAnswersASynAndASegmentAsRfc9293Says) {
  const std::string pod4 = lab().pod(0).v4, pod6 = lab().pod(0).v6;
  // A SYN (no ACK): RST|ACK, seq 0, ack = its seq + 1.
  Bytes syn = V4(pod4.c_str(), kPublicB4, 6, Tcp(80, 0x02, 1000, 0));
  RunOut r = Run(syn);
  ASSERT_EQ(r.retval, kTcActRedirect) << r.err;
  const Bytes& a = r.out;
  ExpectEthBack(a, 0x0800, "v4 RST");
  ASSERT_EQ(a.size(), 14u + 20 + 20);
  EXPECT_EQ(a[14], 0x45);
  EXPECT_EQ(Get16(a, 16), 40);
  EXPECT_EQ(a[23], 6);
  EXPECT_TRUE(ChecksumOk(Sum(&a[14], 20))) << "IPv4 header checksum";
  EXPECT_EQ(Bytes(a.begin() + 26, a.begin() + 30), Bytes(syn.begin() + 30, syn.begin() + 34)) << "from B";
  EXPECT_EQ(Bytes(a.begin() + 30, a.begin() + 34), Bytes(syn.begin() + 26, syn.begin() + 30)) << "to the pod";
  EXPECT_EQ(Get16(a, 34), 80);
  EXPECT_EQ(Get16(a, 36), 40000);
  EXPECT_EQ(Get32(a, 38), 0u);
  EXPECT_EQ(Get32(a, 42), 1001u);
  EXPECT_EQ(a[47], 0x14) << "RST|ACK";
  {
    Bytes ph(a.begin() + 26, a.begin() + 34);
    ph.insert(ph.end(), {0, 6, 0, 20});
    EXPECT_TRUE(ChecksumOk(Sum(&a[34], 20, Sum(ph.data(), ph.size())))) << "TCP checksum";
  }
  // A data segment with ACK (v6): RST, seq = its ack, no ACK.
  Bytes seg = V6(pod6.c_str(), kPublicB6, 6, Tcp(443, 0x18, 5000, 777777, 100));
  r = Run(seg);
  ASSERT_EQ(r.retval, kTcActRedirect) << r.err;
  const Bytes& b = r.out;
  ExpectEthBack(b, 0x86DD, "v6 RST");
  ASSERT_EQ(b.size(), 14u + 40 + 20);
  EXPECT_EQ(Get16(b, 18), 20);
  EXPECT_EQ(b[20], 6);
  EXPECT_EQ(Bytes(b.begin() + 22, b.begin() + 38), Bytes(seg.begin() + 38, seg.begin() + 54));
  EXPECT_EQ(Bytes(b.begin() + 38, b.begin() + 54), Bytes(seg.begin() + 22, seg.begin() + 38));
  EXPECT_EQ(Get32(b, 54 + 4), 777777u);
  EXPECT_EQ(b[54 + 13], 0x04) << "RST only";
  {
    Bytes ph(b.begin() + 22, b.begin() + 54);
    ph.insert(ph.end(), {0, 0, 0, 20, 0, 0, 0, 6});
    EXPECT_TRUE(ChecksumOk(Sum(&b[54], 20, Sum(ph.data(), ph.size())))) << "TCP checksum over the v6 pseudo-header";
  }
  // A FIN without ACK with data: ack = seq + data + 1.
  r = Run(V4(pod4.c_str(), kPublicB4, 6, Tcp(80, 0x01, 10, 0, 7)));
  ASSERT_EQ(r.retval, kTcActRedirect);
  EXPECT_EQ(Get32(r.out, 42), 18u);
}

TEST_F(TcRejectFrames, IcmpErrorsQuoteTheDeniedPacket) {
  const std::string pod4 = lab().pod(0).v4, pod6 = lab().pod(0).v6;
  Bytes u4 = V4(pod4.c_str(), kPublicB4, 17, Udp(7000, 300));
  RunOut r = Run(u4);
  ASSERT_EQ(r.retval, kTcActRedirect) << r.err;
  const Bytes& a = r.out;
  ExpectEthBack(a, 0x0800, "ICMP");
  ASSERT_EQ(a.size(), 14u + 20 + 8 + EGR_TC_REJECT_QUOTE);
  EXPECT_EQ(Get16(a, 16), 20 + 8 + EGR_TC_REJECT_QUOTE);
  EXPECT_EQ(a[23], 1);
  EXPECT_TRUE(ChecksumOk(Sum(&a[14], 20)));
  EXPECT_EQ(Bytes(a.begin() + 26, a.begin() + 30), Bytes(u4.begin() + 30, u4.begin() + 34));
  EXPECT_EQ(Bytes(a.begin() + 30, a.begin() + 34), Bytes(u4.begin() + 26, u4.begin() + 30));
  EXPECT_EQ(a[34], 3) << "destination unreachable";
  EXPECT_EQ(a[35], 13) << "communication administratively prohibited";
  EXPECT_TRUE(ChecksumOk(Sum(&a[34], a.size() - 34))) << "ICMP checksum";
  EXPECT_EQ(Bytes(a.begin() + 42, a.end()), Bytes(u4.begin() + 14, u4.begin() + 14 + EGR_TC_REJECT_QUOTE))
      << "the quote is the packet's start";
  // A short one is quoted whole (an odd length: the checksum pads it).
  Bytes small = V4(pod4.c_str(), kPublicB4, 17, Udp(7000, 5));
  r = Run(small);
  ASSERT_EQ(r.retval, kTcActRedirect);
  ASSERT_EQ(r.out.size(), 14u + 20 + 8 + 33);
  EXPECT_TRUE(ChecksumOk(Sum(&r.out[34], r.out.size() - 34)));
  EXPECT_EQ(Bytes(r.out.begin() + 42, r.out.end()), Bytes(small.begin() + 14, small.end()));
  // ICMPv6 over its pseudo-header.
  Bytes u6 = V6(pod6.c_str(), kPublicB6, 17, Udp(7001, 9));
  r = Run(u6);
  ASSERT_EQ(r.retval, kTcActRedirect);
  const Bytes& b = r.out;
  ExpectEthBack(b, 0x86DD, "ICMPv6");
  const size_t q = u6.size() - 14;
  ASSERT_EQ(b.size(), 14 + 40 + 8 + q);
  EXPECT_EQ(Get16(b, 18), 8 + q);
  EXPECT_EQ(b[20], 58);
  EXPECT_EQ(b[54], 1);
  EXPECT_EQ(b[55], 1);
  {
    Bytes ph(b.begin() + 22, b.begin() + 54);
    ph.insert(ph.end(), {0, 0, static_cast<uint8_t>((8 + q) >> 8), static_cast<uint8_t>(8 + q), 0, 0, 0, 58});
    EXPECT_TRUE(ChecksumOk(Sum(&b[54], b.size() - 54, Sum(ph.data(), ph.size())))) << "ICMPv6 checksum";
  }
  EXPECT_EQ(Bytes(b.begin() + 62, b.end()), Bytes(u6.begin() + 14, u6.end()));
  // An ICMP echo request to a denied host is answered too (it is no error).
  Bytes echo = {8, 0, 0, 0, 0, 1, 0, 1};
  EXPECT_EQ(Run(V4(pod4.c_str(), kPublicB4, 1, echo)).retval, kTcActRedirect);
}

// What is never answered, only dropped: errors, RSTs, spoofed sources,
// later fragments, multicast and broadcast, loopback; and onDeny drop.
TEST_F(TcRejectFrames, ErrorsResetsSpoofsFragmentsAndMulticastAreNotAnswered) {
  const std::string pod4 = lab().pod(0).v4, pod6 = lab().pod(0).v6;
  const auto s0 = TcStats();
  const Bytes unreach = {3, 1, 0, 0, 0, 0, 0, 0};
  const Bytes unreach6 = {1, 0, 0, 0, 0, 0, 0, 0};
  struct Case {
    const char* name;
    Bytes frame;
  };
  const std::vector<Case> cases = {
      {"an ICMP error", V4(pod4.c_str(), kPublicB4, 1, unreach)},
      {"an ICMPv6 error", V6(pod6.c_str(), kPublicB6, 58, unreach6)},
      {"a RST", V4(pod4.c_str(), kPublicB4, 6, Tcp(80, 0x04, 1, 0))},
      {"a RST|ACK", V6(pod6.c_str(), kPublicB6, 6, Tcp(80, 0x14, 1, 2))},
      {"another pod's source", V4("10.244.0.77", kPublicB4, 6, Tcp(80, 0x02, 1, 0))},
      {"an outside source", V4("192.0.2.99", kPublicB4, 17, Udp(7000))},
      {"a later fragment", V4(pod4.c_str(), kPublicB4, 17, Udp(7000), 0x00b9)},
      {"multicast", V4(pod4.c_str(), "239.1.2.3", 17, Udp(7000))},
      {"broadcast", V4(pod4.c_str(), "255.255.255.255", 17, Udp(7000))},
      {"a link-layer broadcast", V4(pod4.c_str(), kPublicB4, 17, Udp(7000), 0, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff})},
      {"v6 multicast", V6(pod6.c_str(), "ff0e::1", 17, Udp(7000))},
      {"loopback", V4(pod4.c_str(), "127.0.0.1", 17, Udp(7000))},
  };
  for (const auto& c : cases) {
    RunOut r = Run(c.frame);
    EXPECT_EQ(r.retval, kTcActShot) << c.name << " (errno " << r.err << ")";
  }
  const auto s1 = TcStats();
  EXPECT_EQ(s1[EGR_TC_STAT_REJECT_RST] - s0[EGR_TC_STAT_REJECT_RST], 0u);
  EXPECT_EQ(s1[EGR_TC_STAT_REJECT_ICMP] - s0[EGR_TC_STAT_REJECT_ICMP], 0u);
  EXPECT_EQ(s1[EGR_TC_STAT_REJECT_LIMITED] - s0[EGR_TC_STAT_REJECT_LIMITED], 0u) << "not even asked";
  // The positive control, same program, same sandbox: answered.
  EXPECT_EQ(Run(V4(pod4.c_str(), kPublicB4, 17, Udp(7000))).retval, kTcActRedirect);
}

}  // namespace
}  // namespace egressd::test
