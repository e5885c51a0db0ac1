// The DNS proxy's upstream sockets are out of every sandbox's reach (issue
// 14), on the node-routed lab with the real proxy (`egressctl dns serve` in
// the node netns, the daemon's DnsHost).
//
// The attack: a resolver on the node itself (its uplink address, port 53:
// a host resolver, or a node-local cache), reached over `lo`, holds its
// answer (the window is real); a hostile sandbox in the node's netns, root
// with only CAP_NET_RAW, registered by cgroup with a default-allow policy,
// told the exact port the proxy asks from (the strongest attacker), sprays an
// answer for every ID 0-65535 with the resolver's address and port as source
// and its own address in the A record, on an IPPROTO_RAW socket.  Its packets
// go over `lo` too, so the proxy's socket, bound to `lo` (the interface its
// upstream is routed over), matches them: binding to the interface is no
// guard here.
//
//   - Without the guard (its entry removed from egr_dnsep_v1 for the round)
//     the attack works: the node delivers the forgery with the query's ID to
//     the proxy's socket, c-ares takes it as the answer (the rest of the spray
//     then finds the socket closed: NoPorts), the victim pod is answered the
//     forged address and it is learned into its map.
//   - With the guard (the socket's address and port in egr_dnsep_v1, owned
//     by no sandbox, written before connect()): every forged datagram is
//     dropped in the attacker's own cgroup egress hook (dns_deny counts all
//     65536, the node's UDP layer sees none), the victim gets the real
//     answer and the forged address is never learned.
//   - Positive controls: the same attacker's allowed traffic to the node's
//     address (another port) still leaves; the proxy still resolves.
//   - The guards follow the sockets: one per open upstream socket (in use or
//     ready), at the address and port the resolver saw, gone when the proxy
//     is stopped; a killed proxy's are removed by the next start.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
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
#include "maps/dns_endpoints.h"
#include "maps/egressd_abi.h"
#include "maps/resolved_table.h"
#include "userspace/net/ip.h"

#include <bpf/bpf.h>

