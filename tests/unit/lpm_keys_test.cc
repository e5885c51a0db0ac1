// The exact bytes egressd writes into the LPM tries, and the port folding an
// LPM lookup needs (it sees only the longest match).
#include "maps/lpm_keys.h"

#include <arpa/inet.h>

#include <cstring>

#include <gtest/gtest.h>

namespace egressd::maps {
namespace {

net::Cidr C(const char* s) { return *net::Cidr::Parse(s); }

policy::AllowedCidr A(const char* cidr, std::vector<policy::PortRange> ports = {}) {
  return {C(cidr), std::move(ports), "test"};
}

TEST(LpmKeys, V4KeyCountsPolicyIdBitsAndKeepsNetworkOrder) {
  egr_lpm4_key k = MakeLpm4Key(0x01020304, C("192.0.2.0/24"));
  EXPECT_EQ(k.prefixlen, 32u + 24u);
  EXPECT_EQ(ntohl(k.policy_id), 0x01020304u);
  const uint8_t want[4] = {192, 0, 2, 0};
  EXPECT_EQ(std::memcmp(k.addr, want, 4), 0);
}

TEST(LpmKeys, V6HostKeyIs160Bits) {
  egr_lpm6_key k = MakeLpm6Key(7, C("2001:db8::10"));
  EXPECT_EQ(k.prefixlen, 160u);
  EXPECT_EQ(ntohl(k.policy_id), 7u);
  EXPECT_EQ(k.addr[0], 0x20);
  EXPECT_EQ(k.addr[1], 0x01);
  EXPECT_EQ(k.addr[15], 0x10);
}

TEST(LpmKeys, PolicyIdIsTheLeadingPrefixSoPoliciesNeverMatchEachOther) {
  // Two policies' /0 entries differ in their first 32 key bits.
  egr_lpm4_key a = MakeLpm4Key(1, C("0.0.0.0/0"));
  egr_lpm4_key b = MakeLpm4Key(2, C("0.0.0.0/0"));
  EXPECT_EQ(a.prefixlen, 32u);
  EXPECT_NE(std::memcmp(&a.policy_id, &b.policy_id, 4), 0);
}

TEST(AllowEntries, EntriesWithoutPortsAllowEveryPort) {
  auto e = BuildAllowEntries({A("192.0.2.10"), A("2001:db8::/32")});
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->size(), 2u);
  for (const auto& x : *e) EXPECT_EQ(x.value.nranges, 0u);
}

TEST(AllowEntries, SameCidrTwiceMergesPorts) {
  auto e = BuildAllowEntries({A("192.0.2.10", {{443, 443}}), A("192.0.2.10", {{80, 80}})});
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->size(), 1u);
  ASSERT_EQ((*e)[0].value.nranges, 2u);
  EXPECT_EQ((*e)[0].value.ranges[0].first, 80);
  EXPECT_EQ((*e)[0].value.ranges[1].first, 443);
}

TEST(AllowEntries, PortLimitedHostInsideAnAllPortsNetworkGetsAllPorts) {
  // Without folding, the /32's longest match would refuse port 22 that the /24 allows.
  auto e = BuildAllowEntries({A("192.0.2.0/24"), A("192.0.2.10", {{443, 443}})});
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->size(), 2u);
  for (const auto& x : *e) EXPECT_EQ(x.value.nranges, 0u) << x.cidr.ToString();
}

TEST(AllowEntries, PortLimitedHostInheritsCoveringPortRanges) {
  auto e = BuildAllowEntries({A("192.0.2.0/24", {{8000, 8100}}), A("192.0.2.10", {{443, 443}})});
  ASSERT_TRUE(e.ok()) << e.status();
  const auto& host = (*e)[1];
  ASSERT_EQ(host.cidr.ToString(), "192.0.2.10/32");
  ASSERT_EQ(host.value.nranges, 2u);
  EXPECT_EQ(host.value.ranges[0].first, 443);
  EXPECT_EQ(host.value.ranges[1].first, 8000);
  EXPECT_EQ(host.value.ranges[1].last, 8100);
  EXPECT_EQ((*e)[0].value.nranges, 1u);  // the /24 does not gain the host's port
}

TEST(AllowEntries, AdjacentRangesJoin) {
  auto e = BuildAllowEntries({A("192.0.2.10", {{80, 89}, {90, 100}, {95, 120}})});
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ((*e)[0].value.nranges, 1u);
  EXPECT_EQ((*e)[0].value.ranges[0].first, 80);
  EXPECT_EQ((*e)[0].value.ranges[0].last, 120);
}

TEST(AllowEntries, TooManyDisjointRangesNameTheCidr) {
  std::vector<policy::PortRange> ports;
  for (uint16_t p = 1; p <= 2 * EGR_MAX_PORT_RANGES + 1; p += 2) ports.push_back({p, p});  // one too many
  auto e = BuildAllowEntries({A("198.51.100.7", ports)});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("\"198.51.100.7/32\""), std::string::npos)
      << e.status();
}

TEST(PolicyHeader, CarriesVerdictActionAndHash) {
  policy::CompiledPolicy p;
  p.default_verdict = policy::Verdict::kDeny;
  p.deny_action = policy::DenyAction::kDrop;
  egr_policy_val h = MakePolicyHeader(p);
  EXPECT_EQ(h.default_verdict, EGR_VERDICT_DENY);
  EXPECT_EQ(h.deny_action, EGR_ACTION_DROP);
  EXPECT_EQ(h.content_hash, p.ContentHash());
  EXPECT_EQ(h.refcount, 0u);
}

}  // namespace
}  // namespace egressd::maps
