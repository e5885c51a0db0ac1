// Issue 12's lifetimes over time, end to end through the kernel redirect and
// `egressctl dns serve` (docs/dns.md "Lifetimes", "Policy changes"):
//  * a QUIC-style unconnected UDP sender keeps its learned address past
//    expiry while it sends; once it stops and its keep has passed the
//    collector takes the entry and new sends and connects are refused;
//  * re-resolution extends the kernel's expiry and never shortens it (read
//    from egr_resolved_v2);
//  * a policy change while flows run: the removed name's established flow is
//    cut at its next packet and a new connect to its address fails at once,
//    while the kept name's flow and addresses carry on (narrowing).
// Lifetimes are configured short (dns.minTtlSeconds, dns.graceSeconds) so
// each test takes seconds; waits are bounded waits on the map's state or on
// a deadline the test computes, never a sleep standing in for an event.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "dns_sandboxes.h"
#include "egressd_env.h"
#include "lab_dns.h"
#include "maps/egressd_abi.h"
#include "maps/map_iter.h"

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
constexpr const char* kName = "life.example";        // -> 192.0.2.10
constexpr const char* kOtherName = "life-b.example";  // -> 192.0.2.11
constexpr uint16_t kUdpPort = lab::kUdpPorts[0];      // the lab counts datagrams here

uint64_t BootNs() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}
long long MonoMs() {  // egressd-probe's start_ms clock
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
long long Num(const ProbeLine& l, const char* key) {
  long long v = -1;
  auto it = l.find(key);
  if (it == l.end() || !absl::SimpleAtoi(it->second, &v)) return -1;
  return v;
}
std::string FirstLine(const std::string& s) {
  return std::string(absl::StripAsciiWhitespace(s.substr(0, s.find('\n'))));
}
std::chrono::milliseconds Scaled(std::chrono::milliseconds d) {
  return std::chrono::milliseconds(static_cast<long long>(d.count() * TimeScale()));
}

class DnsLifetime : public ::testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    lab().ResetCounters();
    char dir[] = "/run/egr-dnslife-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    if (serve_) serve_->Stop();
    sandboxes_.RemoveAll();
    upstream_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  Lab& lab() { return Shared().lab(); }

  // (Re)starts the upstream answering kName and kOtherName with `ttl`
  // (dnsmasq's --host-record TTL field): a restart is how a test changes the
  // TTL a name is answered with.
  void Upstream(uint32_t ttl) {
    upstream_.reset();  // stopped and reaped: its port is free again
    auto u = DnsServer::Start(DnsServerSpec{
        .netns = lab().world_netns(),
        .listen = {kUpstream},
        .extra_args = {absl::StrCat("--host-record=", kName, ",", lab::kPublicA4, ",", ttl),
                       absl::StrCat("--host-record=", kOtherName, ",", lab::kPublicB4, ",", ttl)}});
    ASSERT_TRUE(u.ok()) << u.status();
    upstream_ = std::move(*u);
  }
  // A config with the lifetime given (empty: the defaults), and dns serve on it.
  std::string Config(const std::string& lifetime) {
    const std::string path = absl::StrCat(dir_, "/egressd.yaml");
    std::ofstream(path) << "dns:\n  upstreams: [" << kUpstream << "]\n  endpoint4: " << lab::kPodGatewayV4
                        << "\n  endpoint6: \"" << lab::kPodGatewayV6 << "\"\n"
                        << lifetime;
    return path;
  }
  void Serve(const std::string& cfg) {
    auto serve = ServeDns({"--config", cfg});
    ASSERT_TRUE(serve.ok()) << serve.status();
    serve_ = std::move(*serve);
  }
  RunSpec InPodSpec(const DnsSandbox& s, std::vector<std::string> argv) {
    RunSpec spec;
    spec.argv = std::move(argv);
    spec.netns = lab().pod().netns;
    spec.cgroup = s.cgroup;
    spec.hostile = true;
    spec.timeout = Scaled(30s);
    return spec;
  }
  RunResult Probe(const DnsSandbox& s, const std::string& op) {
    return lab::Run(InPodSpec(s, {lab::BinaryPath("egressd-probe"), "batch", op}));
  }
  ProbeLine Connect(const DnsSandbox& s, const std::string& addr) {
    RunResult r = Probe(s, absl::StrCat("tcp ", addr, " 80"));
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? ProbeLine{} : lines[0];
  }
  // dig NAME through the sandbox's redirect; its first answer line.
  std::string Resolve(const DnsSandbox& s, const std::string& name) {
    RunResult d = lab::Run(InPodSpec(s, {"dig", "+time=2", "+tries=1", "+short", "@8.8.8.8", name}));
    EXPECT_EQ(d.exit_code, 0) << d.Describe();
    return FirstLine(d.out);
  }
  // The sandbox's entry for an IPv4 address in egr_resolved_v2, read from
  // the kernel's map.
  std::optional<egr_resolved_val> Entry(const DnsSandbox& s, const std::string& v4) {
    egr_resolved_key want{.sandbox_id = s.id};
    want.addr[10] = want.addr[11] = 0xff;
    EXPECT_EQ(inet_pton(AF_INET, v4.c_str(), &want.addr[12]), 1) << v4;
    int fd = bpf_obj_get((Shared().pin_root() + "/" EGR_MAP_RESOLVED).c_str());
    EXPECT_GE(fd, 0) << "open pinned " << EGR_MAP_RESOLVED;
    if (fd < 0) return std::nullopt;
    egr_resolved_val v{};
    const bool found = bpf_map_lookup_elem(fd, &want, &v) == 0;
    close(fd);
    if (!found) return std::nullopt;
    return v;
  }
  // Seconds from now (CLOCK_BOOTTIME, the map's clock) to the entry's expiry.
  double ExpiresInS(const egr_resolved_val& v) { return (double(v.expires_boot_ns) - double(BootNs())) / 1e9; }

  std::string dir_;
  std::unique_ptr<DnsServer> upstream_;
  DnsSandboxes sandboxes_{"dnslife-"};
  std::optional<lab::Background> serve_;
};

