#include "userspace/policy/run_targets.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "userspace/policy/compiled_policy_json.h"

namespace egressd::policy {
namespace {

// One vector per rule of `egressctl run` compilation, named after the rule.
struct Vector {
  const char* rule;
  Floor floor;
  std::vector<std::string> targets;
  // On success:
  Verdict want_default;
  std::vector<std::string> want_allowed;
  // On failure, the exact lines of the one error (empty = success expected).
  std::vector<std::string> want_errors;
};

const Vector kVectors[] = {
    {"no_targets_keeps_floor_default_connected", Floor::kConnected, {},
     Verdict::kAllow, {}, {}},
    {"no_targets_keeps_floor_default_airgapped", Floor::kAirgapped, {},
     Verdict::kDeny, {}, {}},
    {"no_targets_keeps_floor_default_hosted", Floor::kHosted, {},
     Verdict::kAllow, {}, {}},
    {"any_target_turns_default_deny", Floor::kConnected, {"192.0.2.0/24"},
     Verdict::kDeny, {"192.0.2.0/24"}, {}},
    {"address_becomes_host_cidr", Floor::kConnected,
     {"192.0.2.1", "2001:db8::1"}, Verdict::kDeny,
     {"192.0.2.1/32", "2001:db8::1/128"}, {}},
    {"targets_sorted_and_deduplicated", Floor::kConnected,
     {"2001:db8::/32", "192.0.2.1", "10.0.0.0/8", "192.0.2.1/32", "192.0.2.1",
      "::ffff:10.0.0.0/104"},
     Verdict::kDeny, {"10.0.0.0/8", "192.0.2.1/32", "2001:db8::/32"}, {}},
    {"v4_mapped_target_becomes_v4_host", Floor::kConnected,
     {"::ffff:192.0.2.1"}, Verdict::kDeny, {"192.0.2.1/32"}, {}},
    {"airgapped_allows_declared_targets", Floor::kAirgapped,
     {"198.51.100.0/24"}, Verdict::kDeny, {"198.51.100.0/24"}, {}},
    {"connected_floor_leaves_private_ranges_to_declarations", Floor::kConnected,
     {"10.20.0.0/16", "::1", "169.254.1.1"}, Verdict::kDeny,
     {"10.20.0.0/16", "169.254.1.1/32", "::1/128"}, {}},
    {"target_inside_protected_denied_by_floor", Floor::kConnected,
     {"169.254.169.254"}, Verdict::kDeny, {},
     {"--egress \"169.254.169.254\": denied by the floor (protected "
      "169.254.169.254/32, floor connected)"}},
    {"v4_mapped_target_inside_protected_denied_by_floor", Floor::kConnected,
     {"::ffff:169.254.169.254"}, Verdict::kDeny, {},
     {"--egress \"::ffff:169.254.169.254\": denied by the floor (protected "
      "169.254.169.254/32, floor connected)"}},
    {"v6_credential_endpoint_denied_by_floor", Floor::kAirgapped,
     {"fd00:ec2::23"}, Verdict::kDeny, {},
     {"--egress \"fd00:ec2::23\": denied by the floor (protected "
      "fd00:ec2::23/128, floor airgapped)"}},
    {"hosted_floor_denies_private_ranges", Floor::kHosted,
     {"10.1.2.3", "::1", "fe80::/64"}, Verdict::kDeny, {},
     {"--egress \"10.1.2.3\": denied by the floor (protected 10.0.0.0/8, "
      "floor hosted)",
      "--egress \"::1\": denied by the floor (protected ::1/128, floor hosted)",
      "--egress \"fe80::/64\": denied by the floor (protected fe80::/10, "
      "floor hosted)"}},
    {"target_spanning_protected_names_both", Floor::kConnected,
     {"169.254.0.0/16"}, Verdict::kDeny, {},
     {"--egress \"169.254.0.0/16\" spans protected 169.254.169.254/32 (floor "
      "connected); declare narrower targets"}},
    {"v4_default_route_spans_protected", Floor::kConnected, {"0.0.0.0/0"},
     Verdict::kDeny, {},
     {"--egress \"0.0.0.0/0\" spans protected 169.254.169.254/32 (floor "
      "connected); declare narrower targets"}},
    {"v6_default_route_spans_protected", Floor::kConnected, {"::/0"},
     Verdict::kDeny, {},
     {"--egress \"::/0\" spans protected fd00:ec2::254/128 (floor connected); "
      "declare narrower targets"}},
    {"v6_prefix_over_v4_mapped_space_spans_v4_protected", Floor::kConnected,
     {"::/80"}, Verdict::kDeny, {},
     {"--egress \"::/80\" spans protected 169.254.169.254/32 (floor "
      "connected); declare narrower targets"}},
    {"hosted_range_spanning_protected", Floor::kHosted, {"172.0.0.0/8"},
     Verdict::kDeny, {},
     {"--egress \"172.0.0.0/8\" spans protected 172.16.0.0/12 (floor hosted); "
      "declare narrower targets"}},
    {"empty_target_rejected", Floor::kConnected, {""}, Verdict::kDeny, {},
     {"--egress \"\": empty target; declare an IP address or a CIDR"}},
    {"bare_star_rejected", Floor::kConnected, {"*"}, Verdict::kDeny, {},
     {"--egress \"*\": a bare * is not a scope: it asks for the default; omit "
      "--egress to keep the floor's default, or name the destinations"}},
    {"fqdn_rejected_by_the_address_only_compiler", Floor::kConnected,
     {"example.com"}, Verdict::kDeny, {},
     {"--egress \"example.com\": this address-only compiler takes no names; declare IP "
      "addresses or CIDRs"}},
    {"wildcard_rejected_by_the_address_only_compiler", Floor::kConnected,
     {"*.example.com"}, Verdict::kDeny, {},
     {"--egress \"*.example.com\": this address-only compiler takes no names (wildcard); "
      "declare IP addresses or CIDRs"}},
    {"garbage_rejected", Floor::kConnected,
     {"not-an-ip!", " 192.0.2.1", "192.0.2.0/x"}, Verdict::kDeny, {},
     {"--egress \"not-an-ip!\" is not an IP address",
      "--egress \" 192.0.2.1\" contains whitespace",
      "--egress \"192.0.2.0/x\" has an invalid prefix length \"x\"; expected a "
      "decimal number 0-32"}},
    {"host_bits_rejected", Floor::kConnected, {"10.1.2.3/8"}, Verdict::kDeny,
     {},
     {"--egress \"10.1.2.3/8\" has host bits set; the network is "
      "\"10.0.0.0/8\""}},
    {"ports_rejected", Floor::kConnected,
     {"192.0.2.1:443", "[2001:db8::1]:443", "example.com:80"}, Verdict::kDeny,
     {},
     {"--egress \"192.0.2.1:443\": ports are not accepted in a target; declare "
      "the address alone",
      "--egress \"[2001:db8::1]:443\": ports are not accepted in a target; "
      "declare the address alone",
      "--egress \"example.com:80\": ports are not accepted in a target; "
      "declare the address alone"}},
    {"v4_mapped_prefix_outside_mapped_space_rejected", Floor::kConnected,
     {"::ffff:0:0/95"}, Verdict::kDeny, {},
     {"--egress \"::ffff:0:0/95\" spans non-IPv4 space: an IPv4-mapped prefix "
      "needs a length of 96-128"}},
    {"all_errors_reported_at_once_nothing_partial", Floor::kConnected,
     {"192.0.2.1", "", "*", "198.51.100.7", "169.254.169.254", "10.1.2.3/8",
      "example.com"},
     Verdict::kDeny, {},
     {"--egress \"\": empty target; declare an IP address or a CIDR",
      "--egress \"*\": a bare * is not a scope: it asks for the default; omit "
      "--egress to keep the floor's default, or name the destinations",
      "--egress \"169.254.169.254\": denied by the floor (protected "
      "169.254.169.254/32, floor connected)",
      "--egress \"10.1.2.3/8\" has host bits set; the network is "
      "\"10.0.0.0/8\"",
      "--egress \"example.com\": this address-only compiler takes no names; declare IP "
      "addresses or CIDRs"}},
    {"repeated_problem_reported_once", Floor::kConnected, {"*", "*"},
     Verdict::kDeny, {},
     {"--egress \"*\": a bare * is not a scope: it asks for the default; omit "
      "--egress to keep the floor's default, or name the destinations"}},
    {"control_bytes_escaped_in_errors", Floor::kConnected, {"1.2.3.4\n5"},
     Verdict::kDeny, {}, {"--egress \"1.2.3.4\\n5\" contains whitespace"}},
};

class RunTargets : public testing::TestWithParam<Vector> {};

TEST_P(RunTargets, Compiles) {
  const Vector& v = GetParam();
  RunInputs in;
  in.floor = v.floor;
  in.egress_targets = v.targets;
  auto got = CompileRun(in);
  if (!v.want_errors.empty()) {
    ASSERT_FALSE(got.ok()) << got->ToText();
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    const std::vector<std::string> lines =
        absl::StrSplit(got.status().message(), '\n');
    EXPECT_EQ(lines, v.want_errors);
    return;
  }
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->default_verdict, v.want_default);
  EXPECT_EQ(got->deny_action, DenyAction::kReject);
  EXPECT_EQ(got->protected_cidrs, FloorProtected(v.floor));
  std::vector<std::string> allowed;
  for (const AllowedCidr& a : got->allowed) {
    allowed.push_back(a.cidr.ToString());
    EXPECT_TRUE(a.ports.empty()) << a.cidr.ToString();
    EXPECT_EQ(a.source, "run --egress");
  }
  EXPECT_EQ(allowed, v.want_allowed);
  EXPECT_TRUE(got->names.empty());
  EXPECT_TRUE(got->wildcard_suffixes.empty());
}

INSTANTIATE_TEST_SUITE_P(Rules, RunTargets, testing::ValuesIn(kVectors),
                         [](const testing::TestParamInfo<Vector>& info) {
                           return std::string(info.param.rule);
                         });

TEST(CompileRun, DenyActionCarriedThrough) {
  RunInputs in;
  in.deny_action = DenyAction::kDrop;
  in.egress_targets = {"192.0.2.1"};
  auto got = CompileRun(in);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->deny_action, DenyAction::kDrop);
}

