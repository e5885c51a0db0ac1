// The per-sandbox caps (issue 14): what a compiled policy takes of each cap
// (CIDR entries counted after the port folding, per family; names and
// wildcard rules together), the check every registration path runs, and the
// config's limits: block.
#include "userspace/control/sandbox_caps.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "maps/egressd_abi.h"
#include "userspace/policy/deployment_config.h"

namespace egressd::control {
namespace {

policy::AllowedCidr A(const char* cidr, std::vector<policy::PortRange> ports = {}) {
  return policy::AllowedCidr{*net::Cidr::Parse(cidr), std::move(ports), "test"};
}

struct UseCase {
  const char* name;
  std::vector<policy::AllowedCidr> allowed;
  std::vector<std::string> names, wildcards;
  CapUse want;
};

class CountCapUseTest : public ::testing::TestWithParam<UseCase> {};

TEST_P(CountCapUseTest, CountsWhatTheKernelHolds) {
  const UseCase& c = GetParam();
  policy::CompiledPolicy p;
  p.allowed = c.allowed;
  for (const auto& n : c.names) p.names.push_back(policy::NameRule(n));
  for (const auto& w : c.wildcards) p.wildcard_suffixes.push_back(policy::NameRule(w));
  auto use = CountCapUse(p);
  ASSERT_TRUE(use.ok()) << use.status();
  EXPECT_EQ(use->cidr4_entries, c.want.cidr4_entries);
  EXPECT_EQ(use->cidr6_entries, c.want.cidr6_entries);
  EXPECT_EQ(use->names, c.want.names);
}

INSTANTIATE_TEST_SUITE_P(
    Caps, CountCapUseTest,
    ::testing::Values(
        UseCase{"empty", {}, {}, {}, {0, 0, 0}},
        UseCase{"distinct_v4", {A("192.0.2.1/32"), A("192.0.2.2/32"), A("198.51.100.0/24")}, {}, {}, {3, 0, 0}},
        // One prefix with several port lists is one entry (its ranges fold).
        UseCase{"same_prefix_ports_fold",
                {A("192.0.2.0/24", {{443, 443}}), A("192.0.2.0/24", {{80, 80}}), A("192.0.2.0/24", {{8080, 8090}})},
                {}, {}, {1, 0, 0}},
        // A covering prefix and a covered one are two entries (an LPM trie
        // keeps both: the longest match wins).
        UseCase{"nested_prefixes_are_two", {A("10.0.0.0/8"), A("10.1.0.0/16", {{443, 443}})}, {}, {}, {2, 0, 0}},
        UseCase{"families_apart", {A("192.0.2.1/32"), A("2001:db8::/32"), A("2001:db8:1::/48")}, {}, {}, {1, 2, 0}},
        UseCase{"names_and_wildcards_together", {}, {"a.example", "b.example"}, {"c.example"}, {0, 0, 3}}),
    [](const auto& info) { return std::string(info.param.name); });

struct LimitCase {
  const char* name;
  CapUse use;
  policy::SandboxLimits limits;
  std::vector<std::string> exceeded;  // the caps named, in order
};

class ExceededCapsTest : public ::testing::TestWithParam<LimitCase> {};

TEST_P(ExceededCapsTest, NamesEveryCapPastWithItsValueAndCount) {
  const LimitCase& c = GetParam();
  const auto over = ExceededCaps(c.use, c.limits);
  std::vector<std::string> caps;
  for (const auto& o : over) {
    caps.push_back(o.cap);
    EXPECT_GT(o.count, o.limit) << o.cap;
    EXPECT_TRUE(absl::StrContains(o.message, o.cap)) << o.message;
    EXPECT_TRUE(absl::StrContains(o.message, " " + std::to_string(o.limit) + ":")) << o.message;
    EXPECT_TRUE(absl::StrContains(o.message, "has " + std::to_string(o.count) + " ")) << o.message;
  }
  EXPECT_EQ(caps, c.exceeded);
}

INSTANTIATE_TEST_SUITE_P(
    Caps, ExceededCapsTest,
    ::testing::Values(
        LimitCase{"defaults_take_the_issues_bench", {100, 0, 50}, {}, {}},
        LimitCase{"at_every_cap", {4, 2, 3}, {4, 2, 3}, {}},
        LimitCase{"one_v4_past", {5, 2, 3}, {4, 2, 3}, {"limits.maxCidrEntriesPerSandbox"}},
        LimitCase{"one_v6_past", {4, 3, 3}, {4, 2, 3}, {"limits.maxCidr6EntriesPerSandbox"}},
        LimitCase{"one_name_past", {4, 2, 4}, {4, 2, 3}, {"limits.maxNamesPerSandbox"}},
        LimitCase{"all_past_in_order",
                  {5, 3, 4},
                  {4, 2, 3},
                  {"limits.maxCidrEntriesPerSandbox", "limits.maxCidr6EntriesPerSandbox", "limits.maxNamesPerSandbox"}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(SandboxCaps, CheckCountsAfterFoldingAndSaysNothingChanged) {
  policy::CompiledPolicy p;
  // Three port lists over two prefixes: two entries, so a cap of 2 holds.
  p.allowed = {A("192.0.2.0/24", {{443, 443}}), A("192.0.2.0/24", {{80, 80}}), A("198.51.100.7/32")};
  EXPECT_TRUE(CheckSandboxCaps(p, {2, 2, 2}).ok());
  absl::Status s = CheckSandboxCaps(p, {1, 2, 2});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "limits.maxCidrEntriesPerSandbox 1: the policy has 2")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "nothing was changed")) << s;
}

TEST(SandboxCaps, DefaultsLetTheNodesSandboxesHoldTheirCapsAtOnce) {
  const policy::SandboxLimits d;
  EXPECT_EQ(uint64_t{d.max_cidr4_entries} * policy::kSandboxesPerNode, EGR_MAX_ALLOW4);
  EXPECT_EQ(uint64_t{d.max_cidr6_entries} * policy::kSandboxesPerNode, EGR_MAX_ALLOW6);
  EXPECT_EQ(policy::kAllow4Capacity, EGR_MAX_ALLOW4) << "policy/'s copy of the ABI's capacity";
  EXPECT_EQ(policy::kAllow6Capacity, EGR_MAX_ALLOW6);
  EXPECT_EQ(uint64_t{policy::kDefaultMaxAddressesPerSandbox} * policy::kSandboxesPerNode, EGR_MAX_RESOLVED);
}

TEST(SandboxCaps, ConfigLimitsParseAndBadValuesAreNamed) {
  auto d = policy::ParseDeploymentConfig(
      "limits:\n  maxCidrEntriesPerSandbox: 10\n  maxCidr6EntriesPerSandbox: 3\n  maxNamesPerSandbox: 7\n", "t.yaml",
      nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->limits, (policy::SandboxLimits{10, 3, 7}));
  auto none = policy::ParseDeploymentConfig("airgapped: false\n", "t.yaml", nullptr);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->limits, policy::SandboxLimits{});
  struct Bad {
    const char* yaml;
    const char* named;
  };
  for (const Bad& b : {Bad{"limits:\n  maxCidrEntriesPerSandbox: 0\n", "limits.maxCidrEntriesPerSandbox \"0\""},
                       Bad{"limits:\n  maxCidrEntriesPerSandbox: 1048577\n", "1-1048576"},
                       Bad{"limits:\n  maxCidr6EntriesPerSandbox: 262145\n", "1-262144"},
                       Bad{"limits:\n  maxNamesPerSandbox: -3\n", "limits.maxNamesPerSandbox \"-3\""},
                       Bad{"limits:\n  maxNamesPerSandbox: lots\n", "\"lots\""},
                       Bad{"limits:\n  maxEverything: 3\n", "maxEverything"},
                       Bad{"limits: 5\n", "limits"}}) {
    auto r = policy::ParseDeploymentConfig(b.yaml, "t.yaml", nullptr);
    ASSERT_FALSE(r.ok()) << b.yaml;
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), b.named)) << b.yaml << " -> " << r.status();
  }
}

}  // namespace
}  // namespace egressd::control
