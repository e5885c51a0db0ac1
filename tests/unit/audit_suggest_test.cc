// egressctl audit suggest's logic (userspace/audit/suggest.h), case by case:
// a stream of records in, the allow list and what is not suggested out.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_join.h"
#include "userspace/audit/suggest.h"
#include "userspace/policy/floor.h"

namespace egressd::audit {
namespace {

nlohmann::json DnsDenied(const std::string& q, const std::string& qtype = "A", uint64_t sandbox = 7) {
  return {{"type", "dns"}, {"verdict", "deny"}, {"reason", "name-not-in-scope"}, {"sandbox", {{"id", sandbox}}},
          {"dns", {{"query", q + "."}, {"qtypes", {qtype}}, {"rcode", 3}}}};
}
nlohmann::json DnsAnswered(const std::string& q, const std::vector<std::string>& ips, uint64_t sandbox = 7) {
  return {{"type", "dns"}, {"verdict", "allow"}, {"reason", "name-in-scope"}, {"sandbox", {{"id", sandbox}}},
          {"dns", {{"query", q + "."}, {"qtypes", {"A"}}, {"rcode", 0}, {"ips", ips}}}};
}
nlohmann::json Denied(const std::string& type, const std::string& ip, int port, const std::string& reason = "default-deny",
                      uint64_t count = 1, uint64_t sandbox = 7) {
  return {{"type", type},
          {"verdict", "deny"},
          {"reason", reason},
          {"count", count},
          {"sandbox", {{"id", sandbox}}},
          {"IP", {{"destination", ip}}},
          {"l4", {{"TCP", {{"destination_port", port}}}}}};
}

struct Case {
  const char* name;
  std::vector<nlohmann::json> stream;
  std::vector<std::string> allow;            // the targets, in order
  std::vector<std::string> not_suggested;    // `what` of each, in order
};

std::vector<Case> Cases() {
  return {
      {"a_denied_name_is_suggested_as_itself", {DnsDenied("api.example.com")}, {"api.example.com"}, {}},
      {"repeats_are_one_entry",
       {DnsDenied("api.example.com"), DnsDenied("api.example.com", "AAAA")},
       {"api.example.com"},
       {}},
      {"two_siblings_make_a_wildcard",
       {DnsDenied("a.example.com"), DnsDenied("b.example.com")},
       {"*.example.com"},
       {}},
      {"the_wildcard_is_as_narrow_as_the_siblings",
       {DnsDenied("x.cdn.example.com"), DnsDenied("y.cdn.example.com")},
       {"*.cdn.example.com"},
       {}},
      {"a_sibling_that_is_the_common_suffix_widens_one_level",
       {DnsDenied("cdn.example.com"), DnsDenied("x.cdn.example.com")},
       {"*.example.com"},
       {}},
      {"the_apex_stays_an_exact_name_beside_the_wildcard",
       {DnsDenied("example.com"), DnsDenied("a.example.com"), DnsDenied("b.example.com")},
       {"*.example.com", "example.com"},
       {}},
      {"names_under_different_registrable_domains_stay_apart",
       {DnsDenied("a.example.com"), DnsDenied("b.example.org")},
       {"a.example.com", "b.example.org"},
       {}},
      {"never_a_public_suffix_wildcard",
       {DnsDenied("alice.github.io"), DnsDenied("bob.github.io")},
       {"alice.github.io", "bob.github.io"},
       {}},
      {"under_a_public_suffix_the_registrable_domain_groups",
       {DnsDenied("a.shop.co.uk"), DnsDenied("b.shop.co.uk"), DnsDenied("c.other.co.uk")},
       {"*.shop.co.uk", "c.other.co.uk"},
       {}},
      {"a_name_that_is_a_public_suffix_is_exact",
       {DnsDenied("github.io")},
       {"github.io"},
       {}},
      {"a_denied_address_answered_for_a_name_suggests_the_name",
       {DnsAnswered("api.example.com", {"192.0.2.10"}), Denied("connect", "192.0.2.10", 8443)},
       {"api.example.com"},
       {}},
      {"an_address_no_answer_named_is_suggested_as_itself",
       {Denied("connect", "192.0.2.10", 443), Denied("send", "2001:db8::5", 53)},
       {"192.0.2.10", "2001:db8::5"},
       {}},
      {"never_a_floor_denied_address",
       {Denied("connect", "169.254.169.254", 80)},
       {},
       {"169.254.169.254 80/TCP (1 time)"}},
      {"never_a_floor_denied_address_even_when_a_name_answered_it",
       {DnsAnswered("meta.example", {"169.254.169.254"}), Denied("connect", "169.254.169.254", 80)},
       {},
       {"169.254.169.254 80/TCP (1 time)"}},
      {"a_protected_reason_is_not_the_allow_lists",
       {Denied("connect", "192.0.2.10", 80, "protected")},
       {},
       {"192.0.2.10 80/TCP (1 time)"}},
      {"contained_root_is_not_the_allow_lists",
       {Denied("connect", "192.0.2.10", 80, "contained-root")},
       {},
       {"192.0.2.10 80/TCP (1 time)"}},
      {"a_single_label_name_is_never_suggested", {DnsDenied("minio")}, {}, {"dns minio (1 time)"}},
      {"search_domain_expansions_are_not_wanted_names",
       {DnsDenied("api.example.com.svc.cluster.local"), DnsDenied("api.example.com")},
       {"api.example.com"},
       {"dns api.example.com.svc.cluster.local (1 time)"}},
      {"allowed_records_suggest_nothing",
       {DnsAnswered("api.example.com", {"192.0.2.10"}),
        {{"type", "connect"}, {"verdict", "allow"}, {"reason", "resolved-name"}, {"IP", {{"destination", "192.0.2.10"}}}}},
       {},
       {}},
      {"lifecycle_and_loss_records_are_ignored",
       {{{"type", "engine"}, {"event", "started"}}, {{"type", "loss"}, {"lost", 3}}},
       {},
       {}},
  };
}

class SuggestCases : public testing::TestWithParam<Case> {};

TEST_P(SuggestCases, Suggests) {
  const Case& c = GetParam();
  policy::PublicSuffixList psl = *policy::PublicSuffixList::Load(EGR_TESTDATA "/public_suffix_list.dat");
  SuggestOptions o;
  o.protected_cidrs = policy::FloorProtected(policy::Floor::kConnected);
  o.public_suffixes = &psl;
  SuggestResult r = Suggest(c.stream, o);
  std::vector<std::string> got, skipped;
  for (const auto& s : r.allow) {
    got.push_back(s.target);
    EXPECT_FALSE(s.covers.empty()) << s.target << " says nothing of what it covers";
    EXPECT_NE(s.target, "*");
  }
  for (const auto& n : r.not_suggested) skipped.push_back(n.what);
  EXPECT_EQ(got, c.allow) << absl::StrJoin(got, ", ");
  EXPECT_EQ(skipped, c.not_suggested) << absl::StrJoin(skipped, " | ");
}

INSTANTIATE_TEST_SUITE_P(Audit, SuggestCases, testing::ValuesIn(Cases()),
                         [](const testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

TEST(Suggest, OnlyTheSandboxAsked) {
  SuggestOptions o;
  o.sandbox = 9;
  SuggestResult r = Suggest({DnsDenied("a.example.com", "A", 7), DnsDenied("b.example.com", "A", 9)}, o);
  ASSERT_EQ(r.allow.size(), 1u);
  EXPECT_EQ(r.allow[0].target, "b.example.com");
}

TEST(Suggest, CountsAreTheRecordsCounts) {
  SuggestResult r = Suggest({Denied("send", "192.0.2.10", 53, "default-deny", 99999)}, {});
  EXPECT_EQ(r.denials, 99999u);
  ASSERT_EQ(r.allow.size(), 1u);
  EXPECT_NE(r.allow[0].covers[0].find("99999 times"), std::string::npos) << r.allow[0].covers[0];
}

TEST(Suggest, RendersATaskYamlFragmentWithComments) {
  SuggestResult r = Suggest({DnsDenied("a.example.com"), DnsDenied("b.example.com"), Denied("connect", "192.0.2.10", 443),
                             Denied("connect", "169.254.169.254", 80)},
                            {.protected_cidrs = policy::FloorProtected(policy::Floor::kConnected)});
  const std::string y = RenderTaskYaml(r, "trail.jsonl");
  EXPECT_NE(y.find("egress:\n  allow:\n"), std::string::npos) << y;
  EXPECT_NE(y.find("    # dns A a.example.com denied 1 time\n"), std::string::npos) << y;
  EXPECT_NE(y.find("    - '*.example.com'\n"), std::string::npos) << y;
  EXPECT_NE(y.find("    - '192.0.2.10'\n"), std::string::npos) << y;
  EXPECT_NE(y.find("#   169.254.169.254 80/TCP (1 time): the deployment's floor protects"), std::string::npos) << y;
  EXPECT_EQ(RenderTaskYaml(Suggest({}, {}), "x").find("  allow: []\n") != std::string::npos, true);
}

TEST(Suggest, RegistrableDomain) {
  policy::PublicSuffixList psl = *policy::PublicSuffixList::Load(EGR_TESTDATA "/public_suffix_list.dat");
  EXPECT_EQ(RegistrableDomain("a.b.example.com", &psl), "example.com");
  EXPECT_EQ(RegistrableDomain("x.shop.co.uk", &psl), "shop.co.uk");
  EXPECT_EQ(RegistrableDomain("alice.github.io", &psl), "alice.github.io");
  EXPECT_EQ(RegistrableDomain("github.io", &psl), std::nullopt);
  EXPECT_EQ(RegistrableDomain("com", &psl), std::nullopt);
  EXPECT_EQ(RegistrableDomain("a.b.example.net", nullptr), "example.net");  // only TLDs without a list
}

}  // namespace
}  // namespace egressd::audit