// A QUIC stack sends from one unconnected socket with sendto() and never
// connects: its address lives on while it sends (each send refreshes the
// keep), past expiry; when it stops, the keep (the grace) runs out, the
// collector takes the entry, and a new send or connect is refused.
TEST_F(DnsLifetime, AnUnconnectedUdpSenderKeepsItsAddressWhileItSendsAndLosesItAfter) {
  Upstream(0);  // TTL 0: the minimum applies
  // expiry = answer + max(0, min) + grace, keep_s = grace; min = 1 s and
  // grace = 1 s (times half EGR_TIME_SCALE, rounded up: the first send must
  // come before the expiry however slowly processes start). A keep of 1 s
  // equals the kernel's at-most-once-a-second refresh of a busy sender: the
  // case that cut the sender before every reader added the refresh interval
  // to the keep (maps/egressd_abi.h, EGR_USE_REFRESH_NS).
  const int unit = std::max(1, static_cast<int>(std::ceil(TimeScale() / 2)));
  const long long min_ms = 1000LL * unit, grace_ms = 1000LL * unit;
  const std::string cfg =
      Config(absl::StrCat("  minTtlSeconds: ", unit, "\n  graceSeconds: ", unit, "\n"));
  DnsSandbox s = sandboxes_.Add({"--config", cfg, "--egress", kName}, /*pod_endpoint=*/false);
  ASSERT_NE(s.port, 0);
  Serve(cfg);

  ASSERT_EQ(Resolve(s, kName), lab::kPublicA4);
  const long long expiry_ms = MonoMs() + min_ms + grace_ms;  // the answer came before: no later than this
  auto learned = Entry(s, lab::kPublicA4);
  ASSERT_TRUE(learned.has_value()) << "the answer's address in " << EGR_MAP_RESOLVED;
  EXPECT_LE(ExpiresInS(*learned), (min_ms + grace_ms) / 1000.0) << "TTL 0: minTtlSeconds + graceSeconds";
  EXPECT_EQ(learned->keep_s, uint32_t(unit));

  // Sends 100 ms apart (times unit) until a second past expiry plus the
  // keep: the last ones come more than the keep after the expiry, so only
  // the sends' refresh can have passed them.
  const long long interval_ms = 100LL * unit;
  const int sends = static_cast<int>((min_ms + 2 * grace_ms + 1000LL * unit) / interval_ms);
  RunResult pace = Probe(s, absl::StrCat("udp-pace ", lab::kPublicA4, " ", kUdpPort, " --interval-ms ",
                                         interval_ms, " --count ", sends));
  auto rounds = Lines(pace);
  ASSERT_EQ(rounds.size(), size_t(sends)) << pace.Describe();
  int sent = 0;
  for (const auto& r : rounds) sent += Ok(r);
  EXPECT_EQ(sent, sends) << "every send passed, before and after the expiry: " << pace.Describe();
  const long long last_send_ms = Num(rounds.back(), "start_ms");
  EXPECT_GT(last_send_ms, expiry_ms + grace_ms) << "the sender went on past expiry plus the keep";
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().UdpDatagrams(lab::kPublicA4, kUdpPort) == uint64_t(sends); }))
      << "all arrived while it sent: " << lab().CountersSummary();

  // Stopped: the keep runs out grace_ms after the last refresh (within a
  // second before the last send), and the collector's timer follows the
  // keep's deadline: a bounded wait on the map's state.
  const auto gone_by = std::chrono::steady_clock::now() + Scaled(10s) + std::chrono::milliseconds(grace_ms);
  while (Entry(s, lab::kPublicA4).has_value() && std::chrono::steady_clock::now() < gone_by)
    std::this_thread::sleep_for(50ms);
  ASSERT_FALSE(Entry(s, lab::kPublicA4).has_value()) << "collected once the keep ran out";
  // The last refresh came at most a second and a send before the last send.
  EXPECT_GE(MonoMs(), last_send_ms + grace_ms - 1000 - interval_ms) << "not collected while the keep held";

  RunResult after = Probe(s, absl::StrCat("udp-burst ", lab::kPublicA4, " ", kUdpPort, " 5"));
  EXPECT_EQ(Num(Only(after), "refused"), 5) << after.Describe();
  EXPECT_EQ(Errno(Connect(s, lab::kPublicA4)), "EPERM") << "a new connect after expiry plus grace";
  // Nothing arrived after it stopped, next to the count above; and a
  // positive control that a datagram now would be counted: the name asked
  // again teaches it again.
  ASSERT_EQ(Resolve(s, kName), lab::kPublicA4);
  RunResult control = Probe(s, absl::StrCat("udp-burst ", lab::kPublicA4, " ", kUdpPort, " 1"));
  EXPECT_EQ(Num(Only(control), "sent"), 1) << control.Describe();
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().UdpDatagrams(lab::kPublicA4, kUdpPort) == uint64_t(sends) + 1; }))
      << "only the control arrived after the sender stopped: " << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(lab::kPublicA4, 80), 0u) << lab().CountersSummary();
}

