// A declaration of 100,000 CIDRs compiles whole and correctly, from the
// compiler's inputs and from task.yaml text.  How fast is bench/'s question
// (build/bench/policy_bench), not a pass/fail here: a loaded CI host would
// fail a wall-clock bound without any change in egressd.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "bench/scale_inputs.h"
#include "userspace/policy/compiler.h"
#include "userspace/policy/declarations.h"
#include "userspace/policy/deployment_config.h"

namespace egressd::policy {
namespace {

using bench::CidrText;
using bench::kScaleCidrs;

// Every declared prefix is allowed once, on every port, the list sorted and
// unique (what the maps and the hash rely on).
void ExpectAllDeclared(const CompiledPolicy& p) {
  EXPECT_EQ(p.default_verdict, Verdict::kDeny);
  ASSERT_EQ(p.allowed.size(), static_cast<size_t>(kScaleCidrs));
  EXPECT_TRUE(std::is_sorted(p.allowed.begin(), p.allowed.end(),
                             [](const AllowedCidr& a, const AllowedCidr& b) { return a.cidr < b.cidr; }));
  EXPECT_EQ(std::adjacent_find(p.allowed.begin(), p.allowed.end(),
                               [](const AllowedCidr& a, const AllowedCidr& b) { return a.cidr == b.cidr; }),
            p.allowed.end());
  for (int i : {0, 1, 2, 3, kScaleCidrs / 2, kScaleCidrs - 1}) {
    const net::Cidr want = *net::Cidr::Parse(CidrText(i));
    auto it = std::lower_bound(p.allowed.begin(), p.allowed.end(), want,
                               [](const AllowedCidr& a, const net::Cidr& c) { return a.cidr < c; });
    ASSERT_TRUE(it != p.allowed.end() && it->cidr == want) << CidrText(i);
    EXPECT_TRUE(it->ports.empty()) << CidrText(i);
  }
}

TEST(Scale, HundredThousandCidrsCompile) {
  SandboxInputs in;
  in.task = Declaration{};
  in.task->allow.reserve(kScaleCidrs);
  for (int i = 0; i < kScaleCidrs; ++i) {
    in.task->allow.push_back({CidrText(i), "egress.allow[" + std::to_string(i) + "]"});
  }
  auto p = Compile(DefaultDeployment(), in);
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectAllDeclared(*p);
}

TEST(Scale, HundredThousandCidrsFromYaml) {
  auto d = ParseTaskDeclaration(bench::TaskYaml(kScaleCidrs), "task.yaml");
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(d->has_value());
  ASSERT_EQ((*d)->allow.size(), static_cast<size_t>(kScaleCidrs));
  EXPECT_EQ((*d)->allow[kScaleCidrs - 1].where, "egress.allow[" + std::to_string(kScaleCidrs - 1) + "]");
  SandboxInputs in;
  in.task = **d;
  auto p = Compile(DefaultDeployment(), in);
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectAllDeclared(*p);
}

}  // namespace
}  // namespace egressd::policy
