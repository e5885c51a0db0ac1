// One target as written on any surface, the URLs of the sandbox
// environment, and orchestrator grants.
#include "userspace/policy/targets.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "userspace/policy/compiler.h"
#include "userspace/policy/urls.h"

namespace egressd::policy {
namespace {

struct TargetVector {
  const char* rule;
  std::string in;
  // "name x", "wildcard x", "cidr x", or empty when an error is expected.
  std::string want;
  std::string why;
};

std::string Describe(const Target& t) {
  switch (t.kind) {
    case TargetKind::kName:
      return "name " + t.name;
    case TargetKind::kWildcard:
      return "wildcard " + t.name;
    case TargetKind::kCidr:
      return "cidr " + t.cidr.ToString();
  }
  return "?";
}

// "Each target is an FQDN, a *.suffix wildcard, an IP address, or a CIDR. A
// bare * is rejected."
const TargetVector kTargets[] = {
    {"fqdn", "target.example.com", "name target.example.com", ""},
    {"wildcard_suffix", "*.githubusercontent.com", "wildcard githubusercontent.com", ""},
    {"wildcard_suffix_canonical", "*.Example.COM.", "wildcard example.com", ""},
    {"wildcard_over_idn", "*.bücher.example", "wildcard xn--bcher-kva.example", ""},
    {"ipv4_address", "192.0.2.1", "cidr 192.0.2.1/32", ""},
    {"ipv6_address", "2001:db8::1", "cidr 2001:db8::1/128", ""},
    {"ipv4_cidr", "10.20.0.0/16", "cidr 10.20.0.0/16", ""},
    {"ipv6_cidr", "2001:db8::/32", "cidr 2001:db8::/32", ""},
    {"v4_mapped_is_ipv4", "::ffff:192.0.2.1", "cidr 192.0.2.1/32", ""},
    {"single_label_name_parses", "localhost", "name localhost", ""},
    {"bare_star_rejected", "*", "",
     "is a bare *, which asks for the default rather than declaring a scope; "
     "name the destinations, or declare nothing to keep the default"},
    {"wildcard_inside_a_label_rejected", "foo*.example.com", "",
     "has a wildcard that is not the whole leftmost label; write \"*.example.com\""},
    {"wildcard_without_dot_rejected", "*example.com", "",
     "has a wildcard that is not the whole leftmost label; write \"*.example.com\""},
    {"wildcard_in_a_middle_label_rejected", "a.*.example.com", "",
     "has a wildcard that is not the whole leftmost label; write \"*.example.com\""},
    {"double_wildcard_rejected", "*.*.example.com", "",
     "has a wildcard that is not the whole leftmost label; write \"*.example.com\""},
    {"wildcard_over_single_label_rejected", "*.com", "",
     "is a wildcard over a single label (a top-level domain)"},
    {"wildcard_over_single_label_with_dot_rejected", "*.com.", "",
     "is a wildcard over a single label (a top-level domain)"},
    {"empty_rejected", "", "", "is empty"},
    {"whitespace_rejected", " 192.0.2.1", "", "contains whitespace"},
    {"control_character_rejected", "a\x01.example", "", "contains a control character"},
    {"url_rejected_naming_its_host", "https://user:pw@Target.example.com:8443/x", "",
     "is a URL; declare its host, \"Target.example.com\""},
    {"port_rejected", "192.0.2.1:443", "", "has a port; declare the address or name alone"},
    {"v6_port_rejected", "[2001:db8::1]:443", "", "has a port; declare the address or name alone"},
    {"name_port_rejected", "example.com:80", "", "has a port; declare the address or name alone"},
    {"bracketed_v6_rejected", "[2001:db8::1]", "",
     "is bracketed; write the address without brackets"},
    {"host_bits_rejected", "10.1.2.3/8", "",
     "has host bits set; the network is \"10.0.0.0/8\""},
    {"short_ipv4_rejected", "10.1", "", "is not an IP address"},
    {"octet_over_255_rejected", "192.0.2.256", "", "is not an IP address"},
    {"hex_ipv4_rejected_as_a_name", "0x7f.0.0.1", "",
     "is neither an IP address nor a name (its last label is all digits)"},
    {"name_with_slash_rejected", "example.com/path", "",
     "is not a CIDR: \"example.com\" is not an IP address"},
    {"zone_id_rejected", "fe80::1%eth0", "", "has a zone id; zone ids are not accepted"},
};

class Targets : public testing::TestWithParam<TargetVector> {};

TEST_P(Targets, Parse) {
  const TargetVector& v = GetParam();
  auto got = ParseTarget(v.in);
  if (!v.why.empty()) {
    ASSERT_FALSE(got.ok()) << Describe(*got);
    EXPECT_EQ(got.status().message(), v.why);
    return;
  }
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Describe(*got), v.want);
}

INSTANTIATE_TEST_SUITE_P(Rules, Targets, testing::ValuesIn(kTargets),
                         [](const testing::TestParamInfo<TargetVector>& info) {
                           return std::string(info.param.rule);
                         });

TEST(Urls, HostOfEachForm) {
  EXPECT_EQ(*UrlHost("https://mirror.example.com/simple"), "mirror.example.com");
  EXPECT_EQ(*UrlHost("http://user:pa:ss@proxy.example:3128"), "proxy.example");
  EXPECT_EQ(*UrlHost("https://[2001:db8::5]:8443/x?y#z"), "2001:db8::5");
  EXPECT_EQ(*UrlHost("s3+https://bucket.example?x=1"), "bucket.example");
  EXPECT_EQ(*UrlHost("file:///srv/wheels"), "");
  EXPECT_EQ(UrlHost("https://host:80x/").status().message(), "has a port that is not a number");
  EXPECT_EQ(UrlHost("https://[::1/").status().message(), "has an unclosed \"[\" in its host");
  EXPECT_EQ(UrlHost("https://h%41st/").status().message(),
            "has a percent-encoded host or a zone id; write the host plainly");
  EXPECT_FALSE(LooksLikeUrl("mirror.example.com"));
  EXPECT_FALSE(LooksLikeUrl("1http://x"));
}

TEST(Urls, CredentialsAreRedacted) {
  EXPECT_EQ(RedactUrl("http://user:secret@proxy.example:3128/"), "http://***@proxy.example:3128/");
  EXPECT_EQ(RedactUrl("https://mirror.example/simple?a=b@c"), "https://mirror.example/simple?a=b@c");
  EXPECT_EQ(RedactUrl("not a url"), "not a url");
}

TEST(Urls, EveryUrlInAnEnvironmentValue) {
  using V = std::vector<std::string>;
  EXPECT_EQ(UrlsInEnvValue("GOPROXY", "https://goproxy.example,https://b.example|direct"),
            (V{"https://goproxy.example", "https://b.example"}));
  EXPECT_EQ(UrlsInEnvValue("PIP_EXTRA_INDEX_URL", "https://a.example/simple https://b.example/simple"),
            (V{"https://a.example/simple", "https://b.example/simple"}));
  EXPECT_EQ(UrlsInEnvValue("LOG_LEVEL", "debug"), V{});
  // A proxy variable without a scheme is a proxy address, as curl reads it.
  EXPECT_EQ(UrlsInEnvValue("https_proxy", "proxy.example:3128"), V{"http://proxy.example:3128"});
  EXPECT_EQ(UrlsInEnvValue("NO_PROXY", "localhost,.svc"), V{});
}

TEST(Grants, AddressesWithPorts) {
  auto g = ParseGrant("192.0.2.5:8443,80,8000-8100,8050-8200");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->target, "192.0.2.5");
  EXPECT_EQ(g->ports, (std::vector<PortRange>{{80, 80}, {8000, 8200}, {8443, 8443}}));
  g = ParseGrant("[2001:db8::/64]:443");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->target, "2001:db8::/64");
  EXPECT_EQ(g->ports, (std::vector<PortRange>{{443, 443}}));
}

