// Issue 17, a real guest kernel: Debian 12's 6.1 (vmtests' kernel) booted
// under qemu (TCG) behind a tap in a lab pod, wired to the pod's veth as Kata
// Containers' "tcfilter" network model does (tap_guest.h), its NIC the pod's
// MAC, its addresses and routes the pod's.  Every packet the guest's kernel
// sends crosses the node end of the pod's veth and nothing else of the node:
// no cgroup hook of the node ever sees the guest's sockets.  The sandbox is
// registered by interface alone (`--interface-netns`, the runtime hint
// `kata`), with one address and one name allowed.  Kata and Firecracker
// themselves need KVM, absent here: this TCG guest stands in for them.
//
// The guest boots once for the suite and runs egressd-probe and busybox's
// nslookup on the test's command.  Each case is counted at the lab hosts: the
// attack first (unregistered, the guest reaches every host the policy will
// deny), then registered: the allowed address arrives; a protected address, a
// TEST-NET host and an IPv6 host outside the policy are refused with a RST
// (ECONNREFUSED in the guest) and a UDP datagram to a denied host never
// arrives; the allowed name resolves through the veth's DNS steering to
// egressd's proxy, answered from the resolver address asked (no host has
// it), and its addresses then connect; the denied name is NXDOMAIN and never
// reaches the upstream (its log, next to the allowed name's queries).  "Never
// arrived" is read after the guest's own fence datagrams (allowed, sent last
// on the same path) arrived; the tc counters and the audit's `tc` records
// naming the interface show the denials happened at the hook.
//
// The vmtests guests do not run it (vmtests/host-only; no qemu is packed
// there).  On the host, with REQUIRE_BPF=1 a missing qemu or kernel is a
// failure naming the package (scripts/install-deps.sh installs both).
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dns_sandboxes.h"
#include "egressd_env.h"
#include "lab_dns.h"
#include "maps/if_sandbox_table.h"
#include "maps/pinned_maps.h"
#include "maps/stats.h"
#include "tap_guest.h"

