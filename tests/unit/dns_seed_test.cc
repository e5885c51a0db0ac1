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
#include "userspace/dns/qname_key.h"
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

std::shared_ptr<const QnameKey> Key() {
  auto k = QnameKey::FromBytes(QnameKey::Bytes{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  EXPECT_TRUE(k.ok()) << k.status();
  return k.ok() ? *k : nullptr;
}

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

// A wildcard's addresses after a restart: the map says which question name
// last wrote each (qname_id), so they are booked under that name, found by
// its next answer, and its cap holds as before the restart; the quota too.
TEST(SeedBook, AWildcardNamesCapHoldsAcrossARestart) {
  const NameScope scope = Scope();
  const auto key = Key();
  std::vector<LearnedSeed> seeds;
  // a.cdn.example held its cap of 3 through *.cdn.example; b.cdn.example one.
  for (int i = 1; i <= 3; ++i) {
    seeds.push_back({Ip(absl::StrCat("198.51.100.", i)), kNow + i * kSecond, {NameId("*.cdn.example")},
                     key->Id("a.cdn.example")});
  }
  seeds.push_back({Ip("198.51.100.9"), kNow + kSecond, {NameId("*.cdn.example")}, key->Id("b.cdn.example")});
  LearnedBook book(Bounds{6, 3}, key);
  ASSERT_EQ(SeedBook(book, scope, seeds, kNow), 4u);
  NoFlows sink;
  // Two new addresses for a.cdn.example: each evicts one of its own oldest
  // (198.51.100.1, then .2); the name never holds more than its cap.
  LearnedBook::Admission adm = book.Admit(7, "a.cdn.example", Ips("203.0.113.", 1, 2), kNow, sink);
  EXPECT_EQ(adm.admitted.size(), 2u);
  ASSERT_EQ(adm.evicted.size(), 2u);
  EXPECT_EQ(adm.evicted[0].ToString(), "198.51.100.1");
  EXPECT_EQ(adm.evicted[1].ToString(), "198.51.100.2");
  for (const auto& a : adm.admitted) book.Commit("a.cdn.example", a, kNow + 100 * kSecond);
  EXPECT_EQ(book.HeldBy("a.cdn.example"), 3u);
  EXPECT_EQ(book.addresses(), 4u);
  // b.cdn.example's seeded address is its own, not a.cdn.example's.
  EXPECT_EQ(book.HeldBy("b.cdn.example"), 0u) << "booked until its name answers";
  adm = book.Admit(7, "b.cdn.example", Ips("203.0.113.", 10, 3), kNow, sink);
  EXPECT_EQ(adm.admitted.size(), 3u);
  ASSERT_EQ(adm.evicted.size(), 1u) << "b held one: the third new address evicts it";
  EXPECT_EQ(adm.evicted[0].ToString(), "198.51.100.9");
  for (const auto& a : adm.admitted) book.Commit("b.cdn.example", a, kNow + 100 * kSecond);
  // The quota (6) counts everything: one more name gets nothing.
  EXPECT_EQ(book.addresses(), 6u);
  adm = book.Admit(7, "c.cdn.example", Ips("203.0.113.", 20, 1), kNow, sink);
  ASSERT_EQ(adm.refused.size(), 1u);
  EXPECT_STREQ(adm.refused[0].why, kRefusedSandboxQuota);
}

// The seeds' question ids are keyed (qname_key.h): a book with another key
// (or none) adopts nothing, so a name's cap starts from zero while the
// seeded addresses still count for the quota under their rule.
TEST(SeedBook, SeedsOfAnotherKeyAreNotAdoptedButStillCountForTheQuota) {
  const auto key = Key();
  auto other = QnameKey::FromBytes(QnameKey::Bytes{9});
  ASSERT_TRUE(other.ok());
  for (const std::shared_ptr<const QnameKey>& k : {*other, std::shared_ptr<const QnameKey>()}) {
    std::vector<LearnedSeed> seeds;
    for (int i = 1; i <= 3; ++i) {
      seeds.push_back({Ip(absl::StrCat("198.51.100.", i)), kNow + i * kSecond, {NameId("*.cdn.example")},
                       key->Id("a.cdn.example")});
    }
    LearnedBook book(Bounds{6, 3}, k);
    ASSERT_EQ(SeedBook(book, Scope(), seeds, kNow), 3u);
    NoFlows sink;
    LearnedBook::Admission adm = book.Admit(7, "a.cdn.example", Ips("203.0.113.", 1, 2), kNow, sink);
    EXPECT_EQ(adm.admitted.size(), 2u);
    EXPECT_TRUE(adm.evicted.empty()) << "nothing adopted: the seeded three are not a.cdn.example's";
    EXPECT_EQ(book.addresses(), 3u) << "the seeded addresses still count for the quota";
  }
}

// A scope update while a seeded wildcard name has not answered yet: kept
// while its rule stays, dropped with it.
TEST(SeedBook, ASeededWildcardNameFollowsItsRule) {
  const auto key = Key();
  LearnedBook book(Bounds{10, 10}, key);
  SeedBook(book, Scope(), {{Ip("198.51.100.1"), kNow + kSecond, {NameId("*.cdn.example")}, key->Id("a.cdn.example")}},
           kNow);
  book.RetainNames([](const std::string& n) { return n == "*.cdn.example"; });
  EXPECT_EQ(book.addresses(), 1u) << "its rule stays";
  book.RetainNames([](const std::string&) { return false; });
  EXPECT_EQ(book.addresses(), 0u) << "its rule went";
}

// A test that timed out leaves its answer to arrive later on the self-test's
// socket: the next test drops it (another id) and waits for its own, which is
// judged as usual, so one slow answer cannot keep readyz at 503.
TEST(SelfTest, AnEarlierTestsLateAnswerIsDroppedNotJudged) {
  SandboxScope none;
  Counters c;
  const Bytes late = Decide(none, SelfTestQuery(0x1111), c).response;
  const Bytes own = Decide(none, SelfTestQuery(0x2222), c).response;
  EXPECT_TRUE(IsEarlierSelfTestAnswer(late, 0x2222)) << "the late answer is dropped";
  EXPECT_FALSE(IsEarlierSelfTestAnswer(own, 0x2222)) << "its own answer is judged";
  EXPECT_TRUE(CheckSelfTestAnswer(own, 0x2222).ok());
  // Anything else with the test's id is judged, and fails on its own fault.
  Bytes short_own(own.begin(), own.begin() + 11);
  EXPECT_FALSE(IsEarlierSelfTestAnswer(short_own, 0x2222));
  EXPECT_FALSE(CheckSelfTestAnswer(short_own, 0x2222).ok());
  EXPECT_FALSE(IsEarlierSelfTestAnswer(Bytes{0x22}, 0x2222)) << "too short to carry an id: judged (and refused)";
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
