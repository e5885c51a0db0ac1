// Issue 12's "policy changes that add, remove and narrow names while flows
// run", end to end through the kernel redirect and `egressctl dns serve`
// (docs/dns.md "Policy changes"; the removal case is in
// dns_lifetime_test.cc, APolicyChangeCutsTheRemovedNamesFlowAndKeepsTheKeptNames):
//  * adding a name leaves a running flow and its learned address alone, and
//    the added name, refused locally before (never asked upstream), resolves
//    and connects at once;
//  * narrowing a wildcard to one of its names: as documented ("Limits of the
//    provenance"), every address the wildcard taught goes, the kept name's
//    too, and the flows to them are cut; the removed name is refused
//    locally, and the kept one re-learns at its next query.
// The flows are egressd-probe hold rounds to RoundEcho, which counts their
// lines at the lab host.
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dns_lifetime.h"
#include "round_echo.h"

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
// addresses (both learned through the wildcard) run. Learned entries carry
// the rule that taught them, not the name asked (docs/dns.md "Limits of the
// provenance"; ResolvedTable::KeepRules keeps an entry only if one of its
// rules is in the new policy): the flip drops both addresses, a's too. So,
// as documented: b's name is NXDOMAIN at once (never asked upstream again),
// b's address is refused for new connects at once and b's running flow is
// cut at its next packet (the backstop finds no entry; "a socket connected
// to a dropped address is cut"); a's address leaves the map as well
// (`egressctl status` lists neither after the flip), a new connect to it is
// refused and a's flow is cut too, until a's next query re-learns the
// address under the exact rule, after which it connects again.
TEST_F(DnsLifetime, NarrowingAWildcardToOneNameDropsWhatTheWildcardTaughtAndCutsItsFlows) {
  Upstream(600);
  const std::string cfg = Config("");
  RoundEcho echo(lab().world_netns(), kEchoPort);
  ASSERT_TRUE(echo.ready()) << "a TCP echo on port " << kEchoPort << " in the lab's world";
  DnsSandbox s = sandboxes_.Add({"--config", cfg, "--egress", kWildcard}, /*pod_endpoint=*/false);
  ASSERT_NE(s.port, 0);
  Serve(cfg);
  ASSERT_EQ(Resolve(s, kWildA), lab::kPublicC4);
  ASSERT_EQ(Resolve(s, kWildB), lab::kPublicF4);
  const auto status_before = StatusEntries(s);
  for (const char* addr : {lab::kPublicC4, lab::kPublicF4}) {
    ASSERT_EQ(status_before.count(addr), 1u) << addr;
    EXPECT_EQ(status_before.at(addr)["rules"], nlohmann::json::array({kWildcard})) << addr;
  }

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
  // a: the wildcard taught it, so it went too (the documented limit).
  EXPECT_FALSE(Entry(s, lab::kPublicC4).has_value()) << "learned through the removed wildcard";
  EXPECT_EQ(Errno(Connect(s, lab::kPublicC4)), "EPERM") << "a's address, not asked again since the change";
  const auto status_after = StatusEntries(s);
  EXPECT_EQ(status_after.count(lab::kPublicC4), 0u);
  EXPECT_EQ(status_after.count(lab::kPublicF4), 0u);

  // Both flows are cut: no round begun after the change is echoed, and the
  // lab host received exactly the echoed rounds. Both end (their rounds time
  // out) before a is asked again: a re-learned entry would pass a's old
  // socket again.
  for (auto [bg, rounds] : {std::pair{&a_flow, &a_rounds}, std::pair{&b_flow, &b_rounds}}) {
    RunResult rest = bg->Wait(Scaled(500ms) * kRounds + interval * kRounds + Scaled(60s));
    for (auto& l : lab::ParseProbeLines(rest.out)) rounds->push_back(l);
    ASSERT_EQ(rounds->size(), size_t(kRounds) + 1) << rest.Describe();
  }
  const RoundCount a = CountRounds(a_rounds, flipped_ms), b = CountRounds(b_rounds, flipped_ms);
  EXPECT_GE(a.after, 5) << "a's flow tried well past the change";
  EXPECT_GE(b.after, 5) << "b's flow tried well past the change";
  EXPECT_EQ(a.after_ok, 0) << "a's flow is cut (its entry went with the wildcard)";
  EXPECT_EQ(b.after_ok, 0) << "b's flow is cut at its next packet";
  EXPECT_EQ(echo.Lines(lab::kPublicC4), uint64_t(a.ok)) << "a's rounds at the lab host";
  EXPECT_EQ(echo.Lines(lab::kPublicF4), uint64_t(b.ok)) << "b's rounds at the lab host";
  EXPECT_EQ(upstream_->QueriesFor(kWildB), 1u) << "b's NXDOMAIN never reached the upstream: " << upstream_->Log();

  // a's next query re-learns it under the exact rule; then it connects, and
  // that connect is the only one at the lab host's port 80.
  ASSERT_EQ(Resolve(s, kWildA), lab::kPublicC4);
  EXPECT_EQ(upstream_->QueriesFor(kWildA), 2u) << upstream_->Log();
  EXPECT_TRUE(Ok(Connect(s, lab::kPublicC4))) << "a, asked again";
  const auto relearned = StatusEntries(s);
  ASSERT_EQ(relearned.count(lab::kPublicC4), 1u);
  EXPECT_EQ(relearned.at(lab::kPublicC4)["rules"], nlohmann::json::array({kWildA}));
  EXPECT_EQ(relearned.count(lab::kPublicF4), 0u);
  EXPECT_EQ(Errno(Connect(s, lab::kPublicF4)), "EPERM") << "b stays refused";
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(lab::kPublicC4, 80) == 1; })) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(lab::kPublicF4, 80), 0u) << lab().CountersSummary();
  EXPECT_EQ(echo.Accepts(lab::kPublicC4), 1u);
  EXPECT_EQ(echo.Accepts(lab::kPublicF4), 1u);
}

}  // namespace
}  // namespace egressd::test
