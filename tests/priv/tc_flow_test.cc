// Issue 17, per-flow state at the veth (bpf/lib/tc_flow.h): a pod whose
// processes are in no registered cgroup (a stand-in for gVisor's netstack or
// a guest kernel), judged only by the tc programs on the node end of its
// veth.  Inbound TCP connections from peers the policy denies complete while
// the pod itself cannot open one to them; a flow a learned name allowed
// outlives the name's expiry while a new one is refused; one sandbox's full
// quota takes nothing from another, and a flow it cannot hold is judged per
// packet, counted and audited (flow-untracked); a FIN-closed flow leaves by
// the close timeout and an idle one by the idle timeouts.  What arrived is
// counted at the lab hosts (after a Drain) or by the capture; waits are on
// counters, map state or the clock a learned entry expires by, never on a
// sleep.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "egressd_env.h"
#include "maps/flow_table.h"
#include "maps/if_sandbox_table.h"
#include "maps/pinned_maps.h"
#include "maps/resolved_table.h"
#include "userspace/net/ip.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;

uint64_t BootNs() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
}
long long MonoMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

// Runs fn on a thread that entered `netns` (sockets it makes stay there).
template <typename Fn>
void InNetns(const std::string& netns, Fn fn) {
  std::thread t([&] {
    int ns = open(netns.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) {
      ADD_FAILURE() << "setns " << netns << ": " << std::strerror(errno);
      if (ns >= 0) close(ns);
      return;
    }
    close(ns);
    fn();
  });
  t.join();
}

// A socket of the pod's netns the test drives itself (no sandbox cgroup: the
// stand-in for a gVisor or VM workload's connection, judged only at the
// veth), to a lab echo server.  Echo sends `text` and reads it back within
// the deadline.
class PodSocket {
 public:
  PodSocket(const std::string& netns, int type, const char* addr, uint16_t port, std::chrono::milliseconds wait) {
    InNetns(netns, [&] { fd_ = socket(AF_INET, type | SOCK_CLOEXEC, 0); });
    if (fd_ < 0) {
      error_ = absl::StrCat("socket: ", std::strerror(errno));
      return;
    }
    timeval tv{.tv_sec = static_cast<time_t>(wait.count() / 1000),
               .tv_usec = static_cast<suseconds_t>((wait.count() % 1000) * 1000)};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    inet_pton(AF_INET, addr, &sa.sin_addr);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      error_ = absl::StrCat("connect: ", std::strerror(errno));
      close(fd_);
      fd_ = -1;
    }
  }
  ~PodSocket() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }
  bool Echo(const std::string& text) {
    if (send(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
      error_ = absl::StrCat("send: ", std::strerror(errno));
      return false;
    }
    std::string got;
    char buf[256];
    while (got.size() < text.size()) {
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        error_ = n == 0 ? "EOF" : absl::StrCat("recv: ", std::strerror(errno));
        return false;
      }
      got.append(buf, n);
    }
    return got == text;
  }
  // TCP: the FIN (shutdown), then the peer's (recv returns 0).
  bool CloseAndWaitPeer() {
    if (shutdown(fd_, SHUT_WR) != 0) {
      error_ = absl::StrCat("shutdown: ", std::strerror(errno));
      return false;
    }
    char buf[64];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n != 0) error_ = n < 0 ? absl::StrCat("recv: ", std::strerror(errno)) : "data after FIN";
    return n == 0;
  }

 protected:
  int fd_ = -1;
  std::string error_;
};
struct PodTcp : PodSocket {
  PodTcp(const std::string& netns, const char* addr, uint16_t port, std::chrono::milliseconds wait)
      : PodSocket(netns, SOCK_STREAM, addr, port, wait) {}
};
struct PodUdp : PodSocket {
  PodUdp(const std::string& netns, const char* addr, uint16_t port, std::chrono::milliseconds wait)
      : PodSocket(netns, SOCK_DGRAM, addr, port, wait) {}
};

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