namespace egressd::test {
namespace {

using namespace std::chrono_literals;
using lab::DnsServer;
using lab::DnsServerSpec;
using lab::Lab;
using lab::ProbeLine;
using lab::RunResult;

constexpr const char* kUpstream = lab::kPublicE4;  // the proxy's upstream (dnsmasq)
constexpr const char* kAsked4 = "192.0.2.53";      // the guest's resolver: TEST-NET, no lab host has it
constexpr const char* kAsked6 = "2001:db8::53";
constexpr const char* kAllowedName = "allowed.example";
constexpr const char* kAllowedName4 = lab::kPublicD4;  // refused until the name taught it
constexpr const char* kAllowedName6 = lab::kPublicC6;
constexpr const char* kDeniedName = "denied.example";
constexpr const char* kDeniedName4 = lab::kPublicB4;
// The fences: allowed datagrams the guest sends last (tcp ports echo, 7001 counts).
constexpr uint16_t kFencePort = 7001;


std::vector<uint64_t> TcStats() {
  auto s = maps::ReadTcStats(Shared().pin_root());
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : std::vector<uint64_t>(EGR_TC_STAT_MAX, 0);
}

uint64_t DnsSteered() {
  auto m = maps::PinnedMaps::Open(Shared().pin_root());
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? maps::ReadCounters(*m)[EGR_STAT_DNS_REDIRECT] : 0;
}

class GuestTap : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    // Packed first: in the vmtests guest this says why it cannot run, before a lab is built.
    auto image = PackTapGuest({lab::BinaryPath("egressd-probe")});
    if (!image.ok()) {
      unusable_ = image.status();
      return;
    }
    image_ = std::move(*image);
    Lab& lab = Shared().lab();
    auto up = DnsServer::Start(DnsServerSpec{.netns = lab.world_netns(),
                                             .listen = {kUpstream},
                                             .records = {{kAllowedName, {kAllowedName4, kAllowedName6}},
                                                         {kDeniedName, {kDeniedName4}}}});
    if (!up.ok()) {
      setup_error_ = up.status();
      return;
    }
    upstream_ = std::move(*up);
    auto pod = lab.AddPod();
    if (!pod.ok()) {
      setup_error_ = pod.status();
      return;
    }
    pod_ = *pod;
    // Boot under TCG took 7-25 s on this 2-core machine beside other builds (docs/kernels.md).
    auto g = TapGuest::Boot(*image_, *pod_, std::chrono::milliseconds(static_cast<int>(180000 * TimeScale())));
    if (!g.ok()) {
      setup_error_ = g.status();
      return;
    }
    guest_ = std::move(*g);
    std::cout << "[   GUEST  ] " << image_->kernel << " booted under TCG behind " << pod_->netns_name
              << "'s tap in " << guest_->boot_seconds() << " s (MAC " << guest_->mac() << ")" << std::endl;
  }
  static void TearDownTestSuite() {
    guest_.reset();
    image_.reset();
    upstream_.reset();
  }
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    if (!unusable_.ok()) {
      const bool in_vmtests = access("/vmtest/config", F_OK) == 0;
      if (absl::IsFailedPrecondition(unusable_) && (!BpfRequired() || in_vmtests)) GTEST_SKIP() << unusable_.message();
      FAIL() << (BpfRequired() ? "REQUIRE_BPF=1: " : "") << unusable_;
    }
    ASSERT_TRUE(setup_error_.ok()) << setup_error_;
    ASSERT_NE(guest_, nullptr);
    lab().ResetCounters();
    queries_allowed_ = upstream_->QueriesFor(kAllowedName);
    queries_denied_ = upstream_->QueriesFor(kDeniedName);
  }
  void TearDown() override {
    if (serve_) serve_->Stop();
    serve_.reset();
    if (registered_) {
      RunResult rm = Shared().Ctl({"sandbox", "remove", "--interface", pod_->node_ifname});
      EXPECT_EQ(rm.exit_code, 0) << rm.Describe();
      registered_ = false;
    }
  }
  Lab& lab() { return Shared().lab(); }

  // The pod, registered by interface alone (its netns), as a VM runtime's
  // sandbox; the allowed address and the fences' hosts are the same.
  void Register(const std::vector<std::string>& policy) {
    std::vector<std::string> argv = {"sandbox", "add", "--interface-netns", pod_->netns, "--sandbox-runtime", "kata",
                                     "--label", "pod=guest-tap", "--dns-endpoint4", lab::kPodGatewayV4,
                                     "--dns-endpoint6", lab::kPodGatewayV6};
    argv.insert(argv.end(), policy.begin(), policy.end());
    RunResult r = Shared().Ctl(argv);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    registered_ = true;
  }
  uint64_t SandboxId() { return maps::InterfaceSandboxId(Shared().lab().NodeIfindex(pod_->node_ifname)); }

  TapGuest::Result InGuest(const std::string& command) {
    auto r = guest_->Run(command, std::chrono::milliseconds(static_cast<int>(120000 * TimeScale())));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : TapGuest::Result{};
  }
  // egressd-probe OPS in the guest, one JSON line per op.
  std::vector<ProbeLine> Probe(const std::vector<std::string>& ops) {
    const std::string cmd = absl::StrCat("egressd-probe ", absl::StrJoin(ops, " --then "));
    TapGuest::Result r = InGuest(cmd);
    EXPECT_EQ(r.rc, 0) << cmd << ": " << r.out;
    std::vector<ProbeLine> lines = lab::ParseProbeLines(r.out);
    EXPECT_EQ(lines.size(), ops.size()) << cmd << ": " << r.out;
    lines.resize(ops.size());
    return lines;
  }
  // The guest's fences (one UDP datagram to an allowed host per family, sent
  // after everything else) arrived: whatever the guest sent before on the
  // same path has arrived too, so a zero count after this is "never".
  void AwaitFences(uint64_t expected = 1) {
    std::vector<ProbeLine> l = Probe({absl::StrCat("udp-sendto ", lab::kPublicA4, " ", kFencePort),
                                      absl::StrCat("udp-sendto ", lab::kPublicA6, " ", kFencePort)});
    EXPECT_TRUE(Lab::WaitFor(
        [&] {
          return lab().UdpDatagrams(lab::kPublicA4, kFencePort) >= expected &&
                 lab().UdpDatagrams(lab::kPublicA6, kFencePort) >= expected;
        },
        std::chrono::milliseconds(static_cast<int>(5000 * TimeScale()))))
        << "the guest's fences never arrived: " << lab().CountersSummary();
  }
  // The audit's `tc` records of this sandbox by destination.
  std::map<std::string, nlohmann::json> TcAudit(uint64_t id) {
    RunResult a = Shared().Ctl({"audit", "--sandbox", std::to_string(id)});
    EXPECT_EQ(a.exit_code, 0) << a.Describe();
    std::map<std::string, nlohmann::json> out;
    std::istringstream in(a.out);
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.value("type", "") == "tc") out[j["IP"].value("destination", "")] = j;
    }
    return out;
  }

  static inline std::unique_ptr<TapGuestImage> image_;
  static inline std::unique_ptr<TapGuest> guest_;
  static inline std::unique_ptr<DnsServer> upstream_;
  static inline const lab::Pod* pod_ = nullptr;
  static inline absl::Status unusable_;
  static inline absl::Status setup_error_;
  bool registered_ = false;
  std::optional<lab::Background> serve_;
  uint64_t queries_allowed_ = 0, queries_denied_ = 0;
};

