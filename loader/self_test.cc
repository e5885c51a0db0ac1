#include "loader/self_test.h"

#include <arpa/inet.h>
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
#include "userspace/common/errors.h"
#include "maps/pinned_maps.h"
#include "maps/policy_store.h"
#include "maps/sandbox_table.h"

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

}  // namespace

absl::Status RunSelfTest(const Paths& paths) {
  EGR_ASSIGN_OR_RETURN(std::string cg_root, FindCgroup2Mount());
  uint32_t nonce = 0;
  (void)getrandom(&nonce, sizeof(nonce), 0);
  std::string dir = absl::StrCat(cg_root, "/egressd-selftest-", getpid(), "-", nonce);
  if (mkdir(dir.c_str(), 0700) != 0) return ErrnoStatus(errno, absl::StrCat("mkdir ", dir));

  EGR_ASSIGN_OR_RETURN(auto maps, maps::PinnedMaps::Open(paths.pin_root));
  maps::PolicyStore store(maps);
  maps::SandboxTable table(maps);
  policy::CompiledPolicy deny_all;
  deny_all.default_verdict = policy::Verdict::kDeny;
  deny_all.deny_action = policy::DenyAction::kReject;

  absl::Status result;
  auto id = CgroupIdOf(dir);
  auto pid = id.ok() ? store.Acquire(deny_all) : id.status();
  if (!pid.ok()) {
    result = pid.status();
  } else {
    result = table.Point(*id, *pid);
    if (result.ok()) result = ProbeConnectRefused(dir);
    (void)table.Remove(*id);
    (void)store.Release(*pid);
  }
  rmdir(dir.c_str());  // the probe has exited, so the cgroup is empty
  if (result.ok()) spdlog::info("self-test passed: a denied connect from a probe cgroup got EPERM");
  return result;
}

}  // namespace egressd