namespace egressd::test {
namespace {

using namespace std::chrono_literals;
using lab::Lab;
using lab::ProbeLine;
using lab::RunResult;
using lab::RunSpec;

constexpr const char* kNodeResolver = lab::kNodeUplinkV4;  // 203.0.113.1: the node's own address
constexpr const char* kRealAnswer = lab::kPublicA4;        // 192.0.2.10
constexpr const char* kForged = lab::kPublicB4;            // 192.0.2.11: the attacker's address

std::string Name(const std::string& what) { return absl::StrCat(what, "-r", getpid(), ".guard.test"); }
std::string FirstLine(const std::string& s) {
  return std::string(absl::StripAsciiWhitespace(s.substr(0, s.find('\n'))));
}

// A counter of the node netns's /proc/net/snmp "Udp" lines.
uint64_t NodeUdp(const std::string& field) {
  RunSpec spec{.argv = {"sh", "-c", "while read -r l; do case $l in Udp:*) echo \"$l\";; esac; done < /proc/net/snmp"}};
  spec.netns = Shared().lab().node_netns();
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

class UpstreamGuard : public ::testing::Test {
 protected:
  void SetUp() override { EGR_REQUIRE_PRIVILEGES(); }
  void TearDown() override {
    if (serve_) serve_->Stop();
    if (hold_) hold_->Stop();
    sandboxes_.RemoveAll();
  }
  Lab& lab() { return Shared().lab(); }

  // The slow resolver on the node: holds every query for `name`.
  void StartHold(const std::string& name) {
    RunSpec hs{.argv = {lab::BinaryPath("egr-dns-attack"), "hold-server", kNodeResolver, "53", name, kRealAnswer}};
    hs.netns = lab().node_netns();
    hs.timeout = 5min;
    auto hold = lab::Start(hs);
    ASSERT_TRUE(hold.ok()) << hold.status();
    hold_ = std::move(*hold);
    auto listening = hold_->ReadOutLine(10s);
    ASSERT_TRUE(listening && absl::StrContains(*listening, "listening")) << hold_->err();
  }
  // The proxy's question for `name`, held: where it came from.
  std::pair<std::string, std::string> HeldQuestion(const std::string& name) {
    for (;;) {
      auto line = hold_->ReadOutLine(Scaled(10s));
      if (!line) {
        ADD_FAILURE() << "the proxy never asked: " << hold_->err() << (serve_ ? serve_->err() : "");
        return {};
      }
      auto l = lab::ParseProbeLine(*line);
      if (!l.ok() || (*l)["query"] != name) continue;
      return {(*l)["from"], (*l)["port"]};
    }
  }
  // A dig of `name` from pod 0 in `victim`, started (it waits for the hold).
  absl::StatusOr<lab::Background> Ask(const DnsSandbox& victim, const std::string& name) {
    RunSpec ask{.argv = {"dig", "+short", absl::StrCat("+time=", Window().count() / 1000 + 5), "+tries=1", "@8.8.8.8",
                         name}};
    ask.netns = lab().pod(0).netns;
    ask.cgroup = victim.cgroup;
    ask.timeout = Window() + 20s;
    return lab::Start(ask);
  }
  // egr-dns-attack from the hostile sandbox in the node's netns.
  std::vector<ProbeLine> FromNodeSandbox(const DnsSandbox& s, const std::vector<std::string>& args,
                                         const std::string& tool = "egr-dns-attack") {
    std::vector<std::string> argv = {"setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all", "--",
                                     lab::BinaryPath(tool)};
    argv.insert(argv.end(), args.begin(), args.end());
    RunSpec spec;
    spec.argv = std::move(argv);
    spec.netns = lab().node_netns();
    spec.cgroup = s.cgroup;
    spec.timeout = Scaled(30s);
    RunResult r = lab::Run(spec);
    last_ = r.Describe();
    return Lines(r);
  }
  bool Learned(const DnsSandbox& s, const std::string& addr) {
    int fd = bpf_obj_get((Shared().pin_root() + "/" EGR_MAP_RESOLVED).c_str());
    EXPECT_GE(fd, 0) << "open pinned " << EGR_MAP_RESOLVED;
    if (fd < 0) return false;
    maps::ResolvedTable table(fd);
    auto got = table.Get(s.id, *net::IpAddr::Parse(addr));
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
  std::vector<std::pair<net::IpAddr, uint16_t>> Guards() {
    auto eps = maps::DnsEndpoints::Open(Shared().pin_root());
    EXPECT_TRUE(eps.ok()) << eps.status();
    if (!eps.ok()) return {};
    auto g = eps->UpstreamGuards();
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? *g : std::vector<std::pair<net::IpAddr, uint16_t>>{};
  }
  static std::chrono::milliseconds Scaled(std::chrono::milliseconds d) {
    return std::chrono::milliseconds(static_cast<int64_t>(d.count() * TimeScale()));
  }
  static std::chrono::milliseconds Window() { return Scaled(20s); }

  DnsSandboxes sandboxes_{"upguard-"};
  std::optional<lab::Background> serve_, hold_;
  std::string last_;
};

TEST_F(UpstreamGuard, ForgedAnswersFromASandboxOnTheUpstreamsOwnPathAreDroppedInTheKernel) {
  DnsSandbox attacker = sandboxes_.Add({"--floor", "connected"}, /*pod_endpoint=*/false);
  DnsSandbox victim1 = sandboxes_.Add({"--egress", Name("open")});
  DnsSandbox victim2 = sandboxes_.Add({"--egress", Name("guarded")});
  ASSERT_NE(victim1.port, 0);
  ASSERT_NE(victim2.port, 0);
  // The proxy waits for the held answer far longer than a spray takes.
  auto serve = ServeDns({"--upstream-dns", kNodeResolver, "--upstream-timeout-ms", std::to_string(Window().count()),
                         "--upstream-tries", "1"});
  ASSERT_TRUE(serve.ok()) << serve.status();
  serve_ = std::move(*serve);

  // Round 1, the guard removed: the attack reaches the socket.
  StartHold(Name("open"));
  auto dig1 = Ask(victim1, Name("open"));
  ASSERT_TRUE(dig1.ok()) << dig1.status();
  auto [from1, port1] = HeldQuestion(Name("open"));
  ASSERT_EQ(from1, kNodeResolver) << "the proxy's socket is bound to its route's source address";
  uint32_t p1_ = 0;
  ASSERT_TRUE(absl::SimpleAtoi(port1, &p1_) && p1_ <= 65535) << port1;
  const uint16_t p1 = static_cast<uint16_t>(p1_);
  auto eps = maps::DnsEndpoints::Open(Shared().pin_root());
  ASSERT_TRUE(eps.ok()) << eps.status();
  const auto guards = Guards();
  const std::pair<net::IpAddr, uint16_t> socket1{*net::IpAddr::Parse(kNodeResolver), p1};
  ASSERT_NE(std::find(guards.begin(), guards.end(), socket1), guards.end())
      << "the asking socket is guarded while it waits";
  ASSERT_TRUE(eps->RemoveUpstreamGuard(socket1.first, socket1.second).ok());
  const uint64_t in_before = NodeUdp("InDatagrams"), noports_before = NodeUdp("NoPorts");
  // (Not restored: the poisoned query's socket is closed by then.)
  auto open = FromNodeSandbox(attacker, {"forge", kNodeResolver, "53", from1, port1, Name("open"), kForged});
  ASSERT_EQ(open.size(), 1u) << last_;
  EXPECT_ATTEMPTED(open[0], last_);
  EXPECT_EQ(open[0]["sent"], "65536") << last_;
  ASSERT_EQ(kill(hold_->pid(), SIGUSR1), 0);
  RunResult poisoned = dig1->Wait(Window() + 20s);
  // The forgery with the query's ID reached the proxy's socket: c-ares took
  // it as the answer and closed the socket, so the rest of the spray found no
  // socket (NoPorts).
  EXPECT_GE(NodeUdp("InDatagrams") - in_before, 1u) << "no forged datagram was delivered to a socket";
  EXPECT_GT(NodeUdp("NoPorts") - noports_before, 0u) << "the spray did not arrive at the node's UDP layer";
  EXPECT_EQ(FirstLine(poisoned.out), kForged) << "without the guard the attack works: " << poisoned.Describe();
  EXPECT_TRUE(Learned(victim1, kForged)) << "without the guard the forged address is learned";
  hold_->Stop();
  hold_.reset();

  // Round 2, guarded: dropped in the attacker's own egress hook.
  StartHold(Name("guarded"));
  auto dig2 = Ask(victim2, Name("guarded"));
  ASSERT_TRUE(dig2.ok()) << dig2.status();
  auto [from2, port2] = HeldQuestion(Name("guarded"));
  ASSERT_EQ(from2, kNodeResolver);
  uint32_t p2_ = 0;
  ASSERT_TRUE(absl::SimpleAtoi(port2, &p2_) && p2_ <= 65535) << port2;
  const uint16_t p2 = static_cast<uint16_t>(p2_);
  const auto guards2 = Guards();
  ASSERT_NE(std::find(guards2.begin(), guards2.end(), std::make_pair(*net::IpAddr::Parse(kNodeResolver), p2)),
            guards2.end())
      << "the new socket is guarded before it asks";
  const uint64_t denied = Counter("dns_deny");
  const uint64_t in2 = NodeUdp("InDatagrams"), noports2 = NodeUdp("NoPorts");
  auto guarded = FromNodeSandbox(attacker, {"forge", kNodeResolver, "53", from2, port2, Name("guarded"), kForged});
  ASSERT_EQ(guarded.size(), 1u) << last_;
  EXPECT_ATTEMPTED(guarded[0], last_);
  // Refused at each send: the backstop dropped it in the sender's cgroup
  // egress hook, which a raw socket's send reports as EPERM.
  EXPECT_EQ(guarded[0]["tried"], "65536") << last_;
  EXPECT_EQ(guarded[0]["sent"], "0") << last_;
  EXPECT_EQ(guarded[0]["send_errno"], "EPERM") << last_;
  EXPECT_GE(Counter("dns_deny") - denied, 65536u) << "each forgery refused by the guard (dns_deny)";
  EXPECT_LT(NodeUdp("InDatagrams") - in2, 100u) << "forged datagrams reached the node's UDP layer";
  EXPECT_LT(NodeUdp("NoPorts") - noports2, 100u);
  ASSERT_EQ(kill(hold_->pid(), SIGUSR1), 0);
  RunResult answer = dig2->Wait(Window() + 20s);
  EXPECT_EQ(FirstLine(answer.out), kRealAnswer) << "the proxy still resolves: " << answer.Describe();
  EXPECT_FALSE(Learned(victim2, kForged)) << "a forged answer was learned";
  EXPECT_TRUE(Learned(victim2, kRealAnswer)) << "positive control: the real answer was learned";

  // Positive control: the attacker's allowed traffic to the node's address
  // on another port still leaves its sandbox (nothing listens: refused by
  // the node, not by egressd).
  const uint64_t denied_before_control = Counter("dns_deny");
  auto control = FromNodeSandbox(attacker, {"batch", absl::StrCat("tcp ", kNodeResolver, " 9")}, "egressd-probe");
  ASSERT_EQ(control.size(), 1u) << last_;
  EXPECT_EQ(Errno(control[0]), "ECONNREFUSED") << last_;
  EXPECT_EQ(Counter("dns_deny"), denied_before_control);

  // The guards follow the sockets.  Stopped (SIGTERM), the proxy removes
  // every guard of its own, its ready sockets' too; none is left.
  auto ours = [&] {
    std::vector<uint16_t> ports;
    for (const auto& [addr, port] : Guards()) {
      if (addr.ToString() == kNodeResolver) ports.push_back(port);
    }
    return ports;
  };
  EXPECT_FALSE(ours().empty()) << "the proxy's ready sockets wait guarded";
  ASSERT_EQ(kill(serve_->pid(), SIGTERM), 0);
  RunResult stopped = serve_->Wait(Scaled(20s));
  serve_.reset();
  EXPECT_EQ(stopped.exit_code, 0) << stopped.Describe();
  EXPECT_EQ(absl::StrJoin(ours(), " "), "") << "a guard outlived its socket (these ports)";

  // Killed (SIGKILL), it leaves the guards of the sockets it had open (its
  // ready ones, prepared after a query); the next start removes them, as no
  // socket holds their port.
  auto again = ServeDns({"--upstream-dns", kNodeResolver, "--upstream-tries", "1"});
  ASSERT_TRUE(again.ok()) << again.status();
  serve_ = std::move(*again);
  hold_->Stop();  // nothing answers now: the query is refused, but it used a socket
  hold_.reset();
  auto asked = Ask(victim2, Name("guarded"));
  ASSERT_TRUE(asked.ok()) << asked.status();
  RunResult refused = asked->Wait(Window() + 20s);
  EXPECT_TRUE(Lab::WaitFor([&] { return !ours().empty(); })) << "no ready socket was prepared: " << refused.Describe();
  const std::vector<uint16_t> left = ours();
  serve_->Stop();
  serve_.reset();
  EXPECT_EQ(ours(), left) << "the killed proxy's guards are left in the map";
  auto restarted = ServeDns({"--upstream-dns", kNodeResolver, "--upstream-tries", "1"});
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  serve_ = std::move(*restarted);
  EXPECT_EQ(absl::StrJoin(ours(), " "), "") << "the next start left a killed proxy's guards (these ports)";
  ASSERT_EQ(kill(serve_->pid(), SIGTERM), 0);
  serve_->Wait(Scaled(20s));
  serve_.reset();
}

}  // namespace
}  // namespace egressd::test
