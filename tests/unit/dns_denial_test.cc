// Answers given without asking anyone: NXDOMAIN for a name out of scope,
// FORMERR/NOTIMP for what is not a plain query; none is ever forwarded.
#include <gtest/gtest.h>

#include "tests/dns/dns_wire.h"
#include "userspace/dns/denial.h"
#include "userspace/dns/query_flow.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::dns {
namespace {

using testing::MakeQuery;
using testing::Parse;
using testing::QueryOpts;

SandboxScope Sandbox() {
  policy::CompiledPolicy p;
  p.names = {"allowed.example"};
  p.wildcard_suffixes = {"wild.example"};
  SandboxScope s;
  s.sandbox_id = 42;
  s.names = NameScope(p);
  return s;
}

Decision DecideOn(const Bytes& wire) {
  Counters c;
  return Decide(Sandbox(), wire, c);
}

TEST(DnsDenial, OutOfScopeIsNxdomainAtOnceWithTheClientsCase) {
  QueryOpts o;
  o.id = 0xbeef;
  Bytes q = MakeQuery("dEnIeD.ExAmPle.", o);
  Decision d = DecideOn(q);
  ASSERT_EQ(d.kind, Decision::kRespond);  // never forwarded
  auto p = Parse(d.response);
  ASSERT_TRUE(p.ok);
  EXPECT_TRUE(p.qr);
  EXPECT_EQ(p.id, 0xbeef);
  EXPECT_EQ(p.rcode, KNOT_RCODE_NXDOMAIN);
  EXPECT_TRUE(p.rd);
  EXPECT_EQ(p.qdcount, 1);
  // The question bytes exactly as sent: 0x20 survives.
  Bytes asked(q.begin() + 12, q.begin() + 12 + p.qname_wire.size());
  EXPECT_EQ(p.qname_wire, asked);
  EXPECT_EQ(p.qtype, KNOT_RRTYPE_A);
  // A short-TTL SOA in authority, nothing else.
  ASSERT_EQ(p.records.size(), 1u);
  EXPECT_EQ(p.records[0].type, KNOT_RRTYPE_SOA);
  EXPECT_EQ(p.records[0].section, 1);
  EXPECT_EQ(p.records[0].ttl, kDenialTtl);
  // Without EDNS: no OPT, so no extended error.
  EXPECT_FALSE(p.edns);
  EXPECT_EQ(p.ede_code, -1);
}

TEST(DnsDenial, ExtendedErrorBlockedOnlyWithEdns) {
  QueryOpts o;
  o.edns = true;
  o.qtype = KNOT_RRTYPE_AAAA;
  auto p = Parse(DecideOn(MakeQuery("wild.example", o)).response);  // apex of a wildcard: out of scope
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.rcode, KNOT_RCODE_NXDOMAIN);
  EXPECT_TRUE(p.edns);
  EXPECT_EQ(p.ede_code, 15);
  EXPECT_EQ(p.ede_text, kBlockedText);
  EXPECT_EQ(p.qtype, KNOT_RRTYPE_AAAA);
}

TEST(DnsDenial, SearchDomainExpansionsAreDeniedToo) {
  for (const char* n : {"allowed.example.svc.cluster.local", "allowed.example.cluster.local", "x.allowed.example"}) {
    Decision d = DecideOn(MakeQuery(n));
    ASSERT_EQ(d.kind, Decision::kRespond) << n;
    EXPECT_EQ(Parse(d.response).rcode, KNOT_RCODE_NXDOMAIN) << n;
  }
}

TEST(DnsDenial, AllowedNamesAreForwardedNotAnswered) {
  for (const char* n : {"allowed.example", "ALLOWED.example.", "a.wild.example"}) {
    EXPECT_EQ(DecideOn(MakeQuery(n)).kind, Decision::kForward) << n;
  }
}