class TcFlow : public testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    while (lab().pod_count() < 2) ASSERT_TRUE(lab().AddPod().ok());
    lab().ResetCounters();
  }
  void TearDown() override {
    for (const auto& cg : registered_) Shared().Ctl({"sandbox", "remove", "--cgroup", cg});
    registered_.clear();
    // The node's settings back to the defaults for the next test.
    (void)maps::WriteFlowConfig(Shared().pin_root(), {});
  }
  Lab& lab() { return Shared().lab(); }
  std::string Cgroup() {
    auto cg = lab().MakeCgroup(absl::StrCat("tcflow-", counter_++));
    EXPECT_TRUE(cg.ok()) << cg.status();
    return cg.ok() ? *cg : "";
  }
  static uint64_t SandboxId(const std::string& cg) {
    struct stat st {};
    EXPECT_EQ(stat(cg.c_str(), &st), 0) << cg;
    return st.st_ino;
  }
  // Registered by the pod's netns (its addresses and MAC found: sources
  // checked) or, by_name, by its node-side interface (the crafted frames'
  // MAC is not the pod's); allowed only `args`' and the Drain markers.
  void Add(const std::string& cg, size_t pod, std::vector<std::string> args, bool by_name = false) {
    std::vector<std::string> argv = {"sandbox", "add", "--cgroup", cg};
    if (by_name) {
      argv.insert(argv.end(), {"--interface", lab().pod(pod).node_ifname});
    } else {
      argv.insert(argv.end(), {"--interface-netns", lab().pod(pod).netns});
    }
    argv.insert(argv.end(), args.begin(), args.end());
    for (const char* marker : {kWorldLinkV4, kWorldLinkV6}) argv.insert(argv.end(), {"--egress", marker});
    RunResult r = Shared().Ctl(argv);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    registered_.push_back(cg);
  }
  std::vector<ProbeLine> InPod(size_t index, const std::vector<std::string>& args) {
    RunResult r = lab().ProbeIn(lab().pod(index).netns, args, "", /*hostile=*/true);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    last_ = r.Describe();
    return Lines(r);
  }
  absl::StatusOr<Background> StartInPod(size_t index, const std::vector<std::string>& args) {
    RunSpec spec;
    spec.argv.push_back(BinaryPath("egressd-probe"));
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.netns = lab().pod(index).netns;
    spec.hostile = true;
    spec.timeout = std::chrono::milliseconds(60000);
    return Start(spec);
  }
  std::vector<uint64_t> TcStats() {
    auto s = maps::ReadTcStats(Shared().pin_root());
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : std::vector<uint64_t>(EGR_TC_STAT_MAX);
  }
  egr_flowcnt_val Count(uint64_t sandbox) {
    auto c = maps::ReadFlowCount(Shared().pin_root(), sandbox);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() && c->has_value() ? **c : egr_flowcnt_val{};
  }
  std::vector<std::pair<egr_flow_key, egr_flow_val>> Flows(uint64_t sandbox) {
    auto f = maps::ListFlows(Shared().pin_root(), sandbox);
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? *f : std::vector<std::pair<egr_flow_key, egr_flow_val>>{};
  }
  // A deployment config with only a flows: block.
  std::string FlowConfig(const std::string& body) {
    const std::string path = absl::StrCat(Shared().runtime_dir(), "/tcflow-", counter_++, ".yaml");
    std::ofstream(path) << "flows:\n" << body;
    return path;
  }
  // (sandbox, addr) learned, as the DNS proxy writes it, until `ttl` from
  // now; no keep after it (expiry is final for new flows and sends).
  uint64_t Learn(uint64_t sandbox, const char* addr, std::chrono::milliseconds ttl) {
    auto m = maps::PinnedMaps::Open(Shared().pin_root());
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return 0;
    maps::ResolvedTable table(*m, 0);
    const uint64_t expires = BootNs() + static_cast<uint64_t>(ttl.count()) * 1'000'000ull;
    absl::Status s = table.Learn(sandbox, *net::IpAddr::Parse(addr), expires, 0x7c0ffee);
    EXPECT_TRUE(s.ok()) << s;
    return expires;
  }
  std::chrono::milliseconds Scaled(int ms) { return std::chrono::milliseconds(static_cast<int>(ms * TimeScale())); }

  std::vector<std::string> registered_;
  std::string last_;
  static inline int counter_ = 0;
};

