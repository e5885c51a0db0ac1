// The record's view of issue 13's kernel additions, without a kernel: the
// CIDR that matched (`match.cidr`, from the entry's own prefix length the
// kernel carried), the would-deny verdict of an audit-only sandbox, a strict
// sandbox's refusal, and the value flags the control plane writes for the
// kernel to read them from.
#include <arpa/inet.h>

#include <cstring>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "maps/lpm_keys.h"
#include "userspace/audit/record.h"
#include "userspace/dns/scope.h"

namespace egressd::audit {
namespace {

egr_event Event(const char* dst, uint8_t family, uint8_t reason, uint8_t action = 1) {
  egr_event e{};
  e.key.sandbox_id = 7;
  e.key.kind = EGR_EVENT_CONNECT;
  e.key.action = action;
  e.key.reason = reason;
  e.key.family = family;
  e.key.protocol = 6;
  e.key.dport = 443;
  if (std::strchr(dst, ':') == nullptr) {
    e.key.daddr[10] = e.key.daddr[11] = 0xff;
    EXPECT_EQ(inet_pton(AF_INET, dst, &e.key.daddr[12]), 1) << dst;
  } else {
    EXPECT_EQ(inet_pton(AF_INET6, dst, e.key.daddr), 1) << dst;
  }
  e.flags = EGR_EVENT_HAS_TASK;
  return e;
}

nlohmann::json Render(const egr_event& e) { return EventJson(e, 1'000'000'000ull, std::nullopt); }

TEST(AuditMatch, AllowedV4CidrIsTheDestinationMaskedToTheEntrysLength) {
  egr_event e = Event("198.51.100.77", 2, EGR_REASON_ALLOWED, 0);
  e.match_flags = EGR_MATCH_CIDR;
  e.match_plen = 24;
  auto j = Render(e);
  EXPECT_EQ(j["match"]["cidr"], "198.51.100.0/24");
  EXPECT_EQ(j["verdict"], "allow");
  EXPECT_FALSE(j["match"].contains("name_id"));
  e.match_plen = 32;
  EXPECT_EQ(Render(e)["match"]["cidr"], "198.51.100.77/32");
  e.match_plen = 0;
  EXPECT_EQ(Render(e)["match"]["cidr"], "0.0.0.0/0");
  e.match_plen = 13;  // not on a byte boundary
  EXPECT_EQ(Render(e)["match"]["cidr"], "198.48.0.0/13");
}

TEST(AuditMatch, ProtectedV6CidrIsMaskedOver128Bits) {
  egr_event e = Event("fd00:ec2::254", 10, EGR_REASON_PROTECTED);
  e.match_flags = EGR_MATCH_CIDR;
  e.match_plen = 8;
  auto j = Render(e);
  EXPECT_EQ(j["match"]["cidr"], "fd00::/8");
  EXPECT_EQ(j["reason"], "protected");
  e.match_plen = 128;
  EXPECT_EQ(Render(e)["match"]["cidr"], "fd00:ec2::254/128");
  e.match_plen = 129;  // no such length: named nothing rather than wrongly
  EXPECT_FALSE(Render(e).contains("match"));
}

// A v6 socket naming ::ffff:a.b.c.d was judged by the v4 trie: its CIDR is
// an IPv4 one, and the destination is shown as IPv4 (flagged v4_mapped).
TEST(AuditMatch, V4MappedDestinationNamesAnIpv4Cidr) {
  egr_event e = Event("::ffff:169.254.169.254", 10, EGR_REASON_PROTECTED);
  e.match_flags = EGR_MATCH_CIDR;
  e.match_plen = 16;
  auto j = Render(e);
  EXPECT_EQ(j["IP"]["destination"], "169.254.169.254");
  EXPECT_EQ(j["IP"]["v4_mapped"], true);
  EXPECT_EQ(j["match"]["cidr"], "169.254.0.0/16");
}

// NAT64 and friends: the protected v4 CIDR matched the IPv4 address embedded
// in the v6 destination, which the kernel puts in match_id.
TEST(AuditMatch, EmbeddedV4MatchNamesTheIpv4Cidr) {
  egr_event e = Event("64:ff9b::a9fe:a9fe", 10, EGR_REASON_PROTECTED);
  e.match_flags = EGR_MATCH_CIDR | EGR_MATCH_CIDR_EMBEDDED_V4;
  e.match_plen = 16;
  uint32_t v4;
  ASSERT_EQ(inet_pton(AF_INET, "169.254.169.254", &v4), 1);
  e.match_id = v4;
  auto j = Render(e);
  EXPECT_EQ(j["IP"]["destination"], "64:ff9b::a9fe:a9fe");
  EXPECT_EQ(j["match"]["cidr"], "169.254.0.0/16");
  EXPECT_FALSE(j["match"].contains("name_id")) << "match_id is an address here, not a name id";
}

TEST(AuditMatch, NoCidrFlagNoCidrAndNameIdOnlyForResolved) {
  egr_event e = Event("192.0.2.10", 2, EGR_REASON_DEFAULT);
  e.match_plen = 24;  // without EGR_MATCH_CIDR (an entry an older engine wrote)
  EXPECT_FALSE(Render(e).contains("match"));
  e = Event("192.0.2.10", 2, EGR_REASON_RESOLVED, 0);
  e.match_id = 0xabcdef;
  auto j = Render(e);
  EXPECT_EQ(j["match"]["name_id"], 0xabcdef);
  EXPECT_FALSE(j["match"].contains("cidr"));
}

// match.name: the sandbox's rule behind the id, as the proxy computes it
// (dns::NameId of "api.example.com" or "*.example.net"); an id no rule of the
// record has (a policy changed since) stays an id alone.
TEST(AuditMatch, ResolvedNameIdNamesTheRuleOfTheSandboxsPolicy) {
  policy::CompiledPolicy p;
  p.names = {"api.example.com"};
  p.wildcard_suffixes = {"example.net"};
  SandboxInfo sb{{{"pod", "a"}}, NameRulesById(p)};
  ASSERT_EQ(sb.names.size(), 2u);
  egr_event e = Event("192.0.2.10", 2, EGR_REASON_RESOLVED, 0);
  e.match_id = dns::NameId("*.example.net");
  auto j = EventJson(e, 1'000'000'000ull, sb);
  EXPECT_EQ(j["match"]["name"], "*.example.net");
  EXPECT_EQ(j["match"]["name_id"], e.match_id);
  e.match_id = dns::NameId("api.example.com");
  EXPECT_EQ(EventJson(e, 1'000'000'000ull, sb)["match"]["name"], "api.example.com");
  e.match_id = dns::NameId("gone.example.org");
  j = EventJson(e, 1'000'000'000ull, sb);
  EXPECT_FALSE(j["match"].contains("name"));
  EXPECT_EQ(j["match"]["name_id"], e.match_id);
  // The fast encoder writes the same line.
  std::string fast;
  e.match_id = dns::NameId("api.example.com");
  AppendEventLine(fast, e, 1'000'000'000ull, EncodeSandbox(e.key.sandbox_id, sb), 5);
  nlohmann::json slow = EventJson(e, 1'000'000'000ull, sb);
  EXPECT_EQ(fast, Line(slow, 5));
}

TEST(AuditMatch, SummariesNameTheCidrToo) {
  egr_event e = Event("203.0.113.9", 2, EGR_REASON_PROTECTED);
  egr_fold_val v{};
  v.count = 5;
  v.match_flags = EGR_MATCH_CIDR;
  v.match_plen = 25;
  auto j = SummaryJson(e.key, v, 1, 2, std::nullopt);
  EXPECT_EQ(j["match"]["cidr"], "203.0.113.0/25");
  EXPECT_EQ(j["count"], 5);
}

TEST(AuditMatch, WouldDenyIsItsOwnVerdictAndPasses) {
  egr_event e = Event("192.0.2.10", 2, EGR_REASON_DEFAULT, 3);
  auto j = Render(e);
  EXPECT_EQ(j["verdict"], "would-deny");
  EXPECT_EQ(j["action"], "pass");
  EXPECT_EQ(j["reason"], "default-deny");
  e.key.kind = EGR_EVENT_BACKSTOP;
  EXPECT_EQ(Render(e)["reason"], "backstop:default-deny");
  EXPECT_EQ(Render(e)["verdict"], "would-deny");
}

TEST(AuditMatch, StrictRefusalHasItsOwnReason) {
  egr_event e = Event("192.0.2.10", 2, EGR_REASON_AUDIT_UNRECORDED, 1);
  auto j = Render(e);
  EXPECT_EQ(j["verdict"], "deny");
  EXPECT_EQ(j["reason"], "audit-unrecorded");
}

// What the control plane writes into the reserved value fields.
TEST(AuditMatch, LpmValuesCarryTheirOwnPrefixLength) {
  auto c4 = net::Cidr::Parse("10.0.0.0/8");
  auto c6 = net::Cidr::Parse("2001:db8::/32");
  auto host = net::Cidr::Parse("192.0.2.1");
  ASSERT_TRUE(c4.ok() && c6.ok() && host.ok());
  EXPECT_EQ(maps::MakeProtVal(*c4).flags, EGR_LPM_PLEN_SET | 8u);
  EXPECT_EQ(maps::MakeProtVal(*c6).flags, EGR_LPM_PLEN_SET | 32u);
  auto entries = maps::BuildAllowEntries({{*host, {{443, 443}}, "t"}, {*c6, {}, "t"}});
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->size(), 2u);
  for (const auto& e : *entries) {
    EXPECT_EQ(e.value.flags, EGR_LPM_PLEN_SET | static_cast<uint32_t>(e.cidr.prefix_len())) << e.cidr.ToString();
  }
}

TEST(AuditMatch, PolicyHeaderCarriesTheAuditModeAndItChangesTheHash) {
  policy::CompiledPolicy p;
  p.default_verdict = policy::Verdict::kDeny;
  const uint64_t enforced = p.ContentHash();
  EXPECT_EQ(maps::MakePolicyHeader(p).flags, 0);
  p.audit.audit_only = true;
  EXPECT_EQ(maps::MakePolicyHeader(p).flags, EGR_POLICY_AUDIT_ONLY);
  const uint64_t audit_only = p.ContentHash();
  p.audit.strict = true;
  EXPECT_EQ(maps::MakePolicyHeader(p).flags, EGR_POLICY_AUDIT_ONLY | EGR_POLICY_STRICT_AUDIT);
  p.audit.audit_only = false;
  EXPECT_EQ(maps::MakePolicyHeader(p).flags, EGR_POLICY_STRICT_AUDIT);
  const uint64_t strict = p.ContentHash();
  // Never shared with an enforced policy of the same contents.
  EXPECT_NE(enforced, audit_only);
  EXPECT_NE(enforced, strict);
  EXPECT_NE(audit_only, strict);
}

}  // namespace
}  // namespace egressd::audit
