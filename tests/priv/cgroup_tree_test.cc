// Issue 7: a sandbox cgroup is torn down by waiting on the kernel's
// cgroup.events ("populated 0"), not by polling; and a removed cgroup's id is
// known to be dead (what lets `load` collect a crashed run's sandbox).
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "egressd_env.h"
#include "userspace/common/node.h"
#include "userspace/common/cgroup_tree.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;
using std::chrono::milliseconds;

bool Exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

TEST(CgroupTree, KillAndRemoveWaitsForTheKernelsEventAndRemovesTheTree) {
  EGR_REQUIRE_PRIVILEGES();
  auto top = Shared().lab().MakeCgroup("teardown");
  ASSERT_TRUE(top.ok()) << top.status();
  const std::string child = *top + "/inner";
  ASSERT_EQ(mkdir(child.c_str(), 0755), 0);
  auto top_id = CgroupIdOf(*top), child_id = CgroupIdOf(child);
  ASSERT_TRUE(top_id.ok() && child_id.ok());
  EXPECT_TRUE(CgroupExists(*top_id).value());
  EXPECT_TRUE(CgroupExists(*child_id).value());

  // Processes in both, one of them forking children as fast as it can.
  std::vector<Background> procs;
  for (const std::string& cg : {*top, child}) {
    for (const char* script : {"exec sleep 600", "while :; do sleep 600 & done"}) {
      RunSpec spec{.argv = {"sh", "-c", script}, .cgroup = cg, .timeout = milliseconds(60000)};
      auto bg = Start(spec);
      ASSERT_TRUE(bg.ok()) << bg.status();
      procs.push_back(std::move(*bg));
    }
  }
  ASSERT_TRUE(Lab::WaitFor([&] {
    std::ifstream events(*top + "/cgroup.events");
    std::string all((std::istreambuf_iterator<char>(events)), {});
    return all.find("populated 1") != std::string::npos;
  }));

  auto t0 = std::chrono::steady_clock::now();
  absl::Status s = KillAndRemoveCgroup(*top);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(s.ok()) << s;
  std::printf("[ figure ] killed 4 processes (2 forking) in 2 cgroups and removed them in %.2f ms\n", ms);
  EXPECT_FALSE(Exists(child));
  EXPECT_FALSE(Exists(*top));
  for (auto& p : procs) EXPECT_EQ(p.Wait(milliseconds(5000)).exit_code, -SIGKILL);
  EXPECT_FALSE(CgroupExists(*top_id).value()) << "a removed cgroup still resolves";
  EXPECT_FALSE(CgroupExists(*child_id).value());
  EXPECT_TRUE(KillAndRemoveCgroup(*top).ok()) << "a missing cgroup is already removed";
}

}  // namespace
}  // namespace egressd::test