// A connection a peer the policy denies opens to a server in the pod
// completes, both ways; the pod's own SYN to that peer never arrives, and
// its attempt leaves no state behind.
TEST_F(TcFlow, InboundTcpFromADeniedPeerCompletesWhileThePodCannotOpenOne) {
  const std::string cg = Cgroup();
  Add(cg, 0, {"--egress", kPublicA4});
  const uint64_t sb = SandboxId(cg);

  auto own = InPod(0, {"tcp", kPublicB4, "80", "--timeout-ms", "300"});
  ASSERT_EQ(own.size(), 1u) << last_;
  EXPECT_FALSE(Ok(own[0])) << "the pod's own SYN to a denied peer: " << last_;
  EXPECT_TRUE(Flows(sb).empty()) << "the pod's refused SYN recorded nothing";
  const auto before = TcStats();

  // The server: a listening socket of the pod's netns, in no cgroup of a
  // sandbox (the stand-in for a gVisor or VM workload).
  int listener = -1;
  sockaddr_in pod{};
  pod.sin_family = AF_INET;
  pod.sin_port = htons(9000);
  inet_pton(AF_INET, lab().pod(0).v4.c_str(), &pod.sin_addr);
  InNetns(lab().pod(0).netns, [&] {
    listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(listener, reinterpret_cast<sockaddr*>(&pod), sizeof(pod)) != 0 || listen(listener, 4) != 0) {
      ADD_FAILURE() << "listen in the pod: " << std::strerror(errno);
    }
  });
  ASSERT_GE(listener, 0);
  // The peer: the denied lab host B, from the world.
  int client = -1;
  InNetns(lab().world_netns(), [&] {
    client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in b{};
    b.sin_family = AF_INET;
    inet_pton(AF_INET, kPublicB4, &b.sin_addr);
    if (bind(client, reinterpret_cast<sockaddr*>(&b), sizeof(b)) != 0) ADD_FAILURE() << std::strerror(errno);
  });
  ASSERT_GE(client, 0);
  timeval tv{.tv_sec = static_cast<time_t>(std::ceil(3 * TimeScale())), .tv_usec = 0};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&pod), sizeof(pod)), 0)
      << "B's connect to the pod (its SYN-ACK must pass the pod's veth): " << std::strerror(errno);
  pollfd pfd{.fd = listener, .events = POLLIN, .revents = 0};
  ASSERT_EQ(poll(&pfd, 1, static_cast<int>(3000 * TimeScale())), 1);
  const int conn = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(conn, 0) << std::strerror(errno);
  setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ASSERT_EQ(send(client, "ping", 4, 0), 4);
  char buf[16] = {};
  ASSERT_EQ(recv(conn, buf, sizeof(buf), 0), 4);
  ASSERT_EQ(send(conn, "pong-from-pod", 13, 0), 13) << "the pod's data to B";
  ASSERT_EQ(recv(client, buf, sizeof(buf), MSG_WAITALL), 13) << "B receives the pod's data";
  EXPECT_EQ(std::string(buf, 13), "pong-from-pod");

  // The state: one inbound flow, answered, keyed by the pod's side.
  auto flows = Flows(sb);
  ASSERT_EQ(flows.size(), 1u);
  EXPECT_EQ(flows[0].first.proto, IPPROTO_TCP);
  EXPECT_EQ(flows[0].first.pod_port, 9000);
  EXPECT_EQ(flows[0].second.flags & (EGR_FLOW_INBOUND | EGR_FLOW_REPLIED), EGR_FLOW_INBOUND | EGR_FLOW_REPLIED);
  EXPECT_EQ(flows[0].second.reason, EGR_REASON_INBOUND_TCP);
  const auto after = TcStats();
  EXPECT_GE(after[EGR_TC_STAT_FLOW_PASS] - before[EGR_TC_STAT_FLOW_PASS], 2u)
      << "the SYN-ACK and the data passed by the flow, not by the policy";

  // An RST from the peer ends the flow at once (SO_LINGER 0 closes with one).
  const linger lg{.l_onoff = 1, .l_linger = 0};
  setsockopt(client, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(client);
  EXPECT_TRUE(Lab::WaitFor([&] { return Flows(sb).empty(); })) << "the RST ended the flow";
  EXPECT_EQ(Count(sb).flows, 0) << "and gave its room back";
  close(conn);
  close(listener);

  ASSERT_TRUE(lab().Drain(lab().pod(0).netns).ok());
  EXPECT_EQ(lab().FlowsOpenedTo(kPublicB4), 0u) << "the pod's own SYN: " << lab().CountersSummary();
  EXPECT_GE(lab().PacketsTo(kPublicB4, kProtoTcp), 3u)
      << "the SYN-ACK, ACK and data of the inbound connection arrived at B: " << lab().CountersSummary();
}

// ---- crafted frames through the pinned programs -----------------------------
using Bytes = std::vector<uint8_t>;
void Put16(Bytes& b, uint16_t v) {
  b.push_back(v >> 8);
  b.push_back(v & 0xff);
}
void PutAddr4(Bytes& b, const char* a) {
  uint8_t buf[4];
  inet_pton(AF_INET, a, buf);
  b.insert(b.end(), buf, buf + 4);
}
// Ethernet + IPv4 + TCP (flags) or UDP (flags < 0).
Bytes Frame(const char* src, uint16_t sport, const char* dst, uint16_t dport, int tcp_flags) {
  const bool tcp = tcp_flags >= 0;
  Bytes b = {0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2};
  Put16(b, 0x0800);
  b.push_back(0x45);
  b.push_back(0);
  Put16(b, 20 + (tcp ? 20 : 8));
  Put16(b, 1);
  Put16(b, 0);
  b.push_back(64);
  b.push_back(tcp ? 6 : 17);
  Put16(b, 0);
  PutAddr4(b, src);
  PutAddr4(b, dst);
  Put16(b, sport);
  Put16(b, dport);
  if (tcp) {
    b.insert(b.end(), {0, 0, 0, 1, 0, 0, 0, 0, 0x50, static_cast<uint8_t>(tcp_flags), 0xff, 0xff, 0, 0, 0, 0});
  } else {
    Put16(b, 8);
    Put16(b, 0);
  }
  return b;
}
constexpr int kSyn = 0x02, kSynAck = 0x12, kAck = 0x10, kRst = 0x04, kUdp = -1;
// A denied frame from the pod: answered under the default onDeny reject
// (TC_ACT_REDIRECT: the RST or ICMP error goes back into the pod).
constexpr int kRefused = 7;

