// Test 7 of the foundation issue: a sandbox run by `egressctl run`, as root
// with CAP_NET_RAW, cannot leave its cgroup, remove egressd's pins, signal
// processes outside, or mark its way out, and bad input never starts it.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "egressd_env.h"

namespace egressd::test {
namespace {

using lab::Lab;
using namespace egressd::lab;

class Escape : public testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    Shared().lab().ResetCounters();
  }
  Lab& lab() { return Shared().lab(); }
};

bool Exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

TEST_F(Escape, CannotMoveIntoAnotherCgroup) {
  auto outside = lab().MakeCgroup("outside");
  ASSERT_TRUE(outside.ok()) << outside.status();
  const std::string root = Lab::cgroup2_root();
  RunResult r = Shared().RunSandboxed(
      {"--floor", "airgapped"},
      {"write-file", *outside + "/cgroup.procs", "0", "--then",
       "write-file", root + "/../cgroup.procs", "0", "--then",
       "info", "--then", "tcp", kPublicA4, "80"});
  auto lines = Lines(r);
  ASSERT_EQ(lines.size(), 4u) << r.Describe();
  EXPECT_NE(lines[0]["result"], "ok") << "moved into " << *outside << ": " << r.Describe();
  EXPECT_NE(lines[1]["result"], "ok") << r.Describe();
  EXPECT_EQ(lines[3]["errno"], "EPERM") << "still enforced afterwards: " << r.Describe();
  std::ifstream procs(*outside + "/cgroup.procs");
  std::string any;
  EXPECT_FALSE(std::getline(procs, any) && !any.empty()) << "a sandbox process is in " << *outside;
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().PacketsTo(kPublicA4), 0u);
}

TEST_F(Escape, CannotSeeOrRemoveThePins) {
  const std::string pins = Shared().pin_root();
  for (const std::string& victim : {pins + "/egr_cgroups_v1", pins + "/links/egr_connect4",
                                   pins + "/links/egr_skb_egress"}) {
    ASSERT_TRUE(Exists(victim)) << victim;
    RunResult r = Shared().RunSandboxed({}, {"unlink", victim, "--then", "tcp", kImds4, "80"});
    auto lines = Lines(r);
    ASSERT_EQ(lines.size(), 2u) << r.Describe();
    EXPECT_EQ(lines[0]["errno"], "ENOENT") << "bpffs must be hidden: " << r.Describe();
    EXPECT_EQ(lines[1]["errno"], "EPERM") << r.Describe();
    EXPECT_TRUE(Exists(victim)) << victim << " was removed by a sandbox";
  }
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().PacketsTo(kImds4), 0u);
}

TEST_F(Escape, CannotMountBpffsOrUnhideIt) {
  // Each step prints a line of its own; the user-namespace step proves it ran
  // (UNSHARE_RAN from inside the new namespaces) so a refused unshare cannot
  // pass for a defended one. (Until this marker existed, `unshare -Urm` was
  // refused at its uid_map write and the branch never ran.)
  RunResult r = Shared().RunSandboxed(
      {}, {"exec", "--", "sh", "-c",
           "mount -t bpf bpf /mnt 2>/dev/null && echo MOUNTED_BPFFS; "
           "umount /sys/fs/bpf 2>/dev/null && echo UNMOUNTED_HIDING; "
           // Mapping root into a new user namespace needs CAP_SETFCAP (5.12+),
           // which the sandbox lacks; an unmapped user namespace still gets
           // every capability over its own new mount namespace.
           "unshare -Urm true 2>/dev/null || echo ROOT_MAP_REFUSED; "
           "unshare -Um sh -c 'echo UNSHARE_RAN; "
           "umount -l /sys/fs/bpf 2>/dev/null && echo UNSHARE_UNMOUNTED_HIDING; "
           "ls /sys/fs/bpf 2>/dev/null | grep -q egr && echo SAW_PINS; true' || echo UNSHARE_FAILED=$?; "
           "echo done"});
  std::vector<std::string> out = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  auto has = [&](const std::string& line) {
    return std::find(out.begin(), out.end(), line) != out.end();
  };
  EXPECT_TRUE(has("done")) << r.Describe();
  EXPECT_FALSE(has("MOUNTED_BPFFS")) << r.Describe();
  EXPECT_FALSE(has("UNMOUNTED_HIDING")) << r.Describe();
  EXPECT_TRUE(has("UNSHARE_RAN")) << "the user-namespace attempt did not run: " << r.Describe();
  EXPECT_FALSE(has("UNSHARE_UNMOUNTED_HIDING")) << r.Describe();
  EXPECT_FALSE(has("SAW_PINS")) << r.Describe();
  std::cout << "[ info ] bpffs escape attempts: " << absl::StrJoin(out, " ") << "\n";
}