TEST(DnsDenial, NonQueryOpcodesAreNotImp) {
  for (uint8_t opcode : {1, 2, 4, 5}) {  // IQUERY, STATUS, NOTIFY, UPDATE
    QueryOpts o;
    o.opcode = opcode;
    o.id = 77;
    Decision d = DecideOn(MakeQuery("allowed.example", o));
    ASSERT_EQ(d.kind, Decision::kRespond) << int(opcode);
    auto p = Parse(d.response);
    EXPECT_EQ(p.rcode, KNOT_RCODE_NOTIMPL);
    EXPECT_EQ(p.id, 77);
    EXPECT_TRUE(p.qr);
  }
}

TEST(DnsDenial, ClassOtherThanInIsNotImp) {
  QueryOpts o;
  o.qclass = KNOT_CLASS_CH;
  o.qtype = KNOT_RRTYPE_TXT;
  Decision d = DecideOn(MakeQuery("allowed.example", o));
  ASSERT_EQ(d.kind, Decision::kRespond);
  auto p = Parse(d.response);
  EXPECT_EQ(p.rcode, KNOT_RCODE_NOTIMPL);
  EXPECT_EQ(p.qdcount, 1);  // the question echoed
}

TEST(DnsDenial, ZoneTransferIsNotImp) {
  QueryOpts o;
  o.qtype = KNOT_RRTYPE_AXFR;
  EXPECT_EQ(Parse(DecideOn(MakeQuery("allowed.example", o)).response).rcode, KNOT_RCODE_NOTIMPL);
}

TEST(DnsDenial, QuestionCountOtherThanOneIsFormErr) {
  Bytes q = MakeQuery("allowed.example");
  Bytes none(q.begin(), q.begin() + 12);
  none[4] = 0;
  none[5] = 0;  // qdcount 0
  Decision d = DecideOn(none);
  ASSERT_EQ(d.kind, Decision::kRespond);
  EXPECT_EQ(Parse(d.response).rcode, KNOT_RCODE_FORMERR);
  Bytes two = q;
  two[5] = 2;  // claims two questions, carries one
  d = DecideOn(two);
  ASSERT_EQ(d.kind, Decision::kRespond);
  EXPECT_EQ(Parse(d.response).rcode, KNOT_RCODE_FORMERR);
  // Two real questions of an allowed name: still never forwarded.
  Bytes both = q;
  both.insert(both.end(), q.begin() + 12, q.end());
  both[5] = 2;
  d = DecideOn(both);
  ASSERT_EQ(d.kind, Decision::kRespond);
  EXPECT_EQ(Parse(d.response).rcode, KNOT_RCODE_FORMERR);
}

TEST(DnsDenial, MalformedIsFormErrWithItsId) {
  Bytes q = MakeQuery("allowed.example");
  Bytes cut(q.begin(), q.end() - 3);  // question cut short
  Decision d = DecideOn(cut);
  ASSERT_EQ(d.kind, Decision::kRespond);
  auto p = Parse(d.response);
  EXPECT_EQ(p.rcode, KNOT_RCODE_FORMERR);
  EXPECT_EQ(p.id, 0x1234);
}

TEST(DnsDenial, ResponsesAndRuntsAreDropped) {
  Bytes q = MakeQuery("allowed.example");
  Bytes resp = q;
  resp[2] |= 0x80;  // QR
  EXPECT_EQ(DecideOn(resp).kind, Decision::kDrop);
  EXPECT_EQ(DecideOn(Bytes(q.begin(), q.begin() + 11)).kind, Decision::kDrop);
  EXPECT_EQ(DecideOn(Bytes{}).kind, Decision::kDrop);
}

TEST(DnsDenial, CountersSayWhatHappened) {
  Counters c;
  SandboxScope s = Sandbox();
  Decide(s, MakeQuery("denied.example"), c);
  Decide(s, MakeQuery("allowed.example"), c);
  QueryOpts o;
  o.opcode = 2;
  Decide(s, MakeQuery("allowed.example", o), c);
  EXPECT_EQ(c.queries, 3u);
  EXPECT_EQ(c.denied, 1u);
  EXPECT_EQ(c.forwarded, 1u);
  EXPECT_EQ(c.notimp, 1u);
}

}  // namespace
}  // namespace egressd::dns