int TestRun(int prog_fd, uint32_t ifindex, const std::string& node_netns, const Bytes& frame) {
  int ret = -1;
  InNetns(node_netns, [&] {
    __sk_buff ctx{};
    ctx.ifindex = ifindex;
    Bytes out(frame.size() + 256);
    DECLARE_LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = frame.data(), .data_out = out.data(),
                        .data_size_in = static_cast<uint32_t>(frame.size()),
                        .data_size_out = static_cast<uint32_t>(out.size()), .ctx_in = &ctx,
                        .ctx_size_in = sizeof(ctx));
    if (bpf_prog_test_run_opts(prog_fd, &o) != 0) {
      ADD_FAILURE() << "test_run: " << std::strerror(errno);
      return;
    }
    ret = static_cast<int>(o.retval);
  });
  return ret;
}


// Only a SYN going into the pod makes inbound state: the pod can neither
// answer a peer that never called nor make state by what it sends; the
// state is per tuple, a new connection from the pod is the policy's, an RST
// ends it, and UDP from a peer records nothing.
TEST_F(TcFlow, OnlyASynIntoThePodMakesInboundState) {
  const std::string cg = Cgroup();
  Add(cg, 0, {"--egress", kPublicA4}, /*by_name=*/true);
  const uint64_t sb = SandboxId(cg);
  const uint32_t ifindex = lab().NodeIfindex(lab().pod(0).node_ifname);
  ASSERT_NE(ifindex, 0u);
  const int in = bpf_obj_get((Shared().pin_root() + "/progs/egr_tc_ingress").c_str());
  const int out = bpf_obj_get((Shared().pin_root() + "/progs/egr_tc_egress").c_str());
  ASSERT_GE(in, 0) << std::strerror(errno);
  ASSERT_GE(out, 0) << std::strerror(errno);
  const std::string node = lab().node_netns();
  const char* pod = "10.244.0.2";
  ASSERT_EQ(lab().pod(0).v4, pod);
  struct Step {
    const char* what;
    int prog;  // in: the pod sends; out: into the pod
    Bytes frame;
    int tc_act;
  };
  const std::vector<Step> steps = {
      {"the pod's SYN-ACK to a peer that never called", in, Frame(pod, 9000, kPublicB4, 40000, kSynAck), kRefused},
      {"the pod's SYN to a denied peer", in, Frame(pod, 40000, kPublicB4, 9000, kSyn), kRefused},
      {"... after which the peer's SYN-ACK goes in", out, Frame(kPublicB4, 9000, pod, 40000, kSynAck), 0},
      {"... and the pod's ACK is still refused", in, Frame(pod, 40000, kPublicB4, 9000, kAck), kRefused},
      {"a peer's SYN into the pod", out, Frame(kPublicB4, 40001, pod, 9000, kSyn), 0},
      {"the pod's SYN-ACK to it", in, Frame(pod, 9000, kPublicB4, 40001, kSynAck), 0},
      {"the pod's data to it", in, Frame(pod, 9000, kPublicB4, 40001, kAck), 0},
      {"the same from another port of the peer", in, Frame(pod, 9000, kPublicB4, 40002, kAck), kRefused},
      {"a SYN of the pod's on the recorded tuple", in, Frame(pod, 9000, kPublicB4, 40001, kSyn), kRefused},
      {"the peer's RST", out, Frame(kPublicB4, 40001, pod, 9000, kRst), 0},
      {"the pod's data after the RST", in, Frame(pod, 9000, kPublicB4, 40001, kAck), kRefused},
      {"a peer's UDP into the pod", out, Frame(kPublicB4, 5353, pod, 7000, kUdp), 0},
      {"the pod's UDP answer to it", in, Frame(pod, 7000, kPublicB4, 5353, kUdp), kRefused},
  };
  for (const auto& s : steps) EXPECT_EQ(TestRun(s.prog, ifindex, node, s.frame), s.tc_act) << s.what;
  EXPECT_TRUE(Flows(sb).empty()) << "the RST removed the one inbound flow; nothing else was recorded";
  const egr_flowcnt_val c = Count(sb);
  EXPECT_EQ(c.tracked, 1u);
  EXPECT_EQ(c.flows, 0);
  close(in);
  close(out);
}