// The attack, first: unregistered, the guest's kernel reaches the hosts the
// policy below denies, and its DNS to the TEST-NET resolver leaves for that
// address (so an answer later can only come from the steering).
TEST_F(GuestTap, UnregisteredTheGuestReachesTheHostsThePolicyWillDeny) {
  std::vector<ProbeLine> l = Probe({absl::StrCat("tcp ", lab::kImds4, " 80 --timeout-ms 3000"),
                                    absl::StrCat("tcp ", lab::kPublicB4, " 80 --timeout-ms 3000"),
                                    absl::StrCat("tcp ", lab::kPublicB6, " 80 --timeout-ms 3000"),
                                    absl::StrCat("udp-sendto ", lab::kPublicC4, " 7000"),
                                    absl::StrCat("udp-sendto ", kAsked4, " 53")});
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(Ok(l[i])) << i << ": " << l[i]["errno"];
  AwaitFences();
  EXPECT_EQ(lab().TcpAccepts(lab::kImds4, 80), 1u) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(lab::kPublicB4, 80), 1u) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(lab::kPublicB6, 80), 1u) << lab().CountersSummary();
  EXPECT_EQ(lab().UdpDatagrams(lab::kPublicC4, 7000), 1u) << lab().CountersSummary();
  EXPECT_GE(lab().PacketsTo(kAsked4), 1u) << lab().CountersSummary();
}