// Re-resolution: a long TTL, then a short one for the same name, leaves the
// long expiry in the kernel (and the address connects after the short one
// would have ended); a longer TTL later extends it.
TEST_F(DnsLifetime, ReResolutionExtendsTheKernelsExpiryAndNeverShortensIt) {
  const std::string cfg = Config("  minTtlSeconds: 1\n  graceSeconds: 1\n");
  DnsSandbox s = sandboxes_.Add({"--config", cfg, "--egress", kName}, /*pod_endpoint=*/false);
  ASSERT_NE(s.port, 0);
  Upstream(600);
  Serve(cfg);

  ASSERT_EQ(Resolve(s, kName), lab::kPublicA4);
  auto longer = Entry(s, lab::kPublicA4);
  ASSERT_TRUE(longer.has_value());
  EXPECT_GT(ExpiresInS(*longer), 590.0) << "TTL 600 + grace 1";
  EXPECT_LE(ExpiresInS(*longer), 601.0);

  Upstream(1);
  const auto short_asked = std::chrono::steady_clock::now();
  ASSERT_EQ(Resolve(s, kName), lab::kPublicA4);
  EXPECT_GE(upstream_->QueriesFor(kName), 1u) << "the short TTL was asked of the upstream: " << upstream_->Log();
  auto kept = Entry(s, lab::kPublicA4);
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->expires_boot_ns, longer->expires_boot_ns) << "a shorter answer never shortens the expiry";
  // The short answer's lifetime (1 s + 1 s) passes: the kernel follows the
  // long expiry. Waiting for that deadline itself, not for an event.
  std::this_thread::sleep_until(short_asked + 2500ms);
  EXPECT_TRUE(Ok(Connect(s, lab::kPublicA4))) << "after the short lifetime, within the long one";

  Upstream(1200);
  ASSERT_EQ(Resolve(s, kName), lab::kPublicA4);
  auto extended = Entry(s, lab::kPublicA4);
  ASSERT_TRUE(extended.has_value());
  EXPECT_GT(extended->expires_boot_ns, longer->expires_boot_ns + 500ull * 1'000'000'000ull)
      << "a longer answer extends it";
  EXPECT_GT(ExpiresInS(*extended), 1190.0) << "TTL 1200 + grace 1";
  EXPECT_LE(ExpiresInS(*extended), 1201.0);
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(lab::kPublicA4, 80) == 1; })) << lab().CountersSummary();
}

