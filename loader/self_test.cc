#include "loader/self_test.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "userspace/common/cgroup_tree.h"
#include "userspace/common/errors.h"
#include "maps/pinned_maps.h"
#include "maps/policy_store.h"
#include "maps/sandbox_table.h"
#include "userspace/common/fault.h"

namespace egressd {
namespace {

enum ProbeExit { kRefused = 0, kConnected = 10, kOtherError = 11, kSetupFailed = 12 };

// In the child: a private netns whose only interface is lo, carrying a
// TEST-NET address, so the probe is hermetic (even failed enforcement sends
// nothing anywhere) and its destination is not a loopback address (which
// egressd exempts outside the node's netns).  Listen there, join the probe
// cgroup, connect.  Only async-signal-safe calls after fork.
[[noreturn]] void ProbeChild(const char* procs) {
  if (unshare(CLONE_NEWNET) != 0) _exit(kSetupFailed);
  int ctl = socket(AF_INET, SOCK_DGRAM, 0);
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, "lo", 3);
  sockaddr_in lo_addr{};
  lo_addr.sin_family = AF_INET;
  lo_addr.sin_addr.s_addr = htonl(0xC0000201);  // 192.0.2.1
  std::memcpy(&ifr.ifr_addr, &lo_addr, sizeof(lo_addr));
  if (ctl < 0 || ioctl(ctl, SIOCSIFADDR, &ifr) != 0) _exit(kSetupFailed);
  if (ioctl(ctl, SIOCGIFFLAGS, &ifr) != 0) _exit(kSetupFailed);
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(ctl, SIOCSIFFLAGS, &ifr) != 0) _exit(kSetupFailed);

  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = lo_addr;
  socklen_t alen = sizeof(a);
  if (l < 0 || bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(l, 1) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &alen) != 0) {
    _exit(kSetupFailed);
  }
  int p = open(procs, O_WRONLY | O_CLOEXEC);
  if (p < 0 || write(p, "0", 1) != 1) _exit(kSetupFailed);
  close(p);
  int c = socket(AF_INET, SOCK_STREAM, 0);
  if (c < 0) _exit(kSetupFailed);
  if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) _exit(kConnected);
  _exit(errno == EPERM ? kRefused : kOtherError);
}

absl::Status ProbeConnectRefused(const std::string& cgroup_dir) {
  std::string procs = cgroup_dir + "/cgroup.procs";
  pid_t pid = fork();
  if (pid < 0) return ErrnoStatus(errno, "fork self-test probe");
  if (pid == 0) ProbeChild(procs.c_str());
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return ErrnoStatus(errno, "wait for self-test probe");
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  switch (code) {
    case kRefused: return absl::OkStatus();
    case kConnected:
      return absl::InternalError("self-test FAILED: a connect from a sandbox under a deny-all policy succeeded");
    case kOtherError:
      return absl::InternalError("self-test FAILED: the denied connect failed, but not with EPERM");
    default:
      return absl::InternalError(absl::StrCat("self-test could not run its probe (exit ", code, ")"));
  }
}

// Self-test cgroups are named after the instance, so an instance collects
// only its own: "egressd-selftest-<hash of the pin root>-<pid>-<nonce>".
std::string SelfTestPrefix(const Paths& paths) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: a stable tag, not a secret
  for (unsigned char ch : paths.pin_root) h = (h ^ ch) * 1099511628211ull;
  char tag[17];
  std::snprintf(tag, sizeof(tag), "%016llx", static_cast<unsigned long long>(h));
  return absl::StrCat("egressd-selftest-", tag, "-");
}

// What the self-test's probe cgroup is judged by: deny everything, refuse at
// once.  Never shared (PolicyStore::Acquire installs it under a fresh id).
policy::CompiledPolicy SelfTestPolicy() {
  policy::CompiledPolicy deny_all;
  deny_all.default_verdict = policy::Verdict::kDeny;
  deny_all.deny_action = policy::DenyAction::kReject;
  return deny_all;
}

}  // namespace

int CollectDeadSelfTests(const Paths& paths) {
  auto cg_root = FindCgroup2Mount();
  auto maps = maps::PinnedMaps::Open(paths.pin_root);
  if (!cg_root.ok()) return 0;
  const std::string prefix = SelfTestPrefix(paths);
  std::vector<std::string> dirs;
  if (DIR* d = opendir(cg_root->c_str())) {
    while (dirent* e = readdir(d)) {
      if (std::string(e->d_name).rfind(prefix, 0) == 0) dirs.push_back(*cg_root + "/" + e->d_name);
    }
    closedir(d);
  }
  for (const auto& dir : dirs) {
    // Only the lock holder runs a self-test, and the caller holds the lock:
    // every self-test cgroup of this instance found now belongs to a dead run.
    spdlog::warn("collecting the state of a self-test that did not finish: {}", dir);
    auto id = CgroupIdOf(dir);
    if (id.ok() && maps.ok()) {
      maps::SandboxTable table(*maps);
      if (auto v = table.Get(*id); v.ok() && *v) {
        (void)table.Remove(*id);
        if ((*v)->kind == EGR_CG_SANDBOX) (void)maps::PolicyStore(*maps).Release((*v)->policy_id, SelfTestPolicy());
      }
    }
    // The probe never blocks (a denied connect fails at once): it is gone or
    // going, and the cgroup goes with it.
    if (absl::Status s = KillAndRemoveCgroup(dir); !s.ok()) spdlog::warn("{}", s.ToString());
  }
  return static_cast<int>(dirs.size());
}

absl::Status RunSelfTest(const Paths& paths) {
  CollectDeadSelfTests(paths);
  EGR_ASSIGN_OR_RETURN(std::string cg_root, FindCgroup2Mount());
  uint32_t nonce = 0;
  (void)getrandom(&nonce, sizeof(nonce), 0);
  std::string dir = absl::StrCat(cg_root, "/", SelfTestPrefix(paths), getpid(), "-", nonce);
  if (mkdir(dir.c_str(), 0700) != 0) return ErrnoStatus(errno, absl::StrCat("mkdir ", dir));

  EGR_ASSIGN_OR_RETURN(auto maps, maps::PinnedMaps::Open(paths.pin_root));
  maps::PolicyStore store(maps);
  maps::SandboxTable table(maps);
  const policy::CompiledPolicy deny_all = SelfTestPolicy();

  absl::Status result;
  auto id = CgroupIdOf(dir);
  auto pid = id.ok() ? store.Acquire(deny_all) : id.status();
  if (!pid.ok()) {
    result = pid.status();
  } else {
    result = table.Point(*id, *pid);
    CrashPoint("selftest:registered");
    if (result.ok()) result = ProbeConnectRefused(dir);
    (void)table.Remove(*id);
    (void)store.Release(*pid, deny_all);
  }
  rmdir(dir.c_str());  // the probe has exited, so the cgroup is empty
  if (result.ok()) spdlog::info("self-test passed: a denied connect from a probe cgroup got EPERM");
  return result;
}

}  // namespace egressd
