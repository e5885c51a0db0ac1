// Conformance vectors for the compiler: one per sentence of the Semantics
// list of the declarations issue (and the input rules before it), each named
// after the sentence it proves, with the exact compiled result or the exact
// errors and warnings.
#include "tests/unit/policy_conformance_vectors.h"

namespace egressd::policy {
namespace {

using namespace conformance;  // NOLINT: the table and its helpers


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
