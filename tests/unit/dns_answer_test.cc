// What of an upstream answer is learned and passed on, and the rule "map
// first": an answer is released only after its writes returned, and carries
// no address the kernel does not hold.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/dns/dns_wire.h"
#include "userspace/dns/answer_filter.h"
#include "userspace/dns/denial.h"
#include "userspace/dns/query_flow.h"
#include "userspace/policy/floor.h"

namespace egressd::dns {
namespace {

using testing::FakeSink;
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

SandboxScope Sandbox(policy::Floor floor = policy::Floor::kConnected) {
  policy::CompiledPolicy p;
  p.names = {"api.example.com", "chain.example.com", "many.example.com", "svc.example.com"};
  p.wildcard_suffixes = {"cdn.example.net"};
  SandboxScope s;
  s.sandbox_id = 7;
  s.names = NameScope(p);
  s.protected_cidrs = policy::FloorProtected(floor);
  return s;
}

struct Run {
  testing::Parsed answer;
  FakeSink sink;
  Counters counters;
};

// Decide + Finish for `name`, the upstream answering `rrs`.
std::unique_ptr<Run> Ask(const std::string& name, const std::vector<Rr>& rrs, size_t max_size = kMaxMessage,
                         QueryOpts o = {}, std::vector<std::string> fail = {}, SandboxScope sb = Sandbox()) {
  auto r = std::make_unique<Run>();
  r->sink.fail = std::move(fail);
  Bytes q = MakeQuery(name, o);
  Decision d = Decide(sb, q, r->counters);
  EXPECT_EQ(d.kind, Decision::kForward) << name;
  Bytes upstream = MakeAnswer(d.upstream_query, rrs);
  Bytes out = Finish(sb, d, upstream, max_size, r->sink, Lifetime{}, kNow, r->counters);
  r->answer = Parse(out);
  EXPECT_TRUE(r->answer.ok);
  EXPECT_EQ(r->answer.id, o.id);
  return r;
}

TEST(DnsAnswer, LearnsTheAnswerAndReleasesItAfterwards) {
  auto r = Ask("API.example.com", {{0, "api.example.com", KNOT_RRTYPE_A, 60, "192.0.2.10"}});
  EXPECT_THAT(r->sink.Addresses(), ElementsAre("192.0.2.10"));
  EXPECT_EQ(r->sink.learned[0].sandbox, 7u);
  EXPECT_EQ(r->sink.learned[0].name_id, NameId("api.example.com"));
  EXPECT_THAT(r->answer.Addresses(), ElementsAre("192.0.2.10"));
  EXPECT_EQ(r->answer.rcode, 0);
  EXPECT_EQ(r->counters.learned, 1u);
}

TEST(DnsAnswer, LifetimeIsMaxOfTtlAndMinimumPlusGrace) {
  Lifetime l;
  auto r = Ask("api.example.com", {{0, "api.example.com", KNOT_RRTYPE_A, 5, "192.0.2.1"},
                                   {0, "api.example.com", KNOT_RRTYPE_A, 3600, "192.0.2.2"}});
  ASSERT_EQ(r->sink.learned.size(), 2u);
  EXPECT_EQ(r->sink.learned[0].expires, kNow + (l.min_ttl_s + l.grace_s) * kSecond);
  EXPECT_EQ(r->sink.learned[1].expires, kNow + (3600 + l.grace_s) * kSecond);
  EXPECT_EQ(l.ExpiryNs(kNow, 0), kNow + (l.min_ttl_s + l.grace_s) * kSecond);  // TTL 0 still gets the minimum
}

TEST(DnsAnswer, SevenHopChainIsLearnedWithTheChainsTtl) {
  std::vector<Rr> rrs;
  std::string at = "chain.example.com";
  for (int i = 1; i <= 7; ++i) {
    std::string next = "hop" + std::to_string(i) + ".other.example";
    rrs.push_back({0, at, KNOT_RRTYPE_CNAME, i == 3 ? 400u : 4000u, next});
    at = next;
  }
  rrs.push_back({0, at, KNOT_RRTYPE_A, 5000, "198.51.100.7"});
  auto r = Ask("chain.example.com", rrs);
  EXPECT_THAT(r->sink.Addresses(), ElementsAre("198.51.100.7"));
  EXPECT_EQ(r->sink.learned[0].expires, kNow + (400 + Lifetime{}.grace_s) * kSecond);  // the smallest TTL on the way
  EXPECT_THAT(r->answer.Addresses(), ElementsAre("198.51.100.7"));
  EXPECT_EQ(r->answer.records.size(), 8u);  // the CNAMEs pass through
}

TEST(DnsAnswer, ChainLongerThanTheCapTeachesNothing) {
  std::vector<Rr> rrs;
  std::string at = "chain.example.com";
  for (int i = 1; i <= kMaxChain + 1; ++i) {
    std::string next = "hop" + std::to_string(i) + ".other.example";
    rrs.push_back({0, at, KNOT_RRTYPE_CNAME, 60, next});
    at = next;
  }
  rrs.push_back({0, at, KNOT_RRTYPE_A, 60, "198.51.100.9"});
  auto r = Ask("chain.example.com", rrs);
  EXPECT_THAT(r->sink.Addresses(), IsEmpty());
  EXPECT_THAT(r->answer.Addresses(), IsEmpty());
}

TEST(DnsAnswer, OutOfChainRecordsAreNeitherLearnedNorPassedOn) {
  auto r = Ask("api.example.com", {
                                      {0, "api.example.com", KNOT_RRTYPE_A, 60, "192.0.2.10"},
                                      {0, "unrelated.example.org", KNOT_RRTYPE_A, 60, "203.0.113.66"},
                                      {0, "api.example.com", KNOT_RRTYPE_A, 60, "192.0.2.11", KNOT_CLASS_CH},
                                      {1, "example.com", KNOT_RRTYPE_NS, 60, "ns.example.com"},
                                      {2, "ns.example.com", KNOT_RRTYPE_A, 60, "203.0.113.53"},
                                  });
  EXPECT_THAT(r->sink.Addresses(), ElementsAre("192.0.2.10"));
  EXPECT_THAT(r->answer.Addresses(), ElementsAre("192.0.2.10"));
  EXPECT_EQ(r->counters.out_of_chain_removed, 3u);
  // The NS record (no address) passes.
  ASSERT_EQ(r->answer.records.size(), 2u);
  EXPECT_EQ(r->answer.records[1].type, KNOT_RRTYPE_NS);
}

TEST(DnsAnswer, CnameOffTheChainDoesNotExtendIt) {
  auto r = Ask("api.example.com", {
                                      {0, "elsewhere.example", KNOT_RRTYPE_CNAME, 60, "target.example"},
                                      {0, "target.example", KNOT_RRTYPE_A, 60, "203.0.113.1"},
                                  });
  EXPECT_THAT(r->sink.Addresses(), IsEmpty());
  EXPECT_THAT(r->answer.Addresses(), IsEmpty());
}

TEST(DnsAnswer, HundredsOfRecordsOverTcp) {
  std::vector<Rr> rrs;
  for (int i = 0; i < 150; ++i) {
    rrs.push_back({0, "many.example.com", KNOT_RRTYPE_A, 60, "10." + std::to_string(100 + i / 200) + ".0." + std::to_string(i)});
  }
  auto r = Ask("many.example.com", rrs);  // connected floor: 10/8 is not protected
  EXPECT_EQ(r->sink.learned.size(), 150u);
  EXPECT_EQ(r->answer.Addresses().size(), 150u);
  EXPECT_FALSE(r->answer.tc);
}

TEST(DnsAnswer, TooBigForUdpIsTruncatedAndTeachesNothing) {
  std::vector<Rr> rrs;
  for (int i = 0; i < 150; ++i) rrs.push_back({0, "many.example.com", KNOT_RRTYPE_A, 60, "192.0.2." + std::to_string(i)});
  auto r = Ask("many.example.com", rrs, kClassicUdpSize);
  EXPECT_TRUE(r->answer.tc);
  EXPECT_THAT(r->answer.Addresses(), IsEmpty());
  EXPECT_THAT(r->sink.Addresses(), IsEmpty());
  EXPECT_EQ(r->counters.truncated, 1u);
}

TEST(DnsAnswer, UpstreamTruncatedMidRecordIsTcToTheClient) {
  SandboxScope sb = Sandbox();
  Counters c;
  FakeSink sink;
  Decision d = Decide(sb, MakeQuery("many.example.com"), c);
  std::vector<Rr> rrs;
  for (int i = 0; i < 40; ++i) rrs.push_back({0, "many.example.com", KNOT_RRTYPE_A, 60, "192.0.2." + std::to_string(i)});
  Bytes up = MakeAnswer(d.upstream_query, rrs, 0, /*tc=*/true);
  up.resize(up.size() - 7);  // cut inside the last record, as a truncating server may
  auto p = Parse(Finish(sb, d, up, kMaxMessage, sink, Lifetime{}, kNow, c));
  EXPECT_TRUE(p.tc);
  EXPECT_EQ(p.rcode, 0);
  EXPECT_THAT(p.Addresses(), IsEmpty());
  EXPECT_THAT(sink.Addresses(), IsEmpty());
}

TEST(DnsAnswer, ClientsEdnsSizeIsHonoured) {
  std::vector<Rr> rrs;
  for (int i = 0; i < 40; ++i) rrs.push_back({0, "many.example.com", KNOT_RRTYPE_A, 60, "192.0.2." + std::to_string(i)});
  QueryOpts o;
  o.edns = true;
  o.payload = 1232;
  Counters c;
  Bytes q = MakeQuery("many.example.com", o);
  ParsedQuery pq = ParseQuery(q);
  ASSERT_TRUE(pq.query);
  // 40 A records (~660 bytes) fit 1232 but not 512.
  auto r = Ask("many.example.com", rrs, UdpLimit(*pq.query), o);
  EXPECT_FALSE(r->answer.tc);
  EXPECT_EQ(r->answer.Addresses().size(), 40u);
  auto small = Ask("many.example.com", rrs, kClassicUdpSize);
  EXPECT_TRUE(small->answer.tc);
}

TEST(DnsAnswer, ProtectedAddressesAreRemovedAndNeverLearned) {
  auto r = Ask("api.example.com", {
                                      {0, "api.example.com", KNOT_RRTYPE_A, 60, "169.254.169.254"},
                                      {0, "api.example.com", KNOT_RRTYPE_A, 60, "192.0.2.10"},
                                      {0, "api.example.com", KNOT_RRTYPE_AAAA, 60, "fd00:ec2::254"},
                                      {0, "api.example.com", KNOT_RRTYPE_AAAA, 60, "::ffff:169.254.169.254"},
                                      {0, "api.example.com", KNOT_RRTYPE_AAAA, 60, "64:ff9b::a9fe:a9fe"},
                                  });
  EXPECT_THAT(r->sink.Addresses(), ElementsAre("192.0.2.10"));
  EXPECT_THAT(r->answer.Addresses(), ElementsAre("192.0.2.10"));
  EXPECT_EQ(r->counters.protected_removed, 4u);
}

TEST(DnsAnswer, ChainToAProtectedAddressOpensNothing) {
  auto r = Ask("chain.example.com", {{0, "chain.example.com", KNOT_RRTYPE_CNAME, 60, "metadata.internal"},
                                     {0, "metadata.internal", KNOT_RRTYPE_A, 60, "169.254.169.254"}});
  EXPECT_THAT(r->sink.Addresses(), IsEmpty());
  EXPECT_THAT(r->answer.Addresses(), IsEmpty());
  EXPECT_EQ(r->answer.rcode, 0);
}

TEST(DnsAnswer, HostedFloorProtectsPrivateRanges) {
  auto r = Ask("api.example.com", {{0, "api.example.com", KNOT_RRTYPE_A, 60, "10.1.2.3"},
                                   {0, "api.example.com", KNOT_RRTYPE_A, 60, "192.0.2.10"}},
               kMaxMessage, {}, {}, Sandbox(policy::Floor::kHosted));
  EXPECT_THAT(r->sink.Addresses(), ElementsAre("192.0.2.10"));
  EXPECT_THAT(r->answer.Addresses(), ElementsAre("192.0.2.10"));
}

TEST(DnsAnswer, HttpsHintsOfAnAllowedNameAreLearned) {
  QueryOpts o;
  o.qtype = KNOT_RRTYPE_HTTPS;
  auto r = Ask("svc.example.com", {{0, "svc.example.com", KNOT_RRTYPE_HTTPS, 60, "192.0.2.20,192.0.2.21|2001:db8::20"}},
               kMaxMessage, o);
  EXPECT_THAT(r->sink.Addresses(), UnorderedElementsAre("192.0.2.20", "192.0.2.21", "2001:db8::20"));
  ASSERT_EQ(r->answer.records.size(), 1u);
  EXPECT_EQ(r->answer.records[0].type, KNOT_RRTYPE_HTTPS);
}

TEST(DnsAnswer, HttpsWithAProtectedHintIsDropped) {
  QueryOpts o;
  o.qtype = KNOT_RRTYPE_HTTPS;
  auto r = Ask("svc.example.com", {{0, "svc.example.com", KNOT_RRTYPE_HTTPS, 60, "169.254.169.254,192.0.2.20|"}},
               kMaxMessage, o);
  EXPECT_THAT(r->sink.Addresses(), IsEmpty());
  EXPECT_THAT(r->answer.records, IsEmpty());
}

TEST(DnsAnswer, FailedWriteRemovesThatAddress) {
  auto r = Ask("api.example.com", {{0, "api.example.com", KNOT_RRTYPE_A, 60, "192.0.2.10"},
                                   {0, "api.example.com", KNOT_RRTYPE_A, 60, "192.0.2.11"}},
               kMaxMessage, {}, {"192.0.2.10"});
  EXPECT_THAT(r->sink.Addresses(), ElementsAre("192.0.2.11"));
  EXPECT_THAT(r->answer.Addresses(), ElementsAre("192.0.2.11"));
  EXPECT_EQ(r->counters.learn_failed, 1u);
  EXPECT_EQ(r->answer.rcode, 0);
}

TEST(DnsAnswer, NoWriteLandedIsServFailWithAnExtendedError) {
  QueryOpts o;
  o.edns = true;
  auto r = Ask("api.example.com", {{0, "api.example.com", KNOT_RRTYPE_A, 60, "192.0.2.10"}}, kMaxMessage, o,
               {"192.0.2.10"});
  EXPECT_EQ(r->answer.rcode, KNOT_RCODE_SERVFAIL);
  EXPECT_THAT(r->answer.Addresses(), IsEmpty());
  EXPECT_EQ(r->answer.ede_code, kEdeOther);
  EXPECT_FALSE(r->answer.ede_text.empty());
  EXPECT_EQ(r->counters.learn_failed, 1u);
  EXPECT_EQ(r->counters.servfail, 1u);
}

TEST(DnsAnswer, UpstreamFailureIsServFail) {
  SandboxScope sb = Sandbox();
  Counters c;
  FakeSink sink;
  Decision d = Decide(sb, MakeQuery("api.example.com"), c);
  Bytes out = Finish(sb, d, absl::UnavailableError("timeout"), kMaxMessage, sink, Lifetime{}, kNow, c);
  EXPECT_EQ(Parse(out).rcode, KNOT_RCODE_SERVFAIL);
  EXPECT_EQ(c.upstream_failed, 1u);
}

TEST(DnsAnswer, AnswerToAnotherQuestionIsRejected) {
  SandboxScope sb = Sandbox();
  Counters c;
  FakeSink sink;
  Decision d = Decide(sb, MakeQuery("api.example.com"), c);
  Bytes forged = MakeAnswer(MakeQuery("evil.example.org"), {{0, "evil.example.org", KNOT_RRTYPE_A, 60, "203.0.113.9"}});
  auto p = Parse(Finish(sb, d, forged, kMaxMessage, sink, Lifetime{}, kNow, c));
  EXPECT_EQ(p.rcode, KNOT_RCODE_SERVFAIL);
  EXPECT_THAT(sink.Addresses(), IsEmpty());
}

TEST(DnsAnswer, NxdomainFromUpstreamPassesThroughInClientCase) {
  QueryOpts o;
  o.id = 4242;
  SandboxScope sb = Sandbox();
  Counters c;
  FakeSink sink;
  Bytes q = MakeQuery("X.Cdn.Example.Net", o);
  Decision d = Decide(sb, q, c);
  ASSERT_EQ(d.kind, Decision::kForward);
  auto p = Parse(Finish(sb, d, MakeAnswer(d.upstream_query, {}, KNOT_RCODE_NXDOMAIN), kMaxMessage, sink, Lifetime{},
                        kNow, c));
  EXPECT_EQ(p.rcode, KNOT_RCODE_NXDOMAIN);
  EXPECT_EQ(p.id, 4242);
  EXPECT_EQ(p.qname_wire, Bytes(q.begin() + 12, q.begin() + 12 + p.qname_wire.size()));
}

TEST(DnsUpstreamQuery, BuiltFromTheQuestionNeverTheClientsBytes) {
  QueryOpts o;
  o.id = 0x4141;
  o.edns = true;
  o.payload = 4096;
  o.dnssec_ok = true;
  o.cd = true;
  o.client_subnet = true;
  SandboxScope sb = Sandbox();
  Counters c;
  Decision d = Decide(sb, MakeQuery("aPi.ExAmple.CoM", o), c);
  ASSERT_EQ(d.kind, Decision::kForward);
  auto p = Parse(d.upstream_query);
  ASSERT_TRUE(p.ok);
  EXPECT_FALSE(p.qr);
  EXPECT_EQ(p.id, 0);  // c-ares picks a random one; never the client's
  EXPECT_TRUE(p.rd);
  EXPECT_TRUE(p.edns);
  EXPECT_EQ(p.payload, kMaxUdpPayload);
  EXPECT_FALSE(p.has_ecs);  // EDNS Client Subnet is not forwarded
  testing::Parsed lower = Parse(MakeQuery("api.example.com"));
  EXPECT_EQ(p.qname_wire, lower.qname_wire);  // lower-case: no 0x20 bits leave
  EXPECT_EQ(d.upstream_query[3] & 0x10, 0x10);  // CD
  // DO as asked (the OPT TTL's top bit of the flags).
  ParsedQuery back = ParseQuery(d.upstream_query);
  ASSERT_TRUE(back.query);
  EXPECT_TRUE(back.query->dnssec_ok);
  EXPECT_TRUE(back.query->cd);
}

TEST(DnsUpstreamQuery, NoEdnsUpstreamWithoutEdnsFromTheClient) {
  SandboxScope sb = Sandbox();
  Counters c;
  QueryOpts o;
  o.rd = false;
  Decision d = Decide(sb, MakeQuery("api.example.com", o), c);
  auto p = Parse(d.upstream_query);
  EXPECT_FALSE(p.edns);
  EXPECT_FALSE(p.rd);
}

}  // namespace
}  // namespace egressd::dns
