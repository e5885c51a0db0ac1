// The deployment config's dns: block (upstreams, endpoint4, endpoint6): one
// vector per rule of the parser, accepted values with what they mean and
// refused ones with the exact message (each naming its setting and value).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "userspace/dns/upstream.h"
#include "userspace/policy/deployment_config.h"

namespace egressd::policy {
namespace {

std::vector<std::string> Lines(const absl::Status& s) { return absl::StrSplit(std::string(s.message()), '\n'); }

net::IpAddr Ip(const char* s) { return *net::IpAddr::Parse(s); }

struct Good {
  const char* name;
  const char* yaml;
  std::vector<DnsUpstreamSetting> upstreams;
  std::optional<net::IpAddr> endpoint4, endpoint6;
};

const Good kGood[] = {
    {"NoDnsKeyIsNoSettings", "airgapped: false", {}, std::nullopt, std::nullopt},
    {"NullDnsIsNoSettings", "dns:", {}, std::nullopt, std::nullopt},
    {"NullValuesAreAbsent", "dns: {upstreams: , endpoint4: }", {}, std::nullopt, std::nullopt},
    {"OneUpstreamAsAScalarIsPort53",
     "dns: {upstreams: 198.51.100.8}",
     {{Ip("198.51.100.8"), 53}},
     std::nullopt,
     std::nullopt},
    {"UpstreamsInOrderV4V6WithAndWithoutPorts",
     "dns:\n  upstreams: [198.51.100.8, \"192.0.2.53:5353\", 2001:db8::53, \"[2001:db8::54]:8053\", "
     "\"[2001:db8::55]\"]",
     {{Ip("198.51.100.8"), 53},
      {Ip("192.0.2.53"), 5353},
      {Ip("2001:db8::53"), 53},
      {Ip("2001:db8::54"), 8053},
      {Ip("2001:db8::55"), 53}},
     std::nullopt,
     std::nullopt},
    {"EndpointsOfEachFamily",
     "dns: {endpoint4: 10.244.0.1, endpoint6: \"fd00:244::1\"}",
     {},
     Ip("10.244.0.1"),
     Ip("fd00:244::1")},
    {"OnlyAnIpv4Endpoint", "dns: {endpoint4: 127.0.0.1}", {}, Ip("127.0.0.1"), std::nullopt},
};

class DnsSettingsGood : public testing::TestWithParam<Good> {};

TEST_P(DnsSettingsGood, Parses) {
  const Good& v = GetParam();
  auto d = ParseDeploymentConfig(v.yaml, "egressd.yaml", nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->dns.upstreams, v.upstreams);
  EXPECT_EQ(d->dns.endpoint4, v.endpoint4);
  EXPECT_EQ(d->dns.endpoint6, v.endpoint6);
}

INSTANTIATE_TEST_SUITE_P(Rules, DnsSettingsGood, testing::ValuesIn(kGood),
                         [](const testing::TestParamInfo<Good>& i) { return std::string(i.param.name); });

struct Bad {
  const char* name;
  const char* yaml;
  std::vector<std::string> errors;
};

const Bad kBad[] = {
    {"DnsNotAMapping",
     "dns: [198.51.100.8]",
     {"deployment setting \"dns\": must be a mapping (upstreams, endpoint4, endpoint6, minTtlSeconds, graceSeconds, "
      "maxAddressesPerSandbox, maxAddressesPerName)"}},
    {"UnknownKeyUnderDns",
     "dns: {upstream: 198.51.100.8}",
     {"deployment setting \"dns.upstream\": unknown key; valid: \"upstreams\", \"endpoint4\", \"endpoint6\", "
      "\"minTtlSeconds\", \"graceSeconds\", \"maxAddressesPerSandbox\", \"maxAddressesPerName\""}},
    {"PerSandboxZero",
     "dns: {maxAddressesPerSandbox: 0}",
     {"deployment setting dns.maxAddressesPerSandbox \"0\": must be a whole number 1-1048576 (the node-wide map's "
      "capacity)"}},
    {"PerNameNotANumber",
     "dns: {maxAddressesPerName: many}",
     {"deployment setting dns.maxAddressesPerName \"many\": must be a whole number 1-1048576 (the node-wide map's "
      "capacity)"}},
    {"PerSandboxBeyondTheMap",
     "dns: {maxAddressesPerSandbox: 1048577}",
     {"deployment setting dns.maxAddressesPerSandbox \"1048577\": must be a whole number 1-1048576 (the node-wide "
      "map's capacity)"}},
    {"PerNameAboveThePerSandbox",
     "dns: {maxAddressesPerSandbox: 100, maxAddressesPerName: 101}",
     {"deployment setting dns.maxAddressesPerName 101: is more than dns.maxAddressesPerSandbox 100 (a name's "
      "addresses count in its sandbox's quota)"}},
    {"PerNameAboveTheDefaultPerSandbox",
     "dns: {maxAddressesPerName: 5000}",
     {"deployment setting dns.maxAddressesPerName 5000: is more than dns.maxAddressesPerSandbox 4096 (a name's "
      "addresses count in its sandbox's quota)"}},
    {"UpstreamNotAString",
     "dns: {upstreams: [[198.51.100.8]]}",
     {"deployment setting \"dns.upstreams[0]\": must be a string"}},
    {"EmptyUpstreamList",
     "dns: {upstreams: []}",
     {"deployment setting dns.upstreams: an empty list names no resolver (leave the key out)"}},
    {"UpstreamNotAnAddress",
     "dns: {upstreams: [resolver.example]}",
     {"deployment setting dns.upstreams[0] \"resolver.example\": not an IP address (IP[:PORT], [IPv6]:PORT)"}},
    {"UpstreamPortZero",
     "dns: {upstreams: [\"192.0.2.53:0\"]}",
     {"deployment setting dns.upstreams[0] \"192.0.2.53:0\": port is not 1-65535"}},
    {"UpstreamPortTooLarge",
     "dns: {upstreams: [\"192.0.2.53:65536\"]}",
     {"deployment setting dns.upstreams[0] \"192.0.2.53:65536\": port is not 1-65535"}},
    {"UpstreamEmptyPort",
     "dns: {upstreams: [\"192.0.2.53:\"]}",
     {"deployment setting dns.upstreams[0] \"192.0.2.53:\": port is not 1-65535"}},
    {"UpstreamNoClosingBracket",
     "dns: {upstreams: [\"[2001:db8::53\"]}",
     {"deployment setting dns.upstreams[0] \"[2001:db8::53\": no closing ] ([IPv6]:PORT)"}},
    {"UpstreamJunkAfterBracket",
     "dns: {upstreams: [\"[2001:db8::53]53\"]}",
     {"deployment setting dns.upstreams[0] \"[2001:db8::53]53\": expected :PORT after ]"}},
    {"UpstreamUnspecified",
     "dns: {upstreams: [0.0.0.0, \"::\"]}",
     {"deployment setting dns.upstreams[0] \"0.0.0.0\": the unspecified address names no resolver",
      "deployment setting dns.upstreams[1] \"::\": the unspecified address names no resolver"}},
    {"UpstreamNamedTwice",
     "dns: {upstreams: [192.0.2.53, \"192.0.2.53:53\"]}",
     {"deployment setting dns.upstreams[1] \"192.0.2.53:53\": named twice (each upstream is asked once per "
      "round)"}},
    {"Endpoint4OfTheWrongFamily",
     "dns: {endpoint4: \"fd00:244::1\"}",
     {"deployment setting dns.endpoint4 \"fd00:244::1\": is not an IPv4 unicast address"}},
    {"Endpoint4Unspecified",
     "dns: {endpoint4: 0.0.0.0}",
     {"deployment setting dns.endpoint4 \"0.0.0.0\": is not an IPv4 unicast address"}},
    {"Endpoint4NotAnAddress",
     "dns: {endpoint4: 10.244.0.256}",
     {"deployment setting dns.endpoint4 \"10.244.0.256\": is not an IPv4 unicast address"}},
    {"Endpoint6OfTheWrongFamily",
     "dns: {endpoint6: 10.244.0.1}",
     {"deployment setting dns.endpoint6 \"10.244.0.1\": is not an IPv6 unicast address"}},
    {"Endpoint6Unspecified",
     "dns: {endpoint6: \"::\"}",
     {"deployment setting dns.endpoint6 \"::\": is not an IPv6 unicast address"}},
    {"EndpointNotAString",
     "dns: {endpoint4: [10.244.0.1]}",
     {"deployment setting \"dns.endpoint4\": must be a string"}},
    {"EveryProblemAtOnce",
     "dns: {upstreams: [x.example, \"192.0.2.1:0\"], endpoint4: \"::1\", endpoint6: 127.0.0.1}",
     {"deployment setting dns.upstreams[0] \"x.example\": not an IP address (IP[:PORT], [IPv6]:PORT)",
      "deployment setting dns.upstreams[1] \"192.0.2.1:0\": port is not 1-65535",
      "deployment setting dns.endpoint4 \"::1\": is not an IPv4 unicast address",
      "deployment setting dns.endpoint6 \"127.0.0.1\": is not an IPv6 unicast address"}},
    {"MinTtlNotANumber",
     "dns: {minTtlSeconds: 5m}",
     {"deployment setting dns.minTtlSeconds \"5m\": is not a whole number of seconds from 0 to 86400"}},
    {"MinTtlPastADay",
     "dns: {minTtlSeconds: 86401}",
     {"deployment setting dns.minTtlSeconds \"86401\": is not a whole number of seconds from 0 to 86400"}},
    {"GraceNegative",
     "dns: {graceSeconds: -1}",
     {"deployment setting dns.graceSeconds \"-1\": is not a whole number of seconds from 0 to 3600"}},
    {"GracePastAnHour",
     "dns: {graceSeconds: 3601}",
     {"deployment setting dns.graceSeconds \"3601\": is not a whole number of seconds from 0 to 3600"}},
};

class DnsSettingsBad : public testing::TestWithParam<Bad> {};

TEST_P(DnsSettingsBad, IsRefusedNamingTheValue) {
  const Bad& v = GetParam();
  auto d = ParseDeploymentConfig(v.yaml, "egressd.yaml", nullptr);
  ASSERT_FALSE(d.ok()) << v.yaml;
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Lines(d.status()), v.errors);
}

// The lifetime of learned addresses: unset keeps the proxy's defaults; both
// bounds are accepted.
TEST(DnsSettings, LifetimeSecondsParse) {
  auto none = ParseDeploymentConfig("dns: {upstreams: 198.51.100.8}", "egressd.yaml", nullptr);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->dns.min_ttl_s, std::nullopt);
  EXPECT_EQ(none->dns.grace_s, std::nullopt);
  auto both = ParseDeploymentConfig("dns: {minTtlSeconds: 600, graceSeconds: 0}", "egressd.yaml", nullptr);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->dns.min_ttl_s, 600u);
  EXPECT_EQ(both->dns.grace_s, 0u);
  auto max = ParseDeploymentConfig("dns: {minTtlSeconds: 86400, graceSeconds: 3600}", "egressd.yaml", nullptr);
  ASSERT_TRUE(max.ok()) << max.status();
  EXPECT_EQ(max->dns.min_ttl_s, 86400u);
  EXPECT_EQ(max->dns.grace_s, 3600u);
}

