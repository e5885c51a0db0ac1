// The bounds on what a sandbox learns (userspace/dns/learned_book.h): a
// name's cap evicts its least recently answered addresses that no flow uses
// (never one in use, never one of the answer being learned), the sandbox's
// quota refuses new addresses, and what is refused never reaches the client
// (SERVFAIL with EDE 18 when nothing is left).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "tests/dns/dns_wire.h"
#include "userspace/dns/denial.h"
#include "userspace/dns/learned_book.h"
#include "userspace/dns/query_flow.h"

namespace egressd::dns {
namespace {

using testing::MakeAnswer;
using testing::MakeQuery;
using testing::Parse;
using testing::QueryOpts;
using testing::Rr;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr uint64_t kNow = 1'000'000'000'000ull;
constexpr uint64_t kSecond = 1'000'000'000ull;

net::IpAddr Ip(const std::string& s) { return *net::IpAddr::Parse(s); }

// The kernel's map as the book sees it: what is learned, what a flow uses,
// what was forgotten.
class MapSink : public LearnedAddressSink {
 public:
  absl::Status Learn(uint64_t sandbox, const net::IpAddr& addr, uint64_t expires, uint32_t) override {
    if (fail.count(addr.ToString())) return absl::ResourceExhaustedError("map full");
    auto& e = held[{sandbox, addr.ToString()}];
    e = std::max(e, expires);
    return absl::OkStatus();
  }
  absl::Status Forget(uint64_t sandbox, const net::IpAddr& addr) override {
    forgotten.push_back(addr.ToString());
    if (refuse_forget) return absl::PermissionDeniedError("EPERM");
    if (held.erase({sandbox, addr.ToString()}) == 0) return absl::NotFoundError("no entry");
    return absl::OkStatus();
  }
  absl::StatusOr<bool> InUse(uint64_t, const net::IpAddr& addr) const override {
    if (in_use_unknown) return absl::InternalError("cannot read");
    return in_use.count(addr.ToString()) > 0;
  }
  size_t HeldFor(uint64_t sandbox) const {
    size_t n = 0;
    for (const auto& [k, v] : held) n += k.first == sandbox;
    return n;
  }
  std::map<std::pair<uint64_t, std::string>, uint64_t> held;
  std::set<std::string> in_use, fail;
  std::vector<std::string> forgotten;
  bool refuse_forget = false, in_use_unknown = false;
};

// Admit then write what is admitted, as Finish does.
LearnedBook::Admission Learn(LearnedBook& book, MapSink& sink, const std::string& name,
                             const std::vector<std::string>& addrs, uint64_t now = kNow,
                             uint64_t life = 600 * kSecond) {
  std::vector<net::IpAddr> ips;
  for (const auto& a : addrs) ips.push_back(Ip(a));
  LearnedBook::Admission adm = book.Admit(7, name, ips, now, sink);
  for (const auto& a : adm.admitted) {
    if (sink.Learn(7, a, now + life, 1).ok()) book.Commit(name, a, now + life);
  }
  return adm;
}

std::vector<std::string> Text(const std::vector<net::IpAddr>& v) {
  std::vector<std::string> out;
  for (const auto& a : v) out.push_back(a.ToString());
  return out;
}

TEST(LearnedBook, PastTheNameCapTheLeastRecentlyAnsweredAreEvicted) {
  LearnedBook book({/*per_sandbox=*/100, /*per_name=*/4});
  MapSink sink;
  Learn(book, sink, "s3.test", {"192.0.2.1", "192.0.2.2"});
  Learn(book, sink, "s3.test", {"192.0.2.3", "192.0.2.4"});
  // .1 answered again: it is now the most recent.
  Learn(book, sink, "s3.test", {"192.0.2.1"});
  auto adm = Learn(book, sink, "s3.test", {"192.0.2.5", "192.0.2.6"});
  EXPECT_THAT(Text(adm.admitted), ElementsAre("192.0.2.5", "192.0.2.6"));
  EXPECT_THAT(Text(adm.evicted), ElementsAre("192.0.2.2", "192.0.2.3"));
  EXPECT_THAT(adm.refused, IsEmpty());
  EXPECT_EQ(book.HeldBy("s3.test"), 4u);
  EXPECT_EQ(sink.HeldFor(7), 4u);  // forgotten from the kernel's map too
  EXPECT_FALSE(sink.held.count({7, "192.0.2.2"}));
  EXPECT_TRUE(sink.held.count({7, "192.0.2.1"}));
}

TEST(LearnedBook, AnAddressInUseIsNeverEvicted) {
  LearnedBook book({100, 3});
  MapSink sink;
  Learn(book, sink, "s3.test", {"192.0.2.1", "192.0.2.2", "192.0.2.3"});
  sink.in_use = {"192.0.2.1", "192.0.2.2"};
  auto adm = Learn(book, sink, "s3.test", {"192.0.2.4", "192.0.2.5"});
  // Only .3 could go: .4 takes its place, .5 is refused.
  EXPECT_THAT(Text(adm.evicted), ElementsAre("192.0.2.3"));
  EXPECT_THAT(Text(adm.admitted), ElementsAre("192.0.2.4"));
  ASSERT_EQ(adm.refused.size(), 1u);
  EXPECT_EQ(adm.refused[0].addr.ToString(), "192.0.2.5");
  EXPECT_STREQ(adm.refused[0].why, kRefusedNameCap);
  EXPECT_TRUE(sink.held.count({7, "192.0.2.1"}));
  EXPECT_TRUE(sink.held.count({7, "192.0.2.2"}));
  EXPECT_THAT(sink.forgotten, ElementsAre("192.0.2.3"));
}

TEST(LearnedBook, UseThatCannotBeReadCountsAsInUse) {
  LearnedBook book({100, 2});
  MapSink sink;
  Learn(book, sink, "s3.test", {"192.0.2.1", "192.0.2.2"});
  sink.in_use_unknown = true;
  auto adm = Learn(book, sink, "s3.test", {"192.0.2.3"});
  EXPECT_THAT(adm.evicted, IsEmpty());
  EXPECT_THAT(sink.forgotten, IsEmpty());
  ASSERT_EQ(adm.refused.size(), 1u);
}

TEST(LearnedBook, AnAnswerLargerThanTheCapKeepsItsFirstAddresses) {
  LearnedBook book({100, 3});
  MapSink sink;
  auto adm = Learn(book, sink, "many.test", {"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5"});
  EXPECT_THAT(Text(adm.admitted), ElementsAre("192.0.2.1", "192.0.2.2", "192.0.2.3"));
  EXPECT_EQ(adm.refused.size(), 2u);
  EXPECT_THAT(adm.evicted, IsEmpty());  // never an address of the answer itself
}

TEST(LearnedBook, AKernelThatRefusesToForgetKeepsTheAddressBooked) {
  LearnedBook book({100, 1});
  MapSink sink;
  Learn(book, sink, "s3.test", {"192.0.2.1"});
  sink.refuse_forget = true;
  auto adm = Learn(book, sink, "s3.test", {"192.0.2.2"});
  EXPECT_EQ(adm.forget_failed, 1u);
  EXPECT_THAT(adm.evicted, IsEmpty());
  EXPECT_EQ(adm.refused.size(), 1u);
  EXPECT_EQ(book.HeldBy("s3.test"), 1u);
}

TEST(LearnedBook, ForgetOfAnEntryAlreadyGoneIsAnEviction) {
  LearnedBook book({100, 1});
  MapSink sink;
  Learn(book, sink, "s3.test", {"192.0.2.1"});
  sink.held.clear();  // collected by the kernel side meanwhile
  auto adm = Learn(book, sink, "s3.test", {"192.0.2.2"});
  EXPECT_THAT(Text(adm.evicted), ElementsAre("192.0.2.1"));
  EXPECT_THAT(Text(adm.admitted), ElementsAre("192.0.2.2"));
}

TEST(LearnedBook, PastTheQuotaNewAddressesAreRefusedAndNothingIsEvicted) {
  LearnedBook book({/*per_sandbox=*/4, /*per_name=*/3});
  MapSink sink;
  Learn(book, sink, "a.test", {"192.0.2.1", "192.0.2.2", "192.0.2.3"});
  auto b = Learn(book, sink, "b.test", {"198.51.100.1", "198.51.100.2"});
  EXPECT_THAT(Text(b.admitted), ElementsAre("198.51.100.1"));
  ASSERT_EQ(b.refused.size(), 1u);
  EXPECT_STREQ(b.refused[0].why, kRefusedSandboxQuota);
  EXPECT_THAT(b.evicted, IsEmpty());  // one name never pushes out another's
  EXPECT_EQ(book.addresses(), 4u);
  EXPECT_EQ(sink.HeldFor(7), 4u);
  // An address the sandbox already holds takes no quota: b may share it.
  auto shared = Learn(book, sink, "b.test", {"192.0.2.1"});
  EXPECT_THAT(Text(shared.admitted), ElementsAre("192.0.2.1"));
  // Refreshes always pass.
  auto again = Learn(book, sink, "a.test", {"192.0.2.2"});
  EXPECT_THAT(Text(again.admitted), ElementsAre("192.0.2.2"));
}

TEST(LearnedBook, ASharedAddressLeavesTheKernelOnlyWithItsLastName) {
  LearnedBook book({100, 1});
  MapSink sink;
  Learn(book, sink, "a.test", {"192.0.2.1"});
  Learn(book, sink, "b.test", {"192.0.2.1"});
  auto adm = Learn(book, sink, "a.test", {"192.0.2.2"});
  // a's cap pushed .1 out of a's list, but b still holds it in the kernel.
  EXPECT_THAT(adm.evicted, IsEmpty());
  EXPECT_THAT(sink.forgotten, IsEmpty());
  EXPECT_TRUE(sink.held.count({7, "192.0.2.1"}));
  EXPECT_EQ(book.HeldBy("a.test"), 1u);
  EXPECT_EQ(book.HeldBy("b.test"), 1u);
  auto b = Learn(book, sink, "b.test", {"192.0.2.3"});
  EXPECT_THAT(Text(b.evicted), ElementsAre("192.0.2.1"));
  EXPECT_EQ(book.addresses(), 2u);
}

TEST(LearnedBook, ExpiredAddressesLeaveTheBookAndFreeTheQuota) {
  LearnedBook book({2, 2});
  MapSink sink;
  Learn(book, sink, "a.test", {"192.0.2.1", "192.0.2.2"}, kNow, 10 * kSecond);
  auto full = Learn(book, sink, "b.test", {"198.51.100.1"}, kNow + 5 * kSecond);
  EXPECT_EQ(full.refused.size(), 1u);
  auto later = Learn(book, sink, "b.test", {"198.51.100.1"}, kNow + 10 * kSecond);
  EXPECT_THAT(Text(later.admitted), ElementsAre("198.51.100.1"));
  EXPECT_EQ(book.HeldBy("a.test"), 0u);
  EXPECT_EQ(book.addresses(), 1u);
  EXPECT_THAT(sink.forgotten, IsEmpty());  // collecting is the kernel side's
}

TEST(LearnedBook, AScopeUpdateDropsTheNamesNoLongerAllowed) {
  LearnedBook book({3, 3});
  MapSink sink;
  Learn(book, sink, "a.test", {"192.0.2.1", "192.0.2.2"});
  Learn(book, sink, "b.test", {"192.0.2.2", "198.51.100.1"});
  book.RetainNames([](const std::string& n) { return n == "b.test"; });
  EXPECT_EQ(book.names(), 1u);
  EXPECT_EQ(book.HeldBy("a.test"), 0u);
  EXPECT_EQ(book.addresses(), 2u);  // .2 stays: b holds it
  auto adm = Learn(book, sink, "c.test", {"203.0.113.1"});
  EXPECT_THAT(Text(adm.admitted), ElementsAre("203.0.113.1"));
}

// S3-like churn through the book alone: 8 new addresses per answer, many
// answers: the name never holds more than its cap, the kernel never more
// than the book, and another name's addresses are never touched.
TEST(LearnedBook, ChurnStaysBoundedAndLeavesOtherNamesAlone) {
  LearnedBook book({/*per_sandbox=*/64, /*per_name=*/16});
  MapSink sink;
  Learn(book, sink, "api.test", {"203.0.113.10"});
  for (int i = 0; i < 1000; ++i) {
    std::vector<std::string> addrs;
    for (int k = 0; k < 8; ++k) addrs.push_back(absl::StrCat("10.", (i * 8 + k) / 65536, ".", ((i * 8 + k) / 256) % 256, ".", (i * 8 + k) % 256));
    auto adm = Learn(book, sink, "bucket.s3.test", addrs, kNow + i * kSecond / 30);
    ASSERT_EQ(adm.admitted.size(), 8u) << i;
    ASSERT_LE(book.HeldBy("bucket.s3.test"), 16u);
    ASSERT_EQ(sink.HeldFor(7), book.addresses());
  }
  EXPECT_TRUE(sink.held.count({7, "203.0.113.10"}));
  EXPECT_EQ(book.HeldBy("api.test"), 1u);
}

// ---- through Finish: what the client gets ----

SandboxScope Scope() {
  policy::CompiledPolicy p;
  p.names = {"api.example.com", "s3.example.com"};
  SandboxScope s;
  s.sandbox_id = 7;
  s.names = NameScope(p);
  return s;
}

struct Asked {
  testing::Parsed answer;
  QueryEvent ev;
};

Asked Ask(LearnedBook& book, MapSink& sink, Counters& c, const std::string& name,
          const std::vector<std::string>& addrs, bool edns = true) {
  QueryOpts o;
  o.edns = edns;
  std::vector<Rr> rrs;
  for (const auto& a : addrs) rrs.push_back({0, name, KNOT_RRTYPE_A, 5, a});
  Asked out;
  Decision d = Decide(Scope(), MakeQuery(name, o), c, &out.ev);
  EXPECT_EQ(d.kind, Decision::kForward);
  out.answer = Parse(Finish(Scope(), d, MakeAnswer(d.upstream_query, rrs), kMaxMessage, sink, Lifetime{}, kNow, c,
                            &out.ev, &book));
  EXPECT_TRUE(out.answer.ok);
  return out;
}

TEST(DnsBounds, TheAnswerCarriesOnlyWhatWasLearnedAndSaysWhy) {
  LearnedBook book({/*per_sandbox=*/3, /*per_name=*/8});
  MapSink sink;
  Counters c;
  Ask(book, sink, c, "api.example.com", {"192.0.2.1", "192.0.2.2"});
  Asked r = Ask(book, sink, c, "s3.example.com", {"198.51.100.1", "198.51.100.2"});
  EXPECT_EQ(r.answer.rcode, kRcodeNoError);
  EXPECT_THAT(r.answer.Addresses(), ElementsAre("198.51.100.1"));
  EXPECT_EQ(r.answer.ede_code, kEdeProhibited);
  EXPECT_THAT(r.answer.ede_text, ::testing::HasSubstr("quota of 3"));
  EXPECT_EQ(c.quota_refused, 1u);
  EXPECT_FALSE(sink.held.count({7, "198.51.100.2"}));
  ASSERT_EQ(r.ev.refused.size(), 1u);
  EXPECT_EQ(r.ev.refused[0].why, kRefusedSandboxQuota);
  ASSERT_TRUE(r.ev.held);
  EXPECT_EQ(r.ev.held->name, 1u);
  EXPECT_EQ(r.ev.held->sandbox, 3u);
}

TEST(DnsBounds, NothingLeftIsServfailWithEde18) {
  LearnedBook book({2, 8});
  MapSink sink;
  Counters c;
  Ask(book, sink, c, "api.example.com", {"192.0.2.1", "192.0.2.2"});
  Asked r = Ask(book, sink, c, "s3.example.com", {"198.51.100.1"});
  EXPECT_EQ(r.answer.rcode, kRcodeServFail);
  EXPECT_THAT(r.answer.Addresses(), IsEmpty());
  EXPECT_EQ(r.answer.ede_code, kEdeProhibited);
  EXPECT_THAT(r.answer.ede_text, ::testing::HasSubstr("quota"));
  EXPECT_EQ(c.servfail, 1u);
  // Without EDNS: SERVFAIL all the same, no OPT.
  Asked plain = Ask(book, sink, c, "s3.example.com", {"198.51.100.1"}, /*edns=*/false);
  EXPECT_EQ(plain.answer.rcode, kRcodeServFail);
  EXPECT_FALSE(plain.answer.edns);
  // The name already learned still resolves.
  Asked api = Ask(book, sink, c, "api.example.com", {"192.0.2.1", "192.0.2.2"});
  EXPECT_EQ(api.answer.rcode, kRcodeNoError);
  EXPECT_THAT(api.answer.Addresses(), UnorderedElementsAre("192.0.2.1", "192.0.2.2"));
  EXPECT_EQ(api.answer.ede_code, -1);
}

TEST(DnsBounds, EvictionsAreCountedAndAudited) {
  LearnedBook book({100, 2});
  MapSink sink;
  Counters c;
  Ask(book, sink, c, "s3.example.com", {"198.51.100.1", "198.51.100.2"});
  Asked r = Ask(book, sink, c, "s3.example.com", {"198.51.100.3", "198.51.100.4"});
  EXPECT_EQ(r.answer.rcode, kRcodeNoError);
  EXPECT_THAT(r.answer.Addresses(), ElementsAre("198.51.100.3", "198.51.100.4"));
  EXPECT_EQ(r.answer.ede_code, -1);
  EXPECT_EQ(c.evicted, 2u);
  EXPECT_THAT(Text(r.ev.evicted), ElementsAre("198.51.100.1", "198.51.100.2"));
  // All in use: nothing can go, the answer is SERVFAIL naming the cap.
  sink.in_use = {"198.51.100.3", "198.51.100.4"};
  Asked full = Ask(book, sink, c, "s3.example.com", {"198.51.100.5"});
  EXPECT_EQ(full.answer.rcode, kRcodeServFail);
  EXPECT_EQ(full.answer.ede_code, kEdeProhibited);
  EXPECT_THAT(full.answer.ede_text, ::testing::HasSubstr("cap of 2"));
  EXPECT_EQ(c.cap_refused, 1u);
}

TEST(DnsBounds, AFailedWriteStillSaysEdeOther) {
  LearnedBook book;
  MapSink sink;
  sink.fail = {"198.51.100.1"};
  Counters c;
  Asked r = Ask(book, sink, c, "s3.example.com", {"198.51.100.1"});
  EXPECT_EQ(r.answer.rcode, kRcodeServFail);
  EXPECT_EQ(r.answer.ede_code, kEdeOther);
  EXPECT_EQ(book.addresses(), 0u);  // what did not land is not booked
}

}  // namespace
}  // namespace egressd::dns