TEST(CompileRun, SameTargetsInAnyOrderCompileToTheSamePolicy) {
  RunInputs a, b;
  a.egress_targets = {"192.0.2.1", "10.0.0.0/8", "2001:db8::/32"};
  b.egress_targets = {"2001:db8::/32", "10.0.0.0/8", "192.0.2.1", "10.0.0.0/8"};
  auto pa = CompileRun(a), pb = CompileRun(b);
  ASSERT_TRUE(pa.ok() && pb.ok());
  EXPECT_EQ(*pa, *pb);
  EXPECT_EQ(pa->ContentHash(), pb->ContentHash());
}

TEST(Floor, ParseAndName) {
  for (Floor f : {Floor::kConnected, Floor::kAirgapped, Floor::kHosted}) {
    auto parsed = ParseFloor(ToString(f));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, f);
  }
  auto bad = ParseFloor("Hosted");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "invalid floor \"Hosted\"; valid: \"connected\", \"airgapped\", "
            "\"hosted\"");
}

TEST(Floor, ProtectedLists) {
  const std::vector<std::string> creds = {
      "169.254.169.254/32", "169.254.170.2/32", "169.254.170.23/32",
      "fd00:ec2::254/128",  "fd00:ec2::23/128", "100.100.100.200/32",
      "168.63.129.16/32"};
  std::vector<std::string> hosted = creds;
  for (const char* c : {"10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8",
                        "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16",
                        "fc00::/7", "fe80::/10", "::1/128", "224.0.0.0/4",
                        "255.255.255.255/32", "ff00::/8"}) {
    hosted.push_back(c);
  }
  const std::pair<Floor, const std::vector<std::string>*> cases[] = {
      {Floor::kConnected, &creds},
      {Floor::kAirgapped, &creds},
      {Floor::kHosted, &hosted}};
  for (const auto& [floor, want] : cases) {
    std::vector<std::string> got;
    for (const ProtectedCidr& p : FloorProtected(floor)) {
      got.push_back(p.cidr.ToString());
      EXPECT_EQ(p.source, "floor " + std::string(ToString(floor)));
    }
    EXPECT_EQ(got, *want) << ToString(floor);
  }
  EXPECT_EQ(FloorDefault(Floor::kConnected), Verdict::kAllow);
  EXPECT_EQ(FloorDefault(Floor::kAirgapped), Verdict::kDeny);
  EXPECT_EQ(FloorDefault(Floor::kHosted), Verdict::kAllow);
}