TEST(Grants, Rejected) {
  const std::pair<std::string, std::string> cases[] = {
      {"192.0.2.5", "orchestrator grant \"192.0.2.5\": expected ADDRESS:PORTS (a grant names its ports)"},
      {"2001:db8::5:443", "orchestrator grant \"2001:db8::5:443\": write an IPv6 grant in brackets, [ADDRESS]:PORTS"},
      {"[2001:db8::5]", "orchestrator grant \"[2001:db8::5]\": expected [ADDRESS]:PORTS"},
      {"192.0.2.5:0", "orchestrator grant \"192.0.2.5:0\": port \"0\" is not a number 1-65535"},
      {"192.0.2.5:65536", "orchestrator grant \"192.0.2.5:65536\": port \"65536\" is not a number 1-65535"},
      {"192.0.2.5:+80", "orchestrator grant \"192.0.2.5:+80\": port \"+80\" is not a number 1-65535"},
      {"192.0.2.5:", "orchestrator grant \"192.0.2.5:\": port \"\" is not a number 1-65535"},
      {"192.0.2.5:90-80", "orchestrator grant \"192.0.2.5:90-80\": port range \"90-80\" ends before it starts"},
  };
  for (const auto& [in, want] : cases) {
    auto g = ParseGrant(in);
    ASSERT_FALSE(g.ok()) << in;
    EXPECT_EQ(g.status().message(), want);
  }
}

TEST(WorkloadKind, ParseAndName) {
  for (WorkloadKind k : {WorkloadKind::kAgent, WorkloadKind::kTask, WorkloadKind::kRuntime}) {
    EXPECT_EQ(*ParseWorkloadKind(ToString(k)), k);
  }
  EXPECT_EQ(ParseWorkloadKind("Agent").status().message(),
            "invalid workload kind \"Agent\"; valid: \"agent\", \"task\", \"runtime\"");
}

}  // namespace
}  // namespace egressd::policy