INSTANTIATE_TEST_SUITE_P(Rules, DnsSettingsBad, testing::ValuesIn(kBad),
                         [](const testing::TestParamInfo<Bad>& i) { return std::string(i.param.name); });

TEST(DnsSettings, BoundsDefaultAndAreRead) {
  auto none = ParseDeploymentConfig("dns: {upstreams: 198.51.100.8}", "egressd.yaml", nullptr);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->dns.max_addresses_per_sandbox, 4096u);
  EXPECT_EQ(none->dns.max_addresses_per_name, 256u);
  auto set = ParseDeploymentConfig("dns: {maxAddressesPerSandbox: 512, maxAddressesPerName: 64}", "egressd.yaml", nullptr);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->dns.max_addresses_per_sandbox, 512u);
  EXPECT_EQ(set->dns.max_addresses_per_name, 64u);
}

// The config and --upstream-dns read one grammar: every value either accepts
// means the same server to both, and what the config refuses the flag
// refuses too (except what only the config judges: the unspecified address).
TEST(DnsSettings, TheConfigAndTheFlagReadUpstreamsAlike) {
  for (const char* text :
       {"198.51.100.8", "192.0.2.53:5353", "2001:db8::53", "[2001:db8::54]:8053", "[2001:db8::55]", "::ffff:192.0.2.9",
        "resolver.example", "192.0.2.53:0", "192.0.2.53:65536", "[2001:db8::53", "[2001:db8::53]53", "192.0.2.53:"}) {
    auto config = ParseDnsUpstream(text);
    auto flag = dns::ParseUpstreamServer(text);
    ASSERT_EQ(config.ok(), flag.ok()) << text << ": " << config.status() << " / " << flag.status();
    if (!config.ok()) continue;
    EXPECT_EQ(config->addr, flag->addr) << text;
    EXPECT_EQ(config->port, flag->port) << text;
  }
}