TEST_F(Escape, CannotSignalProcessesOutside) {
  // Stands in for egressd and egressctl: a process outside the sandbox.
  RunSpec outside;
  outside.argv = {"sleep", "30"};
  auto bg = Start(outside);
  ASSERT_TRUE(bg.ok()) << bg.status();
  const std::string pid = std::to_string(bg->pid());
  RunResult r = Shared().RunSandboxed({}, {"kill", pid, "KILL", "--then", "kill", "1", "0"});
  auto lines = Lines(r);
  ASSERT_EQ(lines.size(), 2u) << r.Describe();
  // In its own PID namespace that pid means nothing: kill() found no such
  // process, so no signal was sent (a delivered SIGKILL would end `bg` only
  // asynchronously; the errno is the synchronous proof).
  EXPECT_EQ(lines[0]["errno"], "ESRCH") << r.Describe();
  EXPECT_TRUE(bg->running()) << "the sandbox killed pid " << pid << ": " << r.Describe();
  EXPECT_EQ(lines[1]["result"], "ok") << "pid 1 is the sandbox's own init: " << r.Describe();
}

TEST_F(Escape, KeepsOnlyCapNetRawOfTheDangerousOnes) {
  // Even without setpriv, `egressctl run --host-root` (the node's root) drops
  // what reaches the node's BPF and network configuration.
  RunResult r = Shared().Ctl({"run", "--host-root", "--", "grep", "^CapBnd", "/proc/self/status"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  uint64_t bnd = std::stoull(r.out.substr(r.out.find(':') + 1), nullptr, 16);
  EXPECT_FALSE(bnd & (1ULL << 21)) << "CAP_SYS_ADMIN kept";
  EXPECT_FALSE(bnd & (1ULL << 12)) << "CAP_NET_ADMIN kept";
  EXPECT_FALSE(bnd & (1ULL << 39)) << "CAP_BPF kept";
  EXPECT_FALSE(bnd & (1ULL << 38)) << "CAP_PERFMON kept";
  EXPECT_TRUE(bnd & (1ULL << 13)) << "CAP_NET_RAW is kept on purpose (the backstop judges raw sockets)";
}

TEST_F(Escape, UserFlagDropsToThatUid) {
  RunResult r = Shared().Ctl({"run", "--user", "65534", "--", "sh", "-c", "id -u; id -g"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "65534\n65534\n");
  r = Shared().Ctl({"run", "--user", "no-such-user-egr", "--", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "\"no-such-user-egr\"")) << r.err;
}

TEST_F(Escape, BadTargetExits2NamingItBeforeTheCommandStarts) {
  const std::string marker = "/tmp/egr-escape-marker-" + lab().id();
  RunResult r = Shared().Ctl({"run", "--egress", "169.254.169.254", "--egress", "10.0.0.0/33",
                              "--egress", "192.0.2.10", "--", "touch", marker});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "\"169.254.169.254\"")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "\"10.0.0.0/33\"")) << r.err;
  EXPECT_FALSE(absl::StrContains(r.err, "192.0.2.10")) << "a valid target is not an error: " << r.err;
  EXPECT_FALSE(Exists(marker)) << "the command ran despite bad input";

  r = Shared().Ctl({"run", "--floor", "open", "--on-deny", "maybe", "--", "touch", marker});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "\"open\"")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "\"maybe\"")) << r.err;
  EXPECT_FALSE(Exists(marker));
}

TEST_F(Escape, RunExitsWithTheCommandsStatusAndCleansUp) {
  RunResult r = Shared().Ctl({"run", "--", "sh", "-c", "exit 7"});
  EXPECT_EQ(r.exit_code, 7) << r.Describe();
  RunResult status = Shared().Ctl({"status", "--json"});
  EXPECT_TRUE(absl::StrContains(status.out, "\"cgroups\": []")) << status.out;
  EXPECT_TRUE(absl::StrContains(status.out, "\"policies\": []")) << status.out;
}

}  // namespace
}  // namespace egressd::test