TEST(DenyAction, ParseAndName) {
  EXPECT_EQ(*ParseDenyAction("reject"), DenyAction::kReject);
  EXPECT_EQ(*ParseDenyAction("drop"), DenyAction::kDrop);
  EXPECT_EQ(ToString(DenyAction::kReject), "reject");
  EXPECT_EQ(ToString(DenyAction::kDrop), "drop");
  EXPECT_EQ(ToString(Verdict::kAllow), "allow");
  EXPECT_EQ(ToString(Verdict::kDeny), "deny");
  auto bad = ParseDenyAction("DROP");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "invalid deny action \"DROP\"; valid: \"reject\", \"drop\"");
}

CompiledPolicy Sample() {
  CompiledPolicy p;
  p.default_verdict = Verdict::kDeny;
  p.deny_action = DenyAction::kDrop;
  p.protected_cidrs = FloorProtected(Floor::kConnected);
  p.allowed.push_back({*net::Cidr::Parse("10.0.0.0/8"),
                       {{443, 443}, {8000, 8100}}, "run --egress"});
  p.allowed.push_back({*net::Cidr::Parse("2001:db8::1"), {}, "run --egress"});
  return p;
}

TEST(CompiledPolicy, ContentHashIsPinned) {
  // Policy ids outlive the process in pinned maps, so the hash of a given
  // policy must not change between builds; update this only with a
  // deliberate serialization change.
  EXPECT_EQ(Sample().ContentHash(), 0x53cc8c3bb8b47c72ull) << std::hex << Sample().ContentHash();
  EXPECT_NE(CompiledPolicy().ContentHash(), Sample().ContentHash());
}