// A flow a learned name allowed at its first packet outlives the name's
// expiry (TCP, and UDP on the same socket); after the expiry a new
// connection and a new UDP flow to the same address are refused.
TEST_F(TcFlow, LearnedFlowOutlivesItsEntryWhileNewOnesAreRefused) {
  const std::string cg = Cgroup();
  Add(cg, 0, {"--egress", kPublicA4});
  const uint64_t sb = SandboxId(cg);
  const auto ttl = Scaled(1500);
  const uint64_t expires = Learn(sb, kPublicC4, ttl);
  const long long expires_mono = MonoMs() + (static_cast<long long>(expires - BootNs()) / 1'000'000);
  const auto before = TcStats();

  const int rounds = static_cast<int>(std::ceil(45 * TimeScale()));
  auto hold = StartInPod(0, {"hold", kPublicC4, "80", "--interval-ms", "100", "--count", std::to_string(rounds)});
  ASSERT_TRUE(hold.ok()) << hold.status();
  auto pace = StartInPod(0, {"udp-pace", kPublicC4, "7001", "--interval-ms", "100", "--count",
                             std::to_string(rounds)});
  ASSERT_TRUE(pace.ok()) << pace.status();
  auto first = hold->ReadOutLine(Scaled(3000));
  ASSERT_TRUE(first.has_value()) << hold->err();
  auto connected = ParseProbeLine(*first);
  ASSERT_TRUE(connected.ok() && Ok(*connected)) << *first << " " << hold->err();
  ASSERT_TRUE(Lab::WaitFor([&] { return Count(sb).flows == 2; }, Scaled(3000)))
      << "the TCP and the UDP flow are tracked: " << Count(sb).flows;
  for (const auto& [k, v] : Flows(sb)) EXPECT_EQ(v.reason, EGR_REASON_RESOLVED);
  ASSERT_LT(MonoMs(), expires_mono) << "too slow a start for the TTL (raise EGR_TIME_SCALE)";

  // The learned entry expires (its clock, not a sleep).
  ASSERT_TRUE(Lab::WaitFor([&] { return BootNs() > expires; }, ttl + Scaled(1000)));
  auto fresh = InPod(0, {"tcp", kPublicC4, "80", "--timeout-ms", "300", "--then", "udp-sendto", kPublicC4, "7000"});
  ASSERT_EQ(fresh.size(), 2u) << last_;
  EXPECT_FALSE(Ok(fresh[0])) << "a new connection after the expiry: " << last_;
  const long long refused_at = MonoMs();

  RunResult h = hold->Wait(Scaled(30000));
  RunResult p = pace->Wait(Scaled(30000));
  auto hl = Lines(h);
  ASSERT_EQ(hl.size(), static_cast<size_t>(rounds)) << h.Describe();
  for (auto& l : hl) EXPECT_TRUE(Ok(l)) << "round " << l["round"] << ": " << h.Describe();
  EXPECT_GT(std::stoll(hl.back()["start_ms"]), refused_at) << "the flow lived on after a new one was refused";
  auto pl = Lines(p);
  ASSERT_EQ(pl.size(), static_cast<size_t>(rounds)) << p.Describe();
  EXPECT_GT(std::stoll(pl.back()["start_ms"]), refused_at);

  ASSERT_TRUE(lab().Drain(lab().pod(0).netns).ok());
  EXPECT_EQ(lab().TcpAccepts(kPublicC4, 80), 1u) << "the held connection only: " << lab().CountersSummary();
  EXPECT_EQ(lab().UdpDatagrams(kPublicC4, 7001), static_cast<uint64_t>(rounds))
      << "every datagram of the UDP flow arrived: " << lab().CountersSummary();
  EXPECT_EQ(lab().UdpDatagrams(kPublicC4, 7000), 0u) << "the new UDP flow: " << lab().CountersSummary();
  const auto after = TcStats();
  EXPECT_GT(after[EGR_TC_STAT_FLOW_PASS], before[EGR_TC_STAT_FLOW_PASS]);
}

