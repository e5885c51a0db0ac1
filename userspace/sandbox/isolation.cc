#include "userspace/sandbox/isolation.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/match.h"
#include "userspace/common/errors.h"

namespace egressd::sandbox {
namespace {

constexpr int kSetupFailed = 125;  // like env(1)/chroot(1): the wrapper failed
constexpr int kExecFailed = 127;

volatile pid_t g_forward_to = -1;

sigset_t ForwardedSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&set, sig);
  return set;
}

void UnblockForwardedSignals() {
  sigset_t set = ForwardedSignals();
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
}

void Forward(int sig) {
  if (g_forward_to > 0) kill(g_forward_to, sig);
}

// SIGINT/SIGTERM/SIGHUP/SIGQUIT reach whoever runs the command next.
void ForwardSignalsTo(pid_t child) {
  g_forward_to = child;
  struct sigaction sa {};
  sa.sa_handler = Forward;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaction(sig, &sa, nullptr);
}

int StatusToExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kSetupFailed;
}

int WaitFor(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return kSetupFailed;
  }
  return StatusToExitCode(status);
}

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "egressctl run: %s: %s\n", what, std::strerror(errno));
  _exit(kSetupFailed);
}

bool IsDir(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void MountCgroupSubtree(const std::string& cg2) {
  const unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  // On hybrid hosts the v1 hierarchies sit beside cgroup2 under
  // /sys/fs/cgroup: cover them all, then show only our cgroup2 subtree.
  if (absl::StartsWith(cg2, "/sys/fs/cgroup/")) {
    if (mount("tmpfs", "/sys/fs/cgroup", "tmpfs", flags, "mode=0755,size=64k") != 0) Fail("mount tmpfs on /sys/fs/cgroup");
    if (mkdir(cg2.c_str(), 0755) != 0 && errno != EEXIST) Fail("mkdir cgroup2 mount point");
  }
  // In the new cgroup namespace a fresh cgroup2 mount is rooted at the sandbox.
  // Where cgroup2 is mounted at cg2 itself (unified hosts, Kubernetes nodes)
  // the kernel refuses a second cgroup2 mount on top of it (EBUSY): detach
  // the node's one first (this mount namespace is private).
  if (umount2(cg2.c_str(), MNT_DETACH) != 0 && errno != EINVAL) Fail("detach the node's cgroup2 mount");
  if (mount("cgroup2", cg2.c_str(), "cgroup2", flags, nullptr) != 0) Fail("mount cgroup2");
}

void HideDirs(const std::vector<std::string>& dirs) {
  for (const auto& d : dirs) {
    if (!IsDir(d)) continue;  // absent, or already under an earlier tmpfs
    if (mount("tmpfs", d.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k") != 0) {
      Fail(("hide " + d).c_str());
    }
  }
}

void DropCapabilities() {
  for (int cap : DroppedCapabilities()) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) Fail("drop capability from bounding set");
  }
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) Fail("capget");
  for (int cap : DroppedCapabilities()) {
    uint32_t bit = 1u << (cap % 32);
    data[cap / 32].effective &= ~bit;
    data[cap / 32].permitted &= ~bit;
    data[cap / 32].inheritable &= ~bit;
  }
  if (syscall(SYS_capset, &hdr, data) != 0) Fail("capset");
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  // setuid binaries inside must not win back what was dropped.
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) Fail("PR_SET_NO_NEW_PRIVS");
}

[[noreturn]] void ExecCommand(const IsolationSpec& spec) {
  DropCapabilities();
  if (spec.gid) {
    if (setgroups(0, nullptr) != 0 || setresgid(*spec.gid, *spec.gid, *spec.gid) != 0) Fail("setgid");
  }
  if (spec.uid && setresuid(*spec.uid, *spec.uid, *spec.uid) != 0) Fail("setuid");
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "egressctl run: cannot run \"%s\": %s\n", argv[0], std::strerror(errno));
  _exit(kExecFailed);
}

// PID 1 of the sandbox's PID namespace: sets up the mount namespace, runs the
// command, reaps orphans, and exits with the command's status (which ends
// every other process in the namespace).
[[noreturn]] void SandboxInit(const IsolationSpec& spec) {
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) Fail("make mounts private");
  MountCgroupSubtree(spec.cgroup2_mount);
  HideDirs(spec.hide_dirs);
  if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) Fail("mount /proc");
  pid_t cmd = fork();
  if (cmd < 0) Fail("fork command");
  if (cmd == 0) ExecCommand(spec);
  ForwardSignalsTo(cmd);
  for (;;) {
    int status = 0;
    pid_t p = wait(&status);
    if (p == cmd) _exit(StatusToExitCode(status));
    if (p < 0 && errno == ECHILD) _exit(kSetupFailed);
  }
}

// Joins the sandbox cgroup, then unshares so the cgroup namespace is rooted
// there and the next child is PID 1 of a new PID namespace.
[[noreturn]] void EnterSandbox(const IsolationSpec& spec) {
  // The parent deferred signals across registration; the sandbox's own
  // processes take them as usual (each forwards to the next one down).
  UnblockForwardedSignals();
  std::string procs = spec.cgroup_dir + "/cgroup.procs";
  int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, "0", 1) != 1) Fail(("join " + procs).c_str());
  close(fd);
  if (unshare(CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWPID) != 0) Fail("unshare");
  pid_t init = fork();
  if (init < 0) Fail("fork sandbox init");
  if (init == 0) SandboxInit(spec);
  ForwardSignalsTo(init);
  _exit(WaitFor(init));
}

}  // namespace

const std::vector<int>& DroppedCapabilities() {
  static const std::vector<int> caps = {
      CAP_SYS_ADMIN,  CAP_NET_ADMIN,  CAP_BPF,        CAP_PERFMON,   CAP_SYS_MODULE,
      CAP_SYS_RAWIO,  CAP_SYS_PTRACE, CAP_SYS_BOOT,   CAP_MAC_ADMIN, CAP_MAC_OVERRIDE,
      CAP_SYSLOG,     CAP_MKNOD,      CAP_SYS_TIME,   CAP_CHECKPOINT_RESTORE, CAP_DAC_READ_SEARCH,
      CAP_LINUX_IMMUTABLE, CAP_AUDIT_CONTROL, CAP_WAKE_ALARM, CAP_BLOCK_SUSPEND, CAP_SYS_PACCT,
  };
  return caps;
}

DeferSignals::DeferSignals() {
  sigset_t set = ForwardedSignals();
  sigprocmask(SIG_BLOCK, &set, &old_);
}

DeferSignals::~DeferSignals() { sigprocmask(SIG_SETMASK, &old_, nullptr); }

absl::StatusOr<int> RunIsolated(const IsolationSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("no command to run");
  std::fflush(nullptr);
  pid_t child = fork();
  if (child < 0) return ErrnoStatus(errno, "fork");
  if (child == 0) EnterSandbox(spec);
  ForwardSignalsTo(child);
  // Anything that arrived while deferred is delivered now, to the command.
  UnblockForwardedSignals();
  int code = WaitFor(child);
  ForwardSignalsTo(-1);
  return code;
}

}  // namespace egressd::sandbox
