// Issue 12's "policy changes that add, remove and narrow names while flows
// run", end to end through the kernel redirect and `egressctl dns serve`
// (docs/dns.md "Policy changes"; the removal case is in
// dns_lifetime_test.cc, APolicyChangeCutsTheRemovedNamesFlowAndKeepsTheKeptNames):
//  * adding a name leaves a running flow and its learned address alone, and
//    the added name, refused locally before (never asked upstream), resolves
//    and connects at once;
//  * narrowing a wildcard to one of its names keeps what that name was
//    answered with (the entries' keyed question-name ids) and its flow,
//    while the other names' addresses go at once and their flows are cut; a
//    name forged to share the kept name's unkeyed id keeps nothing.
// The flows are egressd-probe hold rounds to RoundEcho, which counts their
// lines at the lab host.
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dns_lifetime.h"
#include "round_echo.h"
#include "userspace/dns/scope.h"

namespace egressd::test {
namespace {

using namespace std::chrono_literals;
using lab::Lab;
using lab::ProbeLine;
using lab::RunResult;

// Rounds of a flow: those begun after `ms` (CLOCK_MONOTONIC) and how many of
// them were echoed; and every echoed round, whenever it began.
struct RoundCount {
  int after = 0, after_ok = 0, ok = 0;
};
RoundCount CountRounds(const std::vector<ProbeLine>& rounds, long long ms) {
  RoundCount c;
  for (const auto& r : rounds) {
    if (r.count("start_ms") == 0) continue;  // round 0, the connect
    const bool ok = Ok(r);
    c.ok += ok;
    long long start = -1;
    if (!absl::SimpleAtoi(r.at("start_ms"), &start) || start <= ms) continue;
    ++c.after;
    c.after_ok += ok;
  }
  return c;
}

// Adding a name while another name's flow runs: the flow is untouched (its
// rounds go on, its address's entry and expiry are the same before and
// after), and the added name, NXDOMAIN before the change without reaching
// the upstream, resolves at the first query after it and connects.
TEST_F(DnsLifetime, AddingANameLeavesRunningFlowsAloneAndTheNewNameResolvesAtOnce) {
  Upstream(600);
  const std::string cfg = Config("");  // the default lifetime: nothing expires during the test
  RoundEcho echo(lab().world_netns(), kEchoPort);
  ASSERT_TRUE(echo.ready()) << "a TCP echo on port " << kEchoPort << " in the lab's world";
  DnsSandbox s = sandboxes_.Add({"--config", cfg, "--egress", kName}, /*pod_endpoint=*/false);
  ASSERT_NE(s.port, 0);
  Serve(cfg);
  ASSERT_EQ(Resolve(s, kName), lab::kPublicA4);
  auto before = Entry(s, lab::kPublicA4);
  ASSERT_TRUE(before.has_value());

  // Before the change the new name is refused by the proxy itself: NXDOMAIN,
  // absent from the upstream's log (current: the allowed name is in it), and
  // its address refused.
  RunResult denied = Dig(s, kAddedName, /*short_form=*/false);
  EXPECT_NE(denied.out.find("status: NXDOMAIN"), std::string::npos) << denied.Describe();
  ASSERT_TRUE(upstream_->WaitForQuery(kName, Scaled(5s))) << upstream_->Log();
  EXPECT_EQ(upstream_->QueriesFor(kAddedName), 0u) << upstream_->Log();
  EXPECT_EQ(Errno(Connect(s, lab::kPublicD4)), "EPERM") << "the new name's address, before the change";

  const auto interval = Scaled(200ms);
  lab::Background flow = Hold(s, lab::kPublicA4, kEchoPort, interval, 40, Scaled(1s), /*udp=*/false);
  std::vector<ProbeLine> rounds = ReadRounds(flow, 2);
  ASSERT_EQ(rounds.size(), 2u);
  for (const auto& r : rounds) ASSERT_TRUE(Ok(r)) << "round " << r.at("round") << ": " << Errno(r);
  const auto status_before = StatusEntries(s);
  ASSERT_EQ(status_before.count(lab::kPublicA4), 1u);
  EXPECT_EQ(status_before.at(lab::kPublicA4)["rules"], nlohmann::json::array({kName}));

  RunResult flip =
      Shared().Ctl({"sandbox", "add", "--cgroup", s.cgroup, "--config", cfg, "--egress", kName, "--egress", kAddedName});
  ASSERT_EQ(flip.exit_code, 0) << flip.Describe();
  const long long flipped_ms = MonoMs();
  // At once: the first query after the change is answered by the upstream.
  RunResult added = Dig(s, kAddedName, /*short_form=*/true);
  EXPECT_EQ(FirstLine(added.out), lab::kPublicD4) << added.Describe();
  EXPECT_EQ(upstream_->QueriesFor(kAddedName), 1u) << upstream_->Log();
  EXPECT_TRUE(Ok(Connect(s, lab::kPublicD4))) << "the added name's address, once asked";
  // The running flow's address: the same entry, the same expiry.
  auto after = Entry(s, lab::kPublicA4);
  ASSERT_TRUE(after.has_value()) << "the kept name's entry stays";
  EXPECT_EQ(after->expires_boot_ns, before->expires_boot_ns);
  const auto status_after = StatusEntries(s);
  ASSERT_EQ(status_after.count(lab::kPublicA4), 1u);
  EXPECT_EQ(status_after.at(lab::kPublicA4)["rules"], status_before.at(lab::kPublicA4)["rules"]);
  EXPECT_EQ(status_after.at(lab::kPublicA4)["expires_at"], status_before.at(lab::kPublicA4)["expires_at"]);
  EXPECT_GE(status_after.at(lab::kPublicA4)["socks"].get<int>(), 1) << "the flow holds it";
  ASSERT_EQ(status_after.count(lab::kPublicD4), 1u);
  EXPECT_EQ(status_after.at(lab::kPublicD4)["rules"], nlohmann::json::array({kAddedName}));

  RunResult rest = flow.Wait(interval * 40 + Scaled(60s));
  for (auto& l : lab::ParseProbeLines(rest.out)) rounds.push_back(l);
  ASSERT_EQ(rounds.size(), 41u) << rest.Describe();
  const RoundCount c = CountRounds(rounds, flipped_ms);
  EXPECT_EQ(c.ok, 40) << "every round of the running flow was echoed: " << rest.Describe();
  EXPECT_GE(c.after, 5) << "the flow ran on well past the change";
  // Counted at the lab host.
  EXPECT_TRUE(Lab::WaitFor([&] { return echo.Lines(lab::kPublicA4) == 40u; })) << echo.Lines(lab::kPublicA4);
  EXPECT_EQ(echo.Accepts(lab::kPublicA4), 1u);
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(lab::kPublicD4, 80) == 1; }))
      << "only the connect after the change arrived: " << lab().CountersSummary();
}