// Sandbox A fills its quota: its next flow is not tracked (counted), and
// judged per packet it ends with the learned entry (fail closed), while
// sandbox B's flow, begun after A's quota was full, outlives the expiry.
TEST_F(TcFlow, OneSandboxsFullQuotaTakesNothingFromAnother) {
  const std::string config = FlowConfig("  maxPerSandbox: 3\n");
  const std::string a = Cgroup(), b = Cgroup();
  Add(a, 0, {"--egress", kPublicA4, "--config", config});
  Add(b, 1, {"--egress", kPublicA4, "--config", config});
  const uint64_t sa = SandboxId(a), sb = SandboxId(b);
  const auto ttl = Scaled(2000);
  const uint64_t expires = Learn(sa, kPublicC4, ttl);
  Learn(sb, kPublicC4, ttl);
  const auto before = TcStats();

  // A: three UDP flows (three sockets) fill the quota.
  auto fill = InPod(0, {"udp-sendto", kPublicC4, "7000", "--then", "udp-sendto", kPublicC4, "7000", "--then",
                        "udp-sendto", kPublicC4, "7000"});
  ASSERT_EQ(fill.size(), 3u) << last_;
  ASSERT_TRUE(Lab::WaitFor([&] { return Count(sa).flows == 3; })) << Count(sa).flows;
  // A's fourth flow: over quota, so judged per packet.
  const int rounds = static_cast<int>(std::ceil(45 * TimeScale()));
  auto over = StartInPod(0, {"udp-pace", kPublicC4, "7001", "--interval-ms", "100", "--count",
                             std::to_string(rounds)});
  ASSERT_TRUE(over.ok()) << over.status();
  ASSERT_TRUE(Lab::WaitFor([&] { return Count(sa).refused_quota >= 1; })) << Count(sa).refused_quota;
  EXPECT_EQ(Count(sa).flows, 3) << "nothing evicted, nothing over the quota";
  // B, after A is full: tracked all the same.
  auto hold = StartInPod(1, {"hold", kPublicC4, "80", "--interval-ms", "100", "--count", std::to_string(rounds)});
  ASSERT_TRUE(hold.ok()) << hold.status();
  auto first = hold->ReadOutLine(Scaled(3000));
  ASSERT_TRUE(first.has_value()) << hold->err();
  ASSERT_TRUE(Lab::WaitFor([&] { return Count(sb).flows == 1; })) << Count(sb).flows;
  EXPECT_EQ(Count(sb).refused_quota, 0u);

  ASSERT_TRUE(Lab::WaitFor([&] { return BootNs() > expires; }, ttl + Scaled(1000)));
  const long long expired_at = MonoMs();
  RunResult h = hold->Wait(Scaled(30000));
  RunResult o = over->Wait(Scaled(30000));
  auto hl = Lines(h);
  ASSERT_EQ(hl.size(), static_cast<size_t>(rounds)) << h.Describe();
  for (auto& l : hl) EXPECT_TRUE(Ok(l)) << "B's round " << l["round"] << ": " << h.Describe();
  EXPECT_GT(std::stoll(hl.back()["start_ms"]), expired_at + 500) << "B's flow lived on past the expiry";
  // A's untracked datagrams sent after the expiry: not one arrived.
  uint64_t before_expiry = 0;
  for (auto& l : Lines(o)) before_expiry += std::stoll(l["start_ms"]) < expired_at - 200;
  ASSERT_TRUE(lab().Drain(lab().pod(0).netns).ok());
  ASSERT_TRUE(lab().Drain(lab().pod(1).netns).ok());
  const uint64_t arrived = lab().UdpDatagrams(kPublicC4, 7001);
  EXPECT_GE(arrived, before_expiry) << lab().CountersSummary();
  EXPECT_LT(arrived, static_cast<uint64_t>(rounds)) << "A's untracked flow ended with the learned entry: "
                                                    << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(kPublicC4, 80), 1u) << lab().CountersSummary();
  const auto after = TcStats();
  EXPECT_GE(after[EGR_TC_STAT_FLOW_UNTRACKED] - before[EGR_TC_STAT_FLOW_UNTRACKED], 1u);

  // And audited (docs/audit.md, tc records): A's untracked flow as `tc`
  // records of reason flow-untracked (a pass: the packet itself was the
  // policy's to judge), its UDP packets folded per destination into the
  // window's summary; B, never over its quota, has none.
  const uint32_t ifindex = lab().NodeIfindex(lab().pod(0).node_ifname);
  uint64_t untracked = 0;
  nlohmann::json record;
  ASSERT_TRUE(Lab::WaitFor(
      [&] {
        for (const auto& j : AuditOf(sa)) {
          if (j.value("type", "") != "tc" || j.value("reason", "") != "flow-untracked") continue;
          untracked += j.value("count", 0);
          record = j;
        }
        return untracked >= 1;
      },
      Scaled(8000)))
      << "no flow-untracked record of sandbox " << sa;
  EXPECT_EQ(record["verdict"], "allow") << record.dump();
  EXPECT_EQ(record["action"], "pass") << record.dump();
  EXPECT_EQ(record["sandbox"]["id"], sa) << record.dump();
  EXPECT_EQ(record["interface"]["index"], ifindex) << record.dump();
  EXPECT_EQ(record["interface"]["name"], lab().pod(0).node_ifname) << record.dump();
  EXPECT_EQ(record["IP"]["destination"], kPublicC4) << record.dump();
  EXPECT_EQ(record["l4"]["UDP"]["destination_port"], 7001) << record.dump();
  EXPECT_FALSE(record.contains("process")) << record.dump();
  for (const auto& j : AuditOf(sb)) EXPECT_NE(j.value("reason", ""), "flow-untracked") << j.dump();
}