// A policy change while the names' own flows run: the removed name's
// established TCP flow is cut at its next packet (its learned entry is gone,
// so the backstop finds nothing to pass it by) and a new connect to its
// address fails at once; the kept name's flow goes on and its address
// connects without being asked again (narrowing keeps what it still allows).
TEST_F(DnsLifetime, APolicyChangeCutsTheRemovedNamesFlowAndKeepsTheKeptNames) {
  Upstream(0);
  const std::string cfg = Config("");  // the default lifetime: nothing expires during the test
  DnsSandbox s = sandboxes_.Add({"--config", cfg, "--egress", kName, "--egress", kOtherName}, /*pod_endpoint=*/false);
  ASSERT_NE(s.port, 0);
  Serve(cfg);
  ASSERT_EQ(Resolve(s, kName), lab::kPublicA4);
  ASSERT_EQ(Resolve(s, kOtherName), lab::kPublicB4);

  // One echoing TCP flow to each name's address, 100 ms rounds.
  auto hold = [&](const char* addr) {
    return lab::Start(InPodSpec(s, {lab::BinaryPath("egressd-probe"), "batch",
                                    absl::StrCat("hold ", addr, " 80 --interval-ms 100 --count 20 --timeout-ms 250")}));
  };
  auto kept_bg = hold(lab::kPublicA4);
  ASSERT_TRUE(kept_bg.ok()) << kept_bg.status();
  auto removed_bg = hold(lab::kPublicB4);
  ASSERT_TRUE(removed_bg.ok()) << removed_bg.status();
  lab::Background kept = std::move(*kept_bg), removed = std::move(*removed_bg);
  // Both established and echoing before the change: round 0 (the connect)
  // and round 1 read from each.
  std::vector<ProbeLine> kept_rounds, removed_rounds;
  for (auto [bg, out] : {std::pair{&kept, &kept_rounds}, std::pair{&removed, &removed_rounds}}) {
    for (int i = 0; i < 2; ++i) {
      auto line = bg->ReadOutLine(Scaled(10s));
      ASSERT_TRUE(line.has_value()) << bg->err();
      auto l = lab::ParseProbeLine(*line);
      ASSERT_TRUE(l.ok()) << *line;
      ASSERT_TRUE(Ok(*l)) << *line;
      out->push_back(*l);
    }
  }

  RunResult flip = Shared().Ctl({"sandbox", "add", "--cgroup", s.cgroup, "--config", cfg, "--egress", kName});
  ASSERT_EQ(flip.exit_code, 0) << flip.Describe();
  const long long flipped_ms = MonoMs();
  EXPECT_EQ(Errno(Connect(s, lab::kPublicB4)), "EPERM") << "at once: learned only through the removed name";
  EXPECT_FALSE(Entry(s, lab::kPublicB4).has_value()) << "the removed name's entry left the map";
  EXPECT_TRUE(Entry(s, lab::kPublicA4).has_value()) << "the kept name's entry stays";
  EXPECT_TRUE(Ok(Connect(s, lab::kPublicA4))) << "the kept name's address, not asked again";

  for (auto [bg, out] : {std::pair{&kept, &kept_rounds}, std::pair{&removed, &removed_rounds}}) {
    RunResult rest = bg->Wait(Scaled(30s));
    for (auto& l : lab::ParseProbeLines(rest.out)) out->push_back(l);
    EXPECT_EQ(out->size(), 21u) << rest.Describe();
  }
  int kept_after = 0, removed_after = 0, removed_after_ok = 0;
  for (const auto& r : kept_rounds) {
    EXPECT_TRUE(Ok(r)) << "the kept name's flow carries on: round " << r.at("round");
    kept_after += Num(r, "start_ms") > flipped_ms;
  }
  for (const auto& r : removed_rounds) {
    if (Num(r, "start_ms") <= flipped_ms) continue;  // in flight while the change landed
    ++removed_after;
    removed_after_ok += Ok(r);
  }
  EXPECT_GE(kept_after, 5) << "the kept flow ran on well past the change";
  EXPECT_GE(removed_after, 5) << "the removed flow tried well past the change";
  EXPECT_EQ(removed_after_ok, 0) << "the removed name's flow is cut at its next packet";
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(lab::kPublicA4, 80) == 2; })) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(lab::kPublicB4, 80), 1u) << "only the flow made before the change: "
                                                       << lab().CountersSummary();
}

}  // namespace
}  // namespace egressd::test
