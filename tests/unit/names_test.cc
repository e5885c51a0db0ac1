// Names in egress rules: the canonical form (case, trailing dot, IDN, RFC
// 1035 lengths), wildcard matching and the public suffix list.
#include "userspace/policy/names.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include <string>

#include "userspace/policy/idn.h"
#include "userspace/policy/public_suffix.h"

namespace egressd::policy {
namespace {

struct NameVector {
  const char* rule;
  std::string in;
  std::string want;  // canonical form, or empty when an error is expected
  std::string why;   // the exact error
};

const std::string k63(63, 'a');
const std::string k64(64, 'a');
// 4 labels of 63 plus 3 dots = 255 characters; 61 in the last one gives 253.
const std::string k253 = k63 + "." + k63 + "." + k63 + "." + std::string(61, 'a');
const std::string k254 = k63 + "." + k63 + "." + k63 + "." + std::string(62, 'a');

const NameVector kNames[] = {
    {"names_are_case_insensitive", "Target.EXAMPLE.com", "target.example.com", ""},
    {"one_trailing_dot_allowed", "example.com.", "example.com", ""},
    {"two_trailing_dots_rejected", "example.com..", "", "has an empty label (two dots in a row)"},
    {"idn_unicode_converted_to_punycode", "bücher.example", "xn--bcher-kva.example", ""},
    {"idn_case_folded_before_conversion", "BÜCHER.Example.", "xn--bcher-kva.example", ""},
    {"idn_uts46_nontransitional_keeps_eszett", "straße.de", "xn--strae-oqa.de", ""},
    {"idn_cjk_converted", "公司.cn", "xn--55qx5d.cn", ""},
    {"punycode_label_accepted_when_valid", "XN--BCHER-KVA.example", "xn--bcher-kva.example", ""},
    {"punycode_label_rejected_when_invalid", "xn--zz.example", "",
     "is an internationalized name that cannot be converted to ASCII (punycode): "
     "string contains invalid punycode data"},
    {"idn_disallowed_character_rejected_with_reason", "😀.example", "",
     "is an internationalized name that cannot be converted to ASCII (punycode): "
     "string contains a disallowed character"},
    {"invalid_utf8_rejected", "b\xff" "cher.example", "",
     "is an internationalized name that cannot be converted to ASCII (punycode): "
     "string encoding error"},
    {"label_of_63_accepted", k63 + ".example", k63 + ".example", ""},
    {"label_of_64_rejected", k64 + ".example", "",
     "has a label of 64 characters; a label has at most 63"},
    {"name_of_253_accepted", k253, k253, ""},
    {"name_of_253_with_trailing_dot_accepted", k253 + ".", k253, ""},
    {"name_of_254_rejected", k254, "", "is 254 characters long; a name has at most 253"},
    {"underscore_rejected", "my_host.example", "",
     "contains \"_\"; a name has letters, digits, hyphens and dots"},
    {"leading_dot_rejected_with_wildcard_hint", ".example.com", "",
     "starts with a dot; to allow every name under a domain write \"*.example.com\""},
    {"hyphen_at_label_edge_rejected", "-a.example", "",
     "has a label that starts or ends with a hyphen"},
    {"numeric_last_label_rejected", "10.0.0.256x.1", "",
     "is neither an IP address nor a name (its last label is all digits)"},
    {"digits_allowed_in_labels", "123.4chan.example", "123.4chan.example", ""},
    {"single_label_is_a_name_here", "localhost", "localhost", ""},
    {"empty_rejected", "", "", "is not a name (empty)"},
    {"lone_dot_rejected", ".", "", "is not a name (empty)"},
};

class CanonicalNames : public testing::TestWithParam<NameVector> {};

TEST_P(CanonicalNames, Canonicalizes) {
  const NameVector& v = GetParam();
  auto got = CanonicalName(v.in);
  if (!v.why.empty()) {
    ASSERT_FALSE(got.ok()) << *got;
    EXPECT_EQ(got.status().message(), v.why);
    return;
  }
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, v.want);
}

INSTANTIATE_TEST_SUITE_P(Rules, CanonicalNames, testing::ValuesIn(kNames),
                         [](const testing::TestParamInfo<NameVector>& info) {
                           return std::string(info.param.rule);
                         });

TEST(Names, SingleLabel) {
  EXPECT_TRUE(IsSingleLabel("localhost"));
  EXPECT_FALSE(IsSingleLabel("a.b"));
}

// `*.example.com` matches any name with one or more labels before
// `example.com`; never `example.com` itself and never `evilexample.com`.
TEST(Wildcards, MatchOneOrMoreWholeLabelsBeforeTheSuffix) {
  EXPECT_TRUE(WildcardMatches("example.com", "a.example.com"));
  EXPECT_TRUE(WildcardMatches("example.com", "a.b.c.example.com"));
  EXPECT_FALSE(WildcardMatches("example.com", "example.com"));
  EXPECT_FALSE(WildcardMatches("example.com", "evilexample.com"));
  EXPECT_FALSE(WildcardMatches("example.com", ".example.com"));
  EXPECT_FALSE(WildcardMatches("example.com", "example.com.evil"));
  EXPECT_FALSE(WildcardMatches("example.com", "com"));
}

TEST(Wildcards, NameAllowedByPolicy) {
  CompiledPolicy p;
  p.names = {"api.example.org", "example.net"};
  p.wildcard_suffixes = {"example.com", "svc.example.org"};
  EXPECT_TRUE(NameAllowed(p, "a.example.com"));
  EXPECT_TRUE(NameAllowed(p, "A.B.Example.COM."));  // as a resolver may ask
  EXPECT_FALSE(NameAllowed(p, "example.com"));
  EXPECT_FALSE(NameAllowed(p, "evilexample.com"));
  EXPECT_TRUE(NameAllowed(p, "api.example.org"));
  EXPECT_FALSE(NameAllowed(p, "www.api.example.org"));  // exact is exact
  EXPECT_TRUE(NameAllowed(p, "x.svc.example.org"));
  EXPECT_FALSE(NameAllowed(p, "svc.example.org"));
  EXPECT_TRUE(NameAllowed(p, "example.net"));
  EXPECT_FALSE(NameAllowed(p, "a.example.net"));
  EXPECT_FALSE(NameAllowed(p, ""));
  EXPECT_FALSE(NameAllowed(p, ".example.com"));
  EXPECT_FALSE(NameAllowed(p, "a..example.com"));
}

TEST(Idn, ErrorsSayWhy) {
  auto nul = IdnToAscii(std::string_view("a\0b.example", 11));
  ASSERT_FALSE(nul.ok());
  EXPECT_EQ(nul.status().message(), "contains a NUL byte");
}

PublicSuffixList Fixture() {
  return *PublicSuffixList::Load(EGR_TESTDATA "/public_suffix_list.dat");
}

TEST(PublicSuffixList, ExactWildcardAndExceptionRules) {
  const PublicSuffixList psl = Fixture();
  EXPECT_TRUE(psl.IsPublicSuffix("com"));
  EXPECT_TRUE(psl.IsPublicSuffix("co.uk"));
  EXPECT_TRUE(psl.IsPublicSuffix("github.io"));
  EXPECT_TRUE(psl.IsPublicSuffix("githubusercontent.com"));
  EXPECT_FALSE(psl.IsPublicSuffix("example.co.uk"));
  EXPECT_FALSE(psl.IsPublicSuffix("user.github.io"));
  EXPECT_TRUE(psl.IsPublicSuffix("anything.ck"));  // *.ck
  EXPECT_FALSE(psl.IsPublicSuffix("www.ck"));      // !www.ck
  EXPECT_FALSE(psl.IsPublicSuffix("a.b.ck"));
  EXPECT_TRUE(psl.IsPublicSuffix("xn--55qx5d.cn"));  // 公司.cn, in punycode
  EXPECT_EQ(psl.size(), 9u);  // 8 exact rules and one wildcard
}

TEST(PublicSuffixList, MissingFileIsAnError) {
  auto psl = PublicSuffixList::Load("/nonexistent/public_suffix_list.dat");
  ASSERT_FALSE(psl.ok());
  EXPECT_EQ(psl.status().message(),
            "cannot read the public suffix list /nonexistent/public_suffix_list.dat");
  EXPECT_FALSE(PublicSuffixList().IsPublicSuffix("com"));
}

// Debian's list, when the publicsuffix package is installed (install-deps).
TEST(PublicSuffixList, DebianListKnowsGithubIo) {
  auto psl = PublicSuffixList::Load(std::string(PublicSuffixList::kDebianPath));
  if (!psl.ok()) {
    // scripts/test.sh (REQUIRE_BPF=1) installs the package: there a missing
    // list is a broken setup, not a reason to skip.
    const char* req = std::getenv("REQUIRE_BPF");
    if (req != nullptr && std::string(req) == "1") FAIL() << psl.status();
    GTEST_SKIP() << psl.status();
  }
  EXPECT_TRUE(psl->IsPublicSuffix("github.io"));
  EXPECT_TRUE(psl->IsPublicSuffix("co.uk"));
  EXPECT_FALSE(psl->IsPublicSuffix("example.com"));
  EXPECT_GT(psl->size(), 5000u);
}

}  // namespace
}  // namespace egressd::policy