// A TCP flow a learned name allowed, closed by a FIN from each side after it
// lived past its first timer: its entry goes on the transitory (close)
// timeout, never the idle one, and leaves the table by it.  Before the close the flow passed after its learned
// entry expired; after it, nothing of the tuple passes and a new connection
// is refused.
TEST_F(TcFlow, FinClosedFlowLeavesTheTableByTheCloseTimeout) {
  const int transitory_s = static_cast<int>(std::ceil(2 * TimeScale()));
  const std::string config = FlowConfig(absl::StrCat("  tcpTransitorySeconds: ", transitory_s, "\n"));
  const std::string cg = Cgroup();
  Add(cg, 0, {"--egress", kPublicA4, "--config", config});
  const uint64_t sb = SandboxId(cg);
  const auto ttl = Scaled(1000);
  const uint64_t expires = Learn(sb, kPublicC4, ttl);
  const auto before = TcStats();

  PodTcp conn(lab().pod(0).netns, kPublicC4, 80, Scaled(2000));
  ASSERT_TRUE(conn.ok()) << conn.error();
  ASSERT_TRUE(conn.Echo("before-expiry")) << conn.error();
  ASSERT_TRUE(Lab::WaitFor([&] { return BootNs() > expires; }, ttl + Scaled(1000)));
  ASSERT_TRUE(conn.Echo("after-expiry")) << "the flow passes after its learned entry expired: " << conn.error();
  EXPECT_GT(TcStats()[EGR_TC_STAT_FLOW_PASS], before[EGR_TC_STAT_FLOW_PASS]);
  auto flows = Flows(sb);
  ASSERT_EQ(flows.size(), 1u);
  const egr_flow_key key = flows[0].first;
  EXPECT_EQ(flows[0].second.flags & EGR_FLOW_CLOSING, 0) << "open: on the idle timeout";
  // The connection outlives the transitory timeout its entry's timer was
  // first armed for (at the SYN): the timer has since been re-armed for the
  // idle one (an hour), and the close must shorten it again.
  const uint64_t created = flows[0].second.created_ns;
  ASSERT_TRUE(Lab::WaitFor([&] { return BootNs() > created + (transitory_s + 1) * 1'000'000'000ull; },
                           std::chrono::seconds(transitory_s + 2)));
  ASSERT_TRUE(conn.Echo("past-the-first-timer")) << "still open: " << conn.error();
  ASSERT_EQ(Flows(sb).size(), 1u);

  // The pod's FIN; the lab server answers EOF with its own.
  ASSERT_TRUE(conn.CloseAndWaitPeer()) << conn.error();
  flows = Flows(sb);
  ASSERT_EQ(flows.size(), 1u) << "closed, the flow waits out its close timeout";
  EXPECT_NE(flows[0].second.flags & EGR_FLOW_CLOSING, 0) << "the FIN put it on the transitory timeout";
  const long long closed_at = MonoMs();
  ASSERT_TRUE(Lab::WaitFor([&] { return Flows(sb).empty(); }, Scaled(2000) + std::chrono::seconds(transitory_s)))
      << "still there after the close timeout";
  EXPECT_GE(MonoMs() - closed_at, transitory_s * 1000 - 1000) << "left before its close timeout";
  EXPECT_EQ(Count(sb).flows, 0);

  // Nothing of the tuple passes now (a segment of it, through the pinned
  // program), and a new connection is refused.
  const int in = bpf_obj_get((Shared().pin_root() + "/progs/egr_tc_ingress").c_str());
  ASSERT_GE(in, 0) << std::strerror(errno);
  EXPECT_EQ(TestRun(in, lab().NodeIfindex(lab().pod(0).node_ifname), lab().node_netns(),
                    Frame(lab().pod(0).v4.c_str(), key.pod_port, kPublicC4, 80, kAck)),
            kRefused)
      << "a segment of the closed flow";
  close(in);
  auto fresh = InPod(0, {"tcp", kPublicC4, "80", "--timeout-ms", "300"});
  ASSERT_EQ(fresh.size(), 1u) << last_;
  EXPECT_FALSE(Ok(fresh[0])) << "a new connection after the close: " << last_;
  ASSERT_TRUE(lab().Drain(lab().pod(0).netns).ok());
  EXPECT_EQ(lab().TcpAccepts(kPublicC4, 80), 1u) << "the first connection only: " << lab().CountersSummary();
  EXPECT_EQ(lab().FlowsOpenedTo(kPublicC4), 1u) << "the refused SYN never arrived: " << lab().CountersSummary();
}

// The idle timeouts (flows.tcpIdleSeconds, flows.udpIdleSeconds) end a
// learned flow nothing is sent on: both pass after the learned entry's
// expiry while active, both leave the table once idle, and what the pod then
// sends on the same sockets never arrives.
TEST_F(TcFlow, IdleFlowsExpireByTheirIdleTimeouts) {
  const int idle_s = static_cast<int>(std::ceil(3 * TimeScale()));
  const std::string config =
      FlowConfig(absl::StrCat("  tcpIdleSeconds: ", idle_s, "\n  udpIdleSeconds: ", idle_s, "\n"));
  const std::string cg = Cgroup();
  Add(cg, 0, {"--egress", kPublicA4, "--config", config});
  const uint64_t sb = SandboxId(cg);
  const auto ttl = Scaled(1000);
  const uint64_t expires = Learn(sb, kPublicC4, ttl);

  PodTcp tcp(lab().pod(0).netns, kPublicC4, 80, Scaled(1000));
  ASSERT_TRUE(tcp.ok()) << tcp.error();
  PodUdp udp(lab().pod(0).netns, kPublicC4, 7000, Scaled(1000));
  ASSERT_TRUE(udp.ok()) << udp.error();
  ASSERT_TRUE(tcp.Echo("one")) << tcp.error();
  ASSERT_TRUE(udp.Echo("one")) << udp.error();
  ASSERT_TRUE(Lab::WaitFor([&] { return BootNs() > expires; }, ttl + Scaled(1000)));
  // Active past the expiry: both flows pass (the positive control).
  ASSERT_TRUE(tcp.Echo("two")) << "TCP after the expiry: " << tcp.error();
  ASSERT_TRUE(udp.Echo("two")) << "UDP after the expiry: " << udp.error();
  const long long active_at = MonoMs();
  auto flows = Flows(sb);
  ASSERT_EQ(flows.size(), 2u);
  for (const auto& [k, v] : flows) {
    if (k.proto == IPPROTO_TCP) {
      EXPECT_NE(v.flags & EGR_FLOW_REPLIED, 0) << "answered: on tcpIdleSeconds";
    }
  }
  ASSERT_TRUE(lab().Drain(lab().pod(0).netns).ok());
  const uint64_t tcp_before = lab().PacketsTo(kPublicC4, kProtoTcp);
  ASSERT_EQ(lab().UdpDatagrams(kPublicC4, 7000), 2u) << lab().CountersSummary();

  // Idle: both leave by their timers, not before the timeout.
  ASSERT_TRUE(Lab::WaitFor([&] { return Flows(sb).empty(); }, std::chrono::seconds(idle_s) + Scaled(3000)))
      << "idle flows still tracked: " << [&] {
           std::string out;
           for (const auto& [k, v] : Flows(sb)) {
             out += absl::StrCat(" proto ", k.proto, " flags ", v.flags, " idle ms ", (BootNs() - v.last_ns) / 1000000);
           }
           return out;
         }();
  EXPECT_GE(MonoMs() - active_at, idle_s * 1000 - 1000) << "gone before the idle timeout";
  EXPECT_EQ(Count(sb).flows, 0);
  EXPECT_FALSE(tcp.Echo("three")) << "TCP after its idle expiry";
  EXPECT_FALSE(udp.Echo("three")) << "UDP after its idle expiry";
  ASSERT_TRUE(lab().Drain(lab().pod(0).netns).ok());
  EXPECT_EQ(lab().PacketsTo(kPublicC4, kProtoTcp), tcp_before)
      << "no segment of the idle TCP flow arrived (retransmissions included): " << lab().CountersSummary();
  EXPECT_EQ(lab().UdpDatagrams(kPublicC4, 7000), 2u) << "the idle UDP flow's datagram: " << lab().CountersSummary();
}

// Removing a sandbox takes its flows and counts with it (timers cancelled):
// nothing of it is left for a later registration of the same id.
TEST_F(TcFlow, RemovalForgetsTheSandboxsFlows) {
  const std::string cg = Cgroup();
  Add(cg, 0, {"--egress", kPublicA4});
  const uint64_t sb = SandboxId(cg);
  Learn(sb, kPublicC4, Scaled(10000));
  auto l = InPod(0, {"udp-sendto", kPublicC4, "7000"});
  ASSERT_EQ(l.size(), 1u) << last_;
  ASSERT_TRUE(Lab::WaitFor([&] { return Count(sb).flows == 1; })) << Count(sb).flows;
  ASSERT_EQ(Flows(sb).size(), 1u);
  RunResult rm = Shared().Ctl({"sandbox", "remove", "--cgroup", cg});
  ASSERT_EQ(rm.exit_code, 0) << rm.Describe();
  registered_.clear();
  EXPECT_TRUE(Flows(sb).empty());
  auto c = maps::ReadFlowCount(Shared().pin_root(), sb);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->has_value());
}

}  // namespace
}  // namespace egressd::test
