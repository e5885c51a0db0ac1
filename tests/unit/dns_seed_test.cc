// What a restarted proxy knows before its first answer: each sandbox's book
// seeded from the kernel's resolved map (learned_book.h SeedBook), so the
// quota and an exact name's cap hold across the restart; and the readiness
// self-test's query and the check of its answer (self_test.h), against the
// proxy's own query flow.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "userspace/dns/learned_book.h"
#include "userspace/dns/message.h"
#include "userspace/dns/query_flow.h"
#include "userspace/dns/scope.h"
#include "userspace/dns/self_test.h"

namespace egressd::dns {
namespace {

constexpr uint64_t kNow = 1'000'000'000'000ull;
constexpr uint64_t kSecond = 1'000'000'000ull;

net::IpAddr Ip(const std::string& s) { return *net::IpAddr::Parse(s); }

class NoFlows : public LearnedAddressSink {
 public:
  absl::Status Learn(uint64_t, const net::IpAddr&, uint64_t, uint32_t) override { return absl::OkStatus(); }
  absl::Status Forget(uint64_t, const net::IpAddr& a) override {
    forgotten.insert(a.ToString());
    return absl::OkStatus();
  }
  absl::StatusOr<bool> InUse(uint64_t, const net::IpAddr&) const override { return false; }
  std::set<std::string> forgotten;
};

NameScope Scope() {
  policy::CompiledPolicy p;
  p.names.push_back("api.example.com");
  p.wildcard_suffixes.push_back("cdn.example");
  return NameScope(p);
}

std::vector<net::IpAddr> Ips(const std::string& prefix, int from, int n) {
  std::vector<net::IpAddr> out;
  for (int i = from; i < from + n; ++i) out.push_back(Ip(absl::StrCat(prefix, i)));
  return out;
}

TEST(SeedBook, ExactNamesKeepTheirCapWildcardsAndUnknownRulesCountForTheQuotaExpiredAreSkipped) {
  const NameScope scope = Scope();
  std::vector<LearnedSeed> seeds;
  for (int i = 1; i <= 3; ++i) seeds.push_back({Ip(absl::StrCat("192.0.2.", i)), kNow + i * kSecond, {NameId("api.example.com")}});
  seeds.push_back({Ip("198.51.100.1"), kNow + 10 * kSecond, {NameId("*.cdn.example")}});
  seeds.push_back({Ip("198.51.100.2"), kNow + 10 * kSecond, {NameId("gone.example")}});
  seeds.push_back({Ip("198.51.100.3"), kNow - 1, {NameId("api.example.com")}});  // expired
  LearnedBook book(Bounds{6, 3});
  EXPECT_EQ(SeedBook(book, scope, seeds, kNow), 5u);
  EXPECT_EQ(book.addresses(), 5u);
  EXPECT_EQ(book.HeldBy("api.example.com"), 3u);
  EXPECT_EQ(book.HeldBy("*.cdn.example"), 1u);

  NoFlows sink;
  // The name is at its cap of 3: a new address evicts the least recently
  // answered (earliest expiry) one, 192.0.2.1, as before the restart.
  LearnedBook::Admission adm = book.Admit(7, "api.example.com", {Ip("192.0.2.9")}, kNow, sink);
  ASSERT_EQ(adm.admitted.size(), 1u);
  ASSERT_EQ(adm.evicted.size(), 1u);
  EXPECT_EQ(adm.evicted[0].ToString(), "192.0.2.1");
  book.Commit("api.example.com", Ip("192.0.2.9"), kNow + 100 * kSecond);
  // 5 held, quota 6: one more address for another name, then refused.
  adm = book.Admit(7, "a.cdn.example", Ips("203.0.113.", 1, 2), kNow, sink);
  ASSERT_EQ(adm.admitted.size(), 1u);
  ASSERT_EQ(adm.refused.size(), 1u);
  EXPECT_STREQ(adm.refused[0].why, kRefusedSandboxQuota);
}

TEST(SeedBook, WithoutSeedsTheSameQuotaWouldAdmitEverything) {
  // The control: an empty book (what a restart gave before) admits both.
  LearnedBook book(Bounds{6, 3});
  NoFlows sink;
  EXPECT_EQ(book.Admit(7, "a.cdn.example", Ips("203.0.113.", 1, 2), kNow, sink).admitted.size(), 2u);
}

TEST(SeedBook, AScopeUpdateKeepsAWildcardsSeededAddressesWhileTheRuleStays) {
  LearnedBook book(Bounds{10, 10});
  SeedBook(book, Scope(), {{Ip("198.51.100.1"), kNow + kSecond, {NameId("*.cdn.example")}},
                           {Ip("198.51.100.2"), kNow + kSecond, {NameId("gone.example")}}},
           kNow);
  ASSERT_EQ(book.addresses(), 2u);
  const std::vector<std::string> rules = Scope().Rules();
  const std::set<std::string> rule_set(rules.begin(), rules.end());
  book.RetainNames([&](const std::string& n) { return rule_set.count(n) > 0; });
  EXPECT_EQ(book.addresses(), 1u) << "the unknown rule's address leaves, the wildcard's stays";
  EXPECT_EQ(book.HeldBy("*.cdn.example"), 1u);
}

TEST(SelfTest, TheProxyAnswersTheQueryNxdomainItselfAndTheCheckAcceptsOnlyThat) {
  const Bytes q = SelfTestQuery(0x1234);
  // The proxy's own flow with the self-test's scope (no name): answered
  // locally, never forwarded.
  SandboxScope none;
  Counters c;
  Decision d = Decide(none, q, c);
  ASSERT_EQ(d.kind, Decision::kRespond);
  EXPECT_EQ(c.forwarded.load(), 0u);
  EXPECT_TRUE(CheckSelfTestAnswer(d.response, 0x1234).ok()) << CheckSelfTestAnswer(d.response, 0x1234);
  // Another id, a query echoed back, another rcode, a short message: refused.
  EXPECT_FALSE(CheckSelfTestAnswer(d.response, 0x1235).ok());
  EXPECT_FALSE(CheckSelfTestAnswer(q, 0x1234).ok());
  Bytes servfail = d.response;
  servfail[3] = static_cast<uint8_t>((servfail[3] & 0xf0) | kRcodeServFail);
  absl::Status s = CheckSelfTestAnswer(servfail, 0x1234);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rcode 2"), absl::string_view::npos) << s;
  EXPECT_FALSE(CheckSelfTestAnswer(Bytes(d.response.begin(), d.response.begin() + 11), 0x1234).ok());
  // A scope that allowed the name would forward it: the self-test's scope
  // must stay empty.
  policy::CompiledPolicy p;
  p.wildcard_suffixes.push_back("egressd.invalid");
  SandboxScope some{1, NameScope(p), {}};
  EXPECT_EQ(Decide(some, q, c).kind, Decision::kForward);
}

}  // namespace
}  // namespace egressd::dns
