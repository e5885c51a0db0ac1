// Which question names a sandbox may ask, judged as the compiler defines
// names (userspace/policy/names.h).
#include <gtest/gtest.h>

#include "userspace/dns/scope.h"
#include "userspace/policy/names.h"

namespace egressd::dns {
namespace {

NameScope ScopeOf(std::vector<std::string> names, std::vector<std::string> wildcards) {
  policy::CompiledPolicy p;
  for (auto& n : names) p.names.emplace_back(*policy::CanonicalName(n));
  for (auto& w : wildcards) p.wildcard_suffixes.emplace_back(*policy::CanonicalName(w));
  std::sort(p.names.begin(), p.names.end());
  std::sort(p.wildcard_suffixes.begin(), p.wildcard_suffixes.end());
  return NameScope(p);
}

TEST(DnsScope, ExactNameOnly) {
  NameScope s = ScopeOf({"api.example.com"}, {});
  EXPECT_TRUE(s.Match("api.example.com"));
  EXPECT_FALSE(s.Match("example.com"));
  EXPECT_FALSE(s.Match("x.api.example.com"));
  EXPECT_FALSE(s.Match("api.example.com.evil"));
}

TEST(DnsScope, WildcardCoversSubdomainsNotApex) {
  NameScope s = ScopeOf({}, {"githubusercontent.com"});
  EXPECT_TRUE(s.Match("raw.githubusercontent.com"));
  EXPECT_TRUE(s.Match("a.b.githubusercontent.com"));
  EXPECT_FALSE(s.Match("githubusercontent.com"));     // the apex is not under *.
  EXPECT_FALSE(s.Match("evilgithubusercontent.com"));  // whole labels only
  EXPECT_EQ(s.Match("raw.githubusercontent.com")->rule, "*.githubusercontent.com");
}

TEST(DnsScope, ApexAndWildcardTogether) {
  NameScope s = ScopeOf({"example.com"}, {"example.com"});
  EXPECT_EQ(s.Match("example.com")->rule, "example.com");
  EXPECT_EQ(s.Match("www.example.com")->rule, "*.example.com");
  EXPECT_NE(s.Match("example.com")->name_id, s.Match("www.example.com")->name_id);
}

TEST(DnsScope, CaseAndTrailingDot) {
  NameScope s = ScopeOf({"api.example.com"}, {"cdn.example.net"});
  EXPECT_TRUE(s.Match("API.Example.COM"));
  EXPECT_TRUE(s.Match("api.example.com."));
  EXPECT_TRUE(s.Match("aPi.ExAmPlE.cOm."));  // 0x20
  EXPECT_TRUE(s.Match("X.CDN.example.NET."));
  EXPECT_FALSE(s.Match("api.example.com.."));
  EXPECT_FALSE(s.Match(""));
  EXPECT_FALSE(s.Match("."));
}

TEST(DnsScope, IdnAsTheCompilerNormalisesIt) {
  // The declaration says "bücher.example"; a resolver asks the punycode.
  NameScope s = ScopeOf({"bücher.example"}, {"münchen.example"});
  EXPECT_TRUE(s.Match("xn--bcher-kva.example"));
  EXPECT_TRUE(s.Match("XN--BCHER-KVA.example."));
  EXPECT_TRUE(s.Match("www.xn--mnchen-3ya.example"));
  EXPECT_FALSE(s.Match("bcher.example"));
}

TEST(DnsScope, AgreesWithThePolicyLayer) {
  policy::CompiledPolicy p;
  p.names = {"a.example", "b.example.org"};
  p.wildcard_suffixes = {"deep.example.org", "example"};  // sorted, as the compiler leaves them
  NameScope s(p);
  for (const char* q : {"a.example", "example", "x.example", "b.example.org", "example.org", "x.deep.example.org",
                        "deep.example.org", "A.EXAMPLE.", "x..example", ".example", "org"}) {
    EXPECT_EQ(s.Match(q).has_value(), policy::NameAllowed(p, q)) << q;
  }
}

TEST(DnsScope, NameIdIsStableAndNonZero) {
  EXPECT_EQ(NameId("api.example.com"), NameId("api.example.com"));
  EXPECT_NE(NameId("api.example.com"), NameId("*.example.com"));
  EXPECT_NE(NameId(""), 0u);
}

}  // namespace
}  // namespace egressd::dns