// The address cases: the allowed address arrives (v4 and v6); a protected
// address, a TEST-NET host and an IPv6 host the policy does not name are
// refused at the veth (a RST: ECONNREFUSED in the guest), a datagram to a
// denied host never arrives; the tc program counted and audited each denial.
TEST_F(GuestTap, RegisteredByInterfaceTheAllowedAddressArrivesAndTheDeniedNever) {
  ASSERT_NO_FATAL_FAILURE(Register({"--egress", lab::kPublicA4, "--egress", lab::kPublicA6}));
  const uint64_t id = SandboxId();
  const std::vector<uint64_t> before = TcStats();
  std::vector<ProbeLine> l = Probe({absl::StrCat("tcp ", lab::kPublicA4, " 80 --timeout-ms 5000"),
                                    absl::StrCat("tcp ", lab::kPublicA6, " 443 --timeout-ms 5000"),
                                    absl::StrCat("tcp ", lab::kImds4, " 80 --timeout-ms 5000"),
                                    absl::StrCat("tcp ", lab::kPublicB4, " 80 --timeout-ms 5000"),
                                    absl::StrCat("tcp ", lab::kPublicB6, " 80 --timeout-ms 5000"),
                                    absl::StrCat("udp-sendto ", lab::kPublicC4, " 7000")});
  EXPECT_TRUE(Ok(l[0])) << l[0]["errno"];
  EXPECT_TRUE(Ok(l[1])) << l[1]["errno"];
  for (size_t i = 2; i < 5; ++i) EXPECT_EQ(Errno(l[i]), "ECONNREFUSED") << "the veth's RST, at once: " << i;
  EXPECT_TRUE(Ok(l[5])) << "an unconnected datagram leaves the guest: " << l[5]["errno"];
  AwaitFences();
  EXPECT_EQ(lab().TcpAccepts(lab::kPublicA4, 80), 1u) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(lab::kPublicA6, 443), 1u) << lab().CountersSummary();
  for (const char* denied : {lab::kImds4, lab::kPublicB4, lab::kPublicB6, lab::kPublicC4}) {
    EXPECT_EQ(lab().PacketsTo(denied), 0u) << denied << " saw the guest's packets: " << lab().CountersSummary();
  }

  // At the hook: four denials, three answered with a RST and one with ICMP.
  const std::vector<uint64_t> after = TcStats();
  EXPECT_GE(after[EGR_TC_STAT_DROP] - before[EGR_TC_STAT_DROP], 4u);
  EXPECT_GE(after[EGR_TC_STAT_REJECT_RST] - before[EGR_TC_STAT_REJECT_RST], 3u);
  EXPECT_GE(after[EGR_TC_STAT_REJECT_ICMP] - before[EGR_TC_STAT_REJECT_ICMP], 1u);
  EXPECT_EQ(after[EGR_TC_STAT_SPOOFED], before[EGR_TC_STAT_SPOOFED])
      << "the guest's frames are the pod's own (its MAC and addresses)";
  std::map<std::string, nlohmann::json> tc = TcAudit(id);
  const uint32_t ifindex = Shared().lab().NodeIfindex(pod_->node_ifname);
  for (const char* dst : {lab::kImds4, lab::kPublicB4, lab::kPublicB6, lab::kPublicC4}) {
    ASSERT_TRUE(tc.count(dst)) << dst << " has no tc record (" << tc.size() << " records)";
    const nlohmann::json& j = tc[dst];
    EXPECT_EQ(j["verdict"], "deny") << j.dump();
    EXPECT_EQ(j["sandbox"]["id"], id) << j.dump();
    EXPECT_EQ(j["sandbox"]["labels"]["pod"], "guest-tap") << j.dump();
    EXPECT_EQ(j["interface"]["index"], ifindex) << j.dump();
    EXPECT_EQ(j["interface"]["name"], pod_->node_ifname) << j.dump();
  }
  EXPECT_EQ(tc[lab::kImds4]["reason"], "protected") << tc[lab::kImds4].dump();
  EXPECT_EQ(tc[lab::kPublicB4]["reason"], "default-deny") << tc[lab::kPublicB4].dump();
  EXPECT_EQ(tc[lab::kPublicC4]["l4"]["UDP"]["destination_port"], 7000) << tc[lab::kPublicC4].dump();
  EXPECT_FALSE(tc.count(lab::kPublicA4)) << "an enforced sandbox's pass is not a record";
}

