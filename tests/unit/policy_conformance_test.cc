// Conformance vectors for the compiler: one per sentence of the Semantics
// list of the declarations issue (and the input rules before it), each named
// after the sentence it proves, with the exact compiled result or the exact
// errors and warnings.
#include "userspace/policy/compiler.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "userspace/policy/declarations.h"
#include "userspace/policy/deployment_config.h"
#include "userspace/policy/public_suffix.h"
#include "userspace/policy/run_targets.h"

namespace egressd::policy {
namespace {

// A deployment with one platform service of each kind; the object store is
// an address, so it shows up as an allowed CIDR.
constexpr const char* kPlatform = R"(
platform:
  api: https://api.platform.example
  modelGateway: https://gateway.platform.example/v1
  objectStorage: https://203.0.113.10:9000
  packageIndices: [https://pypi.org/simple]
)";
constexpr const char* kPlatformLines[] = {
    "allow 203.0.113.10/32 ports all (deployment setting platform.objectStorage)",
    "name api.platform.example (deployment setting platform.api)",
    "name gateway.platform.example (deployment setting platform.modelGateway)",
    "name pypi.org (deployment setting platform.packageIndices)",
};

// Every member has a default, so a vector names only what it sets.
struct Vector {
  const char* rule = "";
  std::string config = {};        // deployment YAML; "" = the embedded default
  const char* task = nullptr;     // task.yaml, or none
  const char* runtime = nullptr;  // runtime.yaml, or none
  std::vector<std::string> run = {};
  WorkloadKind kind = WorkloadKind::kTask;
  std::vector<std::string> grants = {};
  bool services = false;
  // The compiled policy as Summary() prints it, or the exact error lines.
  std::vector<std::string> want = {};
  std::vector<std::string> want_errors = {};
  std::vector<std::string> want_warnings = {};
  bool names_enforced = true;  // false: no DNS proxy serves it: expect the warning that names reach nothing
};

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
const std::vector<std::string> kPlatformV(std::begin(kPlatformLines), std::end(kPlatformLines));

// ToText without the hash line, the credential endpoints folded into one
// line (they are the same seven on every floor; their source is not).
std::vector<std::string> Summary(const CompiledPolicy& p) {
  std::vector<std::string> lines = absl::StrSplit(p.ToText(), '\n', absl::SkipEmpty());
  lines.erase(lines.begin());
  std::vector<std::string> out;
  int creds = 0;
  for (const std::string& l : lines) {
    const bool cred = l.starts_with("protected ") && creds < 7 && l.find("(floor ") != std::string::npos;
    if (cred && creds++ == 0) {
      out.push_back("protected credential endpoints" + l.substr(l.find(" (")));
    } else if (!cred) {
      out.push_back(l);
    }
  }
  return out;
}

const PublicSuffixList& Psl() {
  static const PublicSuffixList psl =
      *PublicSuffixList::Load(EGR_TESTDATA "/public_suffix_list.dat");
  return psl;
}

// The vector's inputs compiled, errors of every stage joined in order.
absl::StatusOr<CompiledPolicy> CompileVector(const Vector& v) {
  std::vector<std::string> errors;
  auto add = [&errors](const absl::Status& s) {
    for (absl::string_view l : absl::StrSplit(s.message(), '\n')) errors.emplace_back(l);
  };
  DeploymentConfig d = DefaultDeployment();
  if (!v.config.empty()) {
    auto parsed = ParseDeploymentConfig(v.config, "egressd.yaml", &Psl());
    if (parsed.ok()) d = *parsed; else add(parsed.status());
  }
  SandboxInputs in;
  in.kind = v.kind;
  in.run_targets = v.run;
  in.ships_services = v.services;
  if (v.task) {
    auto t = ParseTaskDeclaration(v.task, "task.yaml");
    if (t.ok()) in.task = *t; else add(t.status());
  }
  if (v.runtime) {
    auto r = ParseRuntimeDeclaration(v.runtime, "runtime.yaml");
    if (r.ok()) in.runtime = *r; else add(r.status());
  }
  for (const std::string& g : v.grants) {
    auto grant = ParseGrant(g);
    if (grant.ok()) in.grants.push_back(*grant); else add(grant.status());
  }
  auto p = Compile(d, in, {.public_suffixes = &Psl(), .names_enforced = v.names_enforced});
  if (!p.ok()) add(p.status());
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  return p;
}

// The table, one vector per sentence (kept apart for length).
#include "policy_conformance_vectors.inc"

class Conformance : public testing::TestWithParam<Vector> {};

TEST_P(Conformance, Compiles) {
  const Vector& v = GetParam();
  auto got = CompileVector(v);
  if (!v.want_errors.empty()) {
    ASSERT_FALSE(got.ok()) << absl::StrJoin(Summary(*got), "\n");
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    const std::vector<std::string> lines = absl::StrSplit(got.status().message(), '\n');
    EXPECT_EQ(lines, v.want_errors);
    return;
  }
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Summary(*got), v.want);
  EXPECT_EQ(got->warnings, v.want_warnings);
}

INSTANTIATE_TEST_SUITE_P(Semantics, Conformance, testing::ValuesIn(kVectors),
                         [](const testing::TestParamInfo<Vector>& info) {
                           return std::string(info.param.rule);
                         });

// The same declaration in any order, repeated, compiles to the same policy.
TEST(Compile, OrderAndRepetitionDoNotMatter) {
  SandboxInputs a, b;
  a.run_targets = {"192.0.2.1", "b.example.com", "*.c.example", "10.0.0.0/8"};
  b.run_targets = {"*.C.example", "10.0.0.0/8", "B.example.com.", "192.0.2.1", "10.0.0.0/8"};
  auto pa = Compile(DefaultDeployment(), a), pb = Compile(DefaultDeployment(), b);
  ASSERT_TRUE(pa.ok() && pb.ok());
  EXPECT_EQ(*pa, *pb);
  EXPECT_EQ(pa->ContentHash(), pb->ContentHash());
}

// `egressctl run --floor F` is the one-machine deployment of that floor, and
// the new compiler agrees with CompileRun on every address target.
TEST(Compile, RunFloorIsAOneMachineDeployment) {
  for (Floor f : {Floor::kConnected, Floor::kAirgapped, Floor::kHosted}) {
    for (const std::vector<std::string>& targets :
         {std::vector<std::string>{}, std::vector<std::string>{"192.0.2.0/24", "2001:db8::1"}}) {
      RunInputs old;
      old.floor = f;
      old.egress_targets = targets;
      SandboxInputs in;
      in.run_targets = targets;
      auto want = CompileRun(old);
      auto got = Compile(DeploymentForFloor(f, DenyAction::kReject), in);
      ASSERT_TRUE(want.ok() && got.ok());
      EXPECT_EQ(got->ContentHash(), want->ContentHash()) << ToString(f);
      EXPECT_EQ(got->ToText(), want->ToText()) << ToString(f);
    }
  }
}

// The hash covers names and wildcards (the DNS proxy uses them) but not
// sources or warnings.
TEST(Compile, HashSeesNamesNotSources) {
  SandboxInputs a;
  a.run_targets = {"a.example.com"};
  SandboxInputs b;
  b.task = Declaration{{{"a.example.com", "egress.allow[0]"}}};
  SandboxInputs c;
  c.run_targets = {"*.a.example.com"};
  auto pa = Compile(DefaultDeployment(), a), pb = Compile(DefaultDeployment(), b),
       pc = Compile(DefaultDeployment(), c);
  ASSERT_TRUE(pa.ok() && pb.ok() && pc.ok());
  EXPECT_NE(pa->names[0].source, pb->names[0].source);
  EXPECT_EQ(pa->ContentHash(), pb->ContentHash());
  EXPECT_NE(pa->ContentHash(), pc->ContentHash());
}

}  // namespace
}  // namespace egressd::policy