// metrics.address (issue 14): one address and a port, never a wildcard (the
// kernel guards exactly it from every sandbox).
TEST(DeploymentMetrics, AddressIsOneAddressAndAPortOrBadInputNamingIt) {
  auto ok = ParseDeploymentConfig("metrics:\n  address: 10.244.0.1:9464\n", "m.yaml", nullptr);
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_TRUE(ok->metrics_address.has_value());
  EXPECT_EQ(ok->metrics_address->addr, Ip("10.244.0.1"));
  EXPECT_EQ(ok->metrics_address->port, 9464);
  auto v6 = ParseDeploymentConfig("metrics:\n  address: \"[fd00:244::1]:9464\"\n", "m.yaml", nullptr);
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->metrics_address->addr, Ip("fd00:244::1"));
  auto none = ParseDeploymentConfig("dns:\n  upstreams: [192.0.2.53]\n", "m.yaml", nullptr);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->metrics_address.has_value()) << "no key: no TCP listener";
  for (const char* bad : {"0.0.0.0:9464", "\"[::]:9464\"", "10.244.0.1", "10.244.0.1:0", "host:1", "\"[fd00::1]\""}) {
    auto r = ParseDeploymentConfig(absl::StrCat("metrics:\n  address: ", bad, "\n"), "m.yaml", nullptr);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
    EXPECT_NE(r.status().message().find("metrics.address"), std::string::npos) << r.status();
  }
  EXPECT_FALSE(ParseDeploymentConfig("metrics:\n  port: 1\n", "m.yaml", nullptr).ok()) << "an unknown key";
}

}  // namespace
}  // namespace egressd::policy