// The name cases: the guest's resolver is an address no host has; its
// queries are steered at the veth to egressd's proxy, which asks the
// upstream only for the allowed name and teaches its addresses before the
// answer is released (from the address asked: busybox's nslookup reads a
// connected socket); the denied name is NXDOMAIN and never reaches the
// upstream, its address stays refused.
TEST_F(GuestTap, RegisteredByInterfaceTheAllowedNameResolvesAndConnectsAndTheDeniedNameLeaksNothing) {
  ASSERT_NO_FATAL_FAILURE(
      Register({"--egress", kAllowedName, "--egress", lab::kPublicA4, "--egress", lab::kPublicA6}));
  auto serve = ServeDns({"--upstream-dns", kUpstream});
  ASSERT_TRUE(serve.ok()) << serve.status();
  serve_ = std::move(*serve);
  const uint64_t steered0 = DnsSteered();

  std::vector<ProbeLine> early = Probe({absl::StrCat("tcp ", kAllowedName4, " 80 --timeout-ms 5000"),
                                        absl::StrCat("tcp ", kAllowedName6, " 80 --timeout-ms 5000")});
  EXPECT_EQ(Errno(early[0]), "ECONNREFUSED") << "no answer taught it yet";
  EXPECT_EQ(Errno(early[1]), "ECONNREFUSED") << "no answer taught it yet";

  TapGuest::Result a = InGuest(absl::StrCat("nslookup -type=a ", kAllowedName, " ", kAsked4));
  EXPECT_EQ(a.rc, 0) << a.out;
  EXPECT_TRUE(absl::StrContains(a.out, absl::StrCat("Address: ", kAllowedName4))) << a.out;
  TapGuest::Result aaaa = InGuest(absl::StrCat("nslookup -type=aaaa ", kAllowedName, " ", kAsked6));
  EXPECT_EQ(aaaa.rc, 0) << aaaa.out;
  EXPECT_TRUE(absl::StrContains(aaaa.out, absl::StrCat("Address: ", kAllowedName6))) << aaaa.out;
  std::vector<ProbeLine> learned = Probe({absl::StrCat("tcp ", kAllowedName4, " 80 --timeout-ms 5000"),
                                          absl::StrCat("tcp ", kAllowedName6, " 80 --timeout-ms 5000")});
  EXPECT_TRUE(Ok(learned[0])) << "the name's address: " << learned[0]["errno"];
  EXPECT_TRUE(Ok(learned[1])) << "the name's address: " << learned[1]["errno"];

  TapGuest::Result d = InGuest(absl::StrCat("nslookup -type=a ", kDeniedName, " ", kAsked4));
  EXPECT_NE(d.rc, 0) << d.out;
  EXPECT_TRUE(absl::StrContains(d.out, "NXDOMAIN")) << d.out;
  std::vector<ProbeLine> denied = Probe({absl::StrCat("tcp ", kDeniedName4, " 80 --timeout-ms 5000")});
  EXPECT_EQ(Errno(denied[0]), "ECONNREFUSED");

  AwaitFences();
  EXPECT_EQ(lab().TcpAccepts(kAllowedName4, 80), 1u) << "only the connect after the answer: " << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(kAllowedName6, 80), 1u) << lab().CountersSummary();
  EXPECT_EQ(lab().FlowsOpenedTo(kAllowedName4), 1u) << "the refused SYN never left the node: " << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kDeniedName4), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kAsked4), 0u) << "every query was steered: " << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kAsked6), 0u) << "every query was steered: " << lab().CountersSummary();
  EXPECT_GE(upstream_->QueriesFor(kAllowedName) - queries_allowed_, 2u) << "positive control: " << upstream_->Log();
  EXPECT_EQ(upstream_->QueriesFor(kDeniedName) - queries_denied_, 0u)
      << "the denied name reached the upstream: " << upstream_->Log();
  EXPECT_GE(DnsSteered() - steered0, 3u) << "three queries steered at the veth";
}

}  // namespace
}  // namespace egressd::test