TEST(CompiledPolicy, ContentHashIgnoresSourceAndOrder) {
  const CompiledPolicy a = Sample();
  CompiledPolicy b = a;
  for (auto& x : b.allowed) x.source = "somewhere else";
  for (auto& x : b.protected_cidrs) x.source = "floor hosted";
  std::reverse(b.allowed.begin(), b.allowed.end());
  std::reverse(b.protected_cidrs.begin(), b.protected_cidrs.end());
  b.allowed[1].ports = {{8000, 8050}, {443, 443}, {8040, 8100}};
  EXPECT_EQ(a.ContentHash(), b.ContentHash());
}

TEST(CompiledPolicy, ContentHashSeesEveryField) {
  const uint64_t base = Sample().ContentHash();
  std::vector<CompiledPolicy> variants(7, Sample());
  variants[0].default_verdict = Verdict::kAllow;
  variants[1].deny_action = DenyAction::kReject;
  variants[2].protected_cidrs.pop_back();
  variants[3].allowed.pop_back();
  variants[4].allowed[0].ports = {{443, 444}, {8000, 8100}};
  variants[5].names = {"example.com"};
  variants[6].wildcard_suffixes = {"example.com"};
  for (size_t i = 0; i < variants.size(); ++i) {
    EXPECT_NE(variants[i].ContentHash(), base) << i;
  }
  EXPECT_NE(variants[5].ContentHash(), variants[6].ContentHash());
}

TEST(CompiledPolicy, ToJson) {
  CompiledPolicy p = Sample();
  p.protected_cidrs.resize(1);
  p.names = {{"api.example.com", "task"}};
  p.wildcard_suffixes = {{"example.org", "run --egress"}};
  const nlohmann::json want = nlohmann::json::parse(R"({
    "default": "deny",
    "on_deny": "drop",
    "protected": [{"cidr": "169.254.169.254/32", "source": "floor connected"}],
    "allowed": [
      {"cidr": "10.0.0.0/8", "ports": ["443", "8000-8100"], "source": "run --egress"},
      {"cidr": "2001:db8::1/128", "ports": [], "source": "run --egress"}
    ],
    "names": [{"name": "api.example.com", "source": "task"}],
    "wildcards": [{"wildcard": "*.example.org", "source": "run --egress"}]
  })");
  EXPECT_EQ(ToJson(p), want) << ToJson(p).dump(2);

  const nlohmann::json empty = ToJson(CompiledPolicy());
  EXPECT_EQ(empty["default"], "allow");
  EXPECT_EQ(empty["on_deny"], "reject");
  for (const char* k : {"protected", "allowed", "names", "wildcards"}) {
    EXPECT_TRUE(empty[k].is_array()) << k;
    EXPECT_TRUE(empty[k].empty()) << k;
  }
}

TEST(CompiledPolicy, ToTextOneEntryALine) {
  CompiledPolicy p = Sample();
  p.protected_cidrs.resize(1);
  const std::string text = p.ToText();
  const std::vector<std::string> lines = absl::StrSplit(text, '\n');
  ASSERT_EQ(lines.size(), 7u) << text;
  EXPECT_EQ(lines[0].rfind("policy ", 0), 0u);
  EXPECT_EQ(lines[0].size(), 7u + 16u);
  EXPECT_EQ(lines[1], "default deny");
  EXPECT_EQ(lines[2], "on_deny drop");
  EXPECT_EQ(lines[3], "protected 169.254.169.254/32 (floor connected)");
  EXPECT_EQ(lines[4], "allow 10.0.0.0/8 ports 443,8000-8100 (run --egress)");
  EXPECT_EQ(lines[5], "allow 2001:db8::1/128 ports all (run --egress)");
  EXPECT_EQ(lines[6], "");
}

}  // namespace
}  // namespace egressd::policy
