// A declaration of 100,000 CIDRs loads into the maps in well under a second,
// and is enforced: one of its entries is reachable, its neighbours are not.
#include <arpa/inet.h>

#include <chrono>
#include <cstdio>

#include "egressd_env.h"
#include "loader/environment.h"
#include "userspace/control/registry.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;

policy::CompiledPolicy HundredThousandCidrs() {
  policy::CompiledPolicy p;
  p.default_verdict = policy::Verdict::kDeny;
  // 100,000 distinct /32s in 10.0.0.0/8 (no lab host there) ... plus the one
  // lab host the test connects to.
  for (uint32_t i = 0; i < 100000; ++i) {
    uint32_t a = 0x0A000000u + i * 7;
    net::IpAddr ip = net::IpAddr::V4({uint8_t(a >> 24), uint8_t(a >> 16), uint8_t(a >> 8), uint8_t(a)});
    p.allowed.push_back({*net::Cidr::Make(ip, 32), {}, "scale"});
  }
  p.allowed.push_back({*net::Cidr::Parse(kPublicD4), {}, "scale"});
  return p;
}

TEST(Scale, HundredThousandCidrsLoadInWellUnderASecond) {
  EGR_REQUIRE_PRIVILEGES();
  Egressd& e = Shared();
  Paths paths = Paths::FromEnvironment();
  paths.pin_root = e.pin_root();
  auto cg = e.lab().MakeCgroup("scale");
  ASSERT_TRUE(cg.ok());
  auto id = CgroupIdOf(*cg);
  ASSERT_TRUE(id.ok());
  policy::CompiledPolicy p = HundredThousandCidrs();

  control::Registry registry(paths);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(registry.Register(*id, p).ok());
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ figure ] 100001 CIDRs: registered (written + flipped) in %.3f s\n", load_s);
  EXPECT_LT(load_s, 1.0 * TimeScale());

  RunResult ok = e.lab().Probe({"tcp", kPublicD4, "80"}, *cg);
  EXPECT_EQ(Only(ok)["result"], "ok") << ok.Describe();
  RunResult denied = e.lab().Probe({"tcp", kPublicE4, "80"}, *cg);
  EXPECT_EQ(Only(denied)["errno"], "EPERM") << denied.Describe();

  t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(registry.Unregister(*id).ok());
  double unload_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ figure ] 100001 CIDRs: removed in %.3f s\n", unload_s);
}

}  // namespace
}  // namespace egressd::test