// Narrowing `*.example.test` to `a.example.test` while flows to a's and b's
// addresses (both learned through the wildcard) run. Each learned entry
// carries a keyed id of the question name its answer was for
// (userspace/dns/qname_key.h; docs/dns.md "Policy changes"), so the flip
// keeps what a.example.test was answered with: a's address stays in the map,
// re-labelled with the exact rule, its expiry unchanged; a's flow runs on
// and a new connect to it succeeds without a's name being asked again. b's
// name is NXDOMAIN at once (never asked upstream again), b's address is
// refused for new connects at once and b's running flow is cut at its next
// packet (the backstop finds no entry). The attack: a third name whose
// *unkeyed* id (FNV-1a, which the sandbox can compute) equals
// a.example.test's, learned through the wildcard before the flip, keeps
// nothing: its address is refused after the flip and nothing of that
// connect arrives (the same connect arrived before the flip: the control).
TEST_F(DnsLifetime, NarrowingAWildcardToOneNameKeepsThatNamesAddressesAndCutsTheRest) {
  // "l070acuq" has the FNV-1a of "a" (a meet-in-the-middle search over its
  // two halves), so the whole names' NameIds are equal.
  constexpr const char* kCollider = "l070acuq.example.test";  // -> 192.0.2.11
  ASSERT_EQ(dns::NameId(kCollider), dns::NameId(kWildA)) << "the attack's premise";
  Upstream(600, {{kCollider, lab::kPublicB4}});
  const std::string cfg = Config("");
  RoundEcho echo(lab().world_netns(), kEchoPort);
  ASSERT_TRUE(echo.ready()) << "a TCP echo on port " << kEchoPort << " in the lab's world";
  DnsSandbox s = sandboxes_.Add({"--config", cfg, "--egress", kWildcard}, /*pod_endpoint=*/false);
  ASSERT_NE(s.port, 0);
  Serve(cfg);
  ASSERT_EQ(Resolve(s, kWildA), lab::kPublicC4);
  ASSERT_EQ(Resolve(s, kWildB), lab::kPublicF4);
  ASSERT_EQ(Resolve(s, kCollider), lab::kPublicB4);
  const auto status_before = StatusEntries(s);
  for (const char* addr : {lab::kPublicC4, lab::kPublicF4, lab::kPublicB4}) {
    ASSERT_EQ(status_before.count(addr), 1u) << addr;
    EXPECT_EQ(status_before.at(addr)["rules"], nlohmann::json::array({kWildcard})) << addr;
  }
  auto a_before = Entry(s, lab::kPublicC4);
  ASSERT_TRUE(a_before.has_value());
  // The control: the collider's address connects while the wildcard allows it.
  ASSERT_TRUE(Ok(Connect(s, lab::kPublicB4)));
  ASSERT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(lab::kPublicB4, 80) == 1; })) << lab().CountersSummary();

  const auto interval = Scaled(200ms);
  constexpr int kRounds = 20;
  lab::Background a_flow = Hold(s, lab::kPublicC4, kEchoPort, interval, kRounds, Scaled(500ms), /*udp=*/false);
  lab::Background b_flow = Hold(s, lab::kPublicF4, kEchoPort, interval, kRounds, Scaled(500ms), /*udp=*/false);
  std::vector<ProbeLine> a_rounds = ReadRounds(a_flow, 2), b_rounds = ReadRounds(b_flow, 2);
  ASSERT_EQ(a_rounds.size(), 2u);
  ASSERT_EQ(b_rounds.size(), 2u);
  for (const auto* rounds : {&a_rounds, &b_rounds}) {
    for (const auto& r : *rounds) ASSERT_TRUE(Ok(r)) << r.at("dst") << " round " << r.at("round") << ": " << Errno(r);
  }

  RunResult flip = Shared().Ctl({"sandbox", "add", "--cgroup", s.cgroup, "--config", cfg, "--egress", kWildA});
  ASSERT_EQ(flip.exit_code, 0) << flip.Describe();
  const long long flipped_ms = MonoMs();
  // b: refused at once, its name denied by the proxy.
  EXPECT_EQ(Errno(Connect(s, lab::kPublicF4)), "EPERM") << "b's address, at once";
  EXPECT_FALSE(Entry(s, lab::kPublicF4).has_value());
  RunResult b_denied = Dig(s, kWildB, /*short_form=*/false);
  EXPECT_NE(b_denied.out.find("status: NXDOMAIN"), std::string::npos) << b_denied.Describe();
  // a: answered for a name the new policy allows, so kept, with its expiry.
  auto a_after = Entry(s, lab::kPublicC4);
  ASSERT_TRUE(a_after.has_value()) << "answered for " << kWildA << ", which the new policy allows";
  EXPECT_EQ(a_after->expires_boot_ns, a_before->expires_boot_ns) << "its expiry unchanged";
  EXPECT_TRUE(Ok(Connect(s, lab::kPublicC4))) << "a's address, not asked again since the change";
  // The collider: its unkeyed id is a's, its keyed one is not.
  EXPECT_FALSE(Entry(s, lab::kPublicB4).has_value()) << kCollider << " keeps nothing through the narrowing";
  EXPECT_EQ(Errno(Connect(s, lab::kPublicB4)), "EPERM") << kCollider << "'s address after the change";
  const auto status_after = StatusEntries(s);
  ASSERT_EQ(status_after.count(lab::kPublicC4), 1u);
  EXPECT_EQ(status_after.at(lab::kPublicC4)["rules"], nlohmann::json::array({kWildA})) << "re-labelled";
  EXPECT_EQ(status_after.count(lab::kPublicF4), 0u);
  EXPECT_EQ(status_after.count(lab::kPublicB4), 0u);

  for (auto [bg, rounds] : {std::pair{&a_flow, &a_rounds}, std::pair{&b_flow, &b_rounds}}) {
    RunResult rest = bg->Wait(Scaled(500ms) * kRounds + interval * kRounds + Scaled(60s));
    for (auto& l : lab::ParseProbeLines(rest.out)) rounds->push_back(l);
    ASSERT_EQ(rounds->size(), size_t(kRounds) + 1) << rest.Describe();
  }
  const RoundCount a = CountRounds(a_rounds, flipped_ms), b = CountRounds(b_rounds, flipped_ms);
  EXPECT_EQ(a.ok, kRounds) << "every round of a's flow was echoed, across the change";
  EXPECT_GE(a.after, 5) << "a's flow ran well past the change";
  EXPECT_GE(b.after, 5) << "b's flow tried well past the change";
  EXPECT_EQ(b.after_ok, 0) << "b's flow is cut at its next packet";
  EXPECT_TRUE(Lab::WaitFor([&] { return echo.Lines(lab::kPublicC4) == uint64_t(kRounds); }))
      << "a's rounds at the lab host: " << echo.Lines(lab::kPublicC4);
  EXPECT_EQ(echo.Lines(lab::kPublicF4), uint64_t(b.ok)) << "b's rounds at the lab host";
  EXPECT_EQ(upstream_->QueriesFor(kWildA), 1u) << "a was never asked again: " << upstream_->Log();
  EXPECT_EQ(upstream_->QueriesFor(kWildB), 1u) << "b's NXDOMAIN never reached the upstream: " << upstream_->Log();
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(lab::kPublicC4, 80) == 1; })) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(lab::kPublicF4, 80), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(lab::kPublicB4, 80), 1u) << "only the control, before the change: "
                                                      << lab().CountersSummary();
  EXPECT_EQ(echo.Accepts(lab::kPublicC4), 1u) << "a's one flow, never reconnected";
  EXPECT_EQ(echo.Accepts(lab::kPublicF4), 1u);
}

}  // namespace
}  // namespace egressd::test
