// A declaration of 100,000 CIDRs parses, compiles and loads into the maps
// whole, and is enforced: one of its entries is reachable, its neighbours are
// not.  How fast is a figure printed here and measured in bench/ (the apply
// row of bench/run.sh, as a ratio to nft -f in one run): a wall-clock bound in
// a test fails on a loaded machine without saying anything about egressd.
#include <arpa/inet.h>

#include <chrono>
#include <cstdio>

#include "egressd_env.h"
#include "userspace/common/node.h"
#include "userspace/control/registry.h"
#include "userspace/policy/compiled_policy.h"
#include "userspace/policy/compiler.h"
#include "userspace/policy/declarations.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;

// task.yaml declaring 100,000 distinct /32s in 10.0.0.0/8 (no lab host
// there) plus the one lab host the test connects to.
std::string HundredThousandCidrTask() {
  std::string yaml = "egress:\n  allow:\n";
  yaml.reserve(100001 * 20);
  for (uint32_t i = 0; i < 100000; ++i) {
    uint32_t a = 0x0A000000u + i * 7;
    yaml += "    - " + std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 255) + "." +
            std::to_string((a >> 8) & 255) + "." + std::to_string(a & 255) + "\n";
  }
  yaml += std::string("    - ") + kPublicD4 + "\n";
  return yaml;
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Scale, HundredThousandCidrsLoadWholeAndAreEnforced) {
  EGR_REQUIRE_PRIVILEGES();
  Egressd& e = Shared();
  Paths paths = Paths::FromEnvironment();
  paths.pin_root = e.pin_root();
  paths.runtime_dir = e.runtime_dir();
  auto cg = e.lab().MakeCgroup("scale");
  ASSERT_TRUE(cg.ok());
  auto id = CgroupIdOf(*cg);
  ASSERT_TRUE(id.ok());
  const std::string yaml = HundredThousandCidrTask();

  // The whole path: parse the declaration, compile it, write it, flip.
  control::Registry registry(paths);
  auto t0 = std::chrono::steady_clock::now();
  auto decl = policy::ParseTaskDeclaration(yaml, "task.yaml");
  ASSERT_TRUE(decl.ok()) << decl.status();
  policy::SandboxInputs in;
  in.task = *decl;
  auto p = policy::Compile(policy::DefaultDeployment(), in);
  ASSERT_TRUE(p.ok()) << p.status();
  double compile_s = SecondsSince(t0);
  ASSERT_EQ(p->allowed.size(), 100001u);
  auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(registry.Register(*id, *p).ok());
  double load_s = SecondsSince(t1), total_s = SecondsSince(t0);
  std::printf("[ figure ] 100001 CIDRs: parsed+compiled %.3f s, loaded (written + flipped) %.3f s, total %.3f s\n",
              compile_s, load_s, total_s);

  RunResult ok = e.lab().Probe({"tcp", kPublicD4, "80"}, *cg);
  EXPECT_EQ(Only(ok)["result"], "ok") << ok.Describe();
  RunResult denied = e.lab().Probe({"tcp", kPublicE4, "80"}, *cg);
  EXPECT_EQ(Only(denied)["errno"], "EPERM") << denied.Describe();

  t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(registry.Unregister(*id).ok());
  double unload_s = SecondsSince(t0);
  std::printf("[ figure ] 100001 CIDRs: removed in %.3f s\n", unload_s);
}

}  // namespace
}  // namespace egressd::test
