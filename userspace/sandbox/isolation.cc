#include "userspace/sandbox/isolation.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"
#include "userspace/sandbox/no_lsm_fallback.h"

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

// One byte of a handshake pipe.  A forwarded signal's handler runs in the
// sandbox's init while it waits here (SIGTERM right after registration): the
// read or write is then interrupted, not failed, and goes on.
ssize_t ReadByte(int fd, char* c) {
  ssize_t n;
  while ((n = read(fd, c, 1)) < 0 && errno == EINTR) {
  }
  return n;
}
ssize_t WriteByte(int fd, char c) {
  ssize_t n;
  while ((n = write(fd, &c, 1)) < 0 && errno == EINTR) {
  }
  return n;
}

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "egressctl run: %s: %s\n", what, std::strerror(errno));
  _exit(kSetupFailed);
}

void DropCapabilities(const IsolationSpec& spec) {
  std::vector<int> dropped = DroppedCapabilities();
  if (spec.no_lsm_fallback && spec.identity != Identity::kHostRoot) dropped.push_back(CAP_NET_RAW);
  for (int cap : dropped) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) Fail("drop capability from bounding set");
  }
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) Fail("capget");
  for (int cap : dropped) {
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

// Last before exec, once the command is who it will be (no_new_privs set).
void InstallNoLsmFallback() {
  if (absl::Status s = InstallSocketFamilyFilter(); !s.ok()) {
    std::fprintf(stderr, "egressctl run: %s\n", std::string(s.message()).c_str());
    _exit(kSetupFailed);
  }
  if (!AbstractUnixScopeAvailable()) return;
  if (absl::Status s = ScopeAbstractUnixSockets(); !s.ok()) {
    std::fprintf(stderr, "egressctl run: %s\n", std::string(s.message()).c_str());
    _exit(kSetupFailed);
  }
}

// A pipe between the sandbox's init and its command: the command says when
// it has its user namespace, init says when the namespace's ids are mapped.
struct MapHandshake {
  int to_init[2] = {-1, -1};
  int to_cmd[2] = {-1, -1};
};

void WriteFileOrFail(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    Fail(("write " + path).c_str());
  }
  close(fd);
}

// Root of a new user namespace whose 0 is nobody on the node. The mapping is
// written by init, real root of the initial user namespace (the command,
// once inside, may map only its own uid, which is still the node's 0). Until
// the setresuid below the command keeps the node's uid 0, so nothing runs in
// between; its supplementary groups go first, as they would stay the node's.
void EnterUserNamespace(const MapHandshake& h) {
  if (setgroups(0, nullptr) != 0) Fail("setgroups");
  if (unshare(CLONE_NEWUSER) != 0) Fail("unshare user namespace");
  char c = 'u';
  if (WriteByte(h.to_init[1], c) != 1) Fail("ask for the uid map");
  if (ReadByte(h.to_cmd[0], &c) != 1 || c != 'm') {
    errno = EPROTO;
    Fail("wait for the uid map");
  }
  if (setresgid(0, 0, 0) != 0) Fail("setgid to the namespace's root");
  if (setresuid(0, 0, 0) != 0) Fail("setuid to the namespace's root");
}

// The other side: maps the command's namespace, 0 to nobody.
void MapUserNamespace(pid_t cmd, const MapHandshake& h) {
  char c = 0;
  if (ReadByte(h.to_init[0], &c) != 1 || c != 'u') _exit(kSetupFailed);  // the command said why
  const std::string proc = "/proc/" + std::to_string(cmd);
  WriteFileOrFail(proc + "/uid_map", "0 " + std::to_string(kNamespaceRootUid) + " 1\n");
  WriteFileOrFail(proc + "/gid_map", "0 " + std::to_string(kNamespaceRootGid) + " 1\n");
  c = 'm';
  if (WriteByte(h.to_cmd[1], c) != 1) Fail("report the uid map");
}

[[noreturn]] void ExecCommand(const IsolationSpec& spec, const MapHandshake& h) {
  switch (spec.identity) {
    case Identity::kNamespaceRoot:
      EnterUserNamespace(h);
      DropCapabilities(spec);
      break;
    case Identity::kUser:
      DropCapabilities(spec);
      if (setgroups(0, nullptr) != 0 || setresgid(spec.gid, spec.gid, spec.gid) != 0) Fail("setgid");
      if (setresuid(spec.uid, spec.uid, spec.uid) != 0) Fail("setuid");
      break;
    case Identity::kHostRoot:
      DropCapabilities(spec);
      break;
  }
  // The command takes signals as any process does: default actions, and
  // nothing blocked (exec keeps the mask).  One forwarded before now is
  // delivered here, with its default action.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaction(sig, &dfl, nullptr);
  UnblockForwardedSignals();
  if (spec.no_lsm_fallback) InstallNoLsmFallback();
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
  if (absl::Status s = SetUpNodeView(spec.view); !s.ok()) {
    std::fprintf(stderr, "egressctl run: %s\n", std::string(s.message()).c_str());
    _exit(kSetupFailed);
  }
  if (chdir(spec.start_dir.c_str()) != 0) Fail(("chdir " + spec.start_dir).c_str());
  MapHandshake h;
  if (spec.identity == Identity::kNamespaceRoot &&
      (pipe2(h.to_init, O_CLOEXEC) != 0 || pipe2(h.to_cmd, O_CLOEXEC) != 0)) {
    Fail("pipe");
  }
  pid_t cmd = fork();
  if (cmd < 0) Fail("fork command");
  if (cmd == 0) ExecCommand(spec, h);
  ForwardSignalsTo(cmd);
  UnblockForwardedSignals();
  if (spec.identity == Identity::kNamespaceRoot) {
    close(h.to_init[1]);
    close(h.to_cmd[0]);
    MapUserNamespace(cmd, h);
    close(h.to_init[0]);
    close(h.to_cmd[1]);
  }
  for (;;) {
    int status = 0;
    pid_t p = wait(&status);
    if (p == cmd) _exit(StatusToExitCode(status));
    if (p < 0 && errno == ECHILD) _exit(kSetupFailed);
  }
}

// The pipes of RunIsolated's PID namespace handshake: the child says the
// namespace exists, the parent says it has seen it.
struct PidnsHandshake {
  int made[2] = {-1, -1};
  int seen[2] = {-1, -1};
};

// A child born in the sandbox cgroup (clone3 with CLONE_INTO_CGROUP), so
// nothing is moved into it.  Moving a process (a write to cgroup.procs)
// takes the cgroup core's thread-group lock for writing, which waits out an
// RCU grace period whenever no other move happened just before: 7-16 ms
// here, every `egressctl run` (a third of `run -- true`), against 0.2 ms for
// a clone into the cgroup.  Called in a process fork() made (one thread, so
// a raw clone3, which glibc 2.36 does not wrap and whose child skips glibc's
// fork handlers, leaves no lock held by another thread).  Returns the
// child's pid in the parent, 0 in the child, -1 with errno where it fails
// (a seccomp filter, an older kernel, the cgroup itself): the caller joins
// by cgroup.procs then, which reports a cgroup it cannot join.
pid_t CloneIntoCgroup(const std::string& cgroup_dir) {
  int cg = open(cgroup_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (cg < 0) return -1;
  struct clone_args args {};
  args.flags = CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<uint64_t>(cg);
  const long r = syscall(SYS_clone3, &args, sizeof(args));
  const int err = errno;
  close(cg);  // both sides: O_CLOEXEC would keep the child's until its exec
  errno = err;
  return static_cast<pid_t>(r);
}

// Joins the sandbox cgroup, then unshares so the cgroup namespace is rooted
// there and the next child is PID 1 of a new PID namespace.
[[noreturn]] void EnterSandbox(const IsolationSpec& spec, const PidnsHandshake& hs) {
  // The parent deferred signals across registration, and they stay deferred
  // down the chain (this process, the sandbox's init, the command) until
  // each has its forwarder in place: a SIGTERM that arrives in between is
  // held, then forwarded, never taken by a default action that would leave
  // the command running without a parent that cleans up.
  const pid_t in_cgroup = CloneIntoCgroup(spec.cgroup_dir);
  if (in_cgroup > 0) {
    // This process stays outside the sandbox, as its parent: the child goes
    // on below, in the cgroup; what it exits with is the run's.
    for (int fd : {hs.made[0], hs.made[1], hs.seen[0], hs.seen[1]}) {
      if (fd >= 0) close(fd);
    }
    ForwardSignalsTo(in_cgroup);
    UnblockForwardedSignals();
    _exit(WaitFor(in_cgroup));
  }
  if (in_cgroup < 0) {
    // No clone3 into the cgroup here (ENOSYS under a container runtime's
    // seccomp filter, EINVAL before 5.7): this process moves itself, and a
    // cgroup it cannot join fails here, naming it.
    std::string procs = spec.cgroup_dir + "/cgroup.procs";
    int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1) Fail(("join " + procs).c_str());
    close(fd);
  }
  if (unshare(CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWPID) != 0) Fail("unshare");
  // The namespace can be named (pid_for_children) only once its init
  // exists: init waits at a gate until the parent has recorded it.
  int gate[2] = {-1, -1};
  const bool handshake = hs.made[1] >= 0;
  if (handshake && pipe2(gate, O_CLOEXEC) != 0) Fail("pipe");
  pid_t init = fork();
  if (init < 0) Fail("fork sandbox init");
  if (init == 0) {
    if (handshake) {
      for (int fd : {hs.made[0], hs.made[1], hs.seen[0], hs.seen[1], gate[1]}) close(fd);
      char c;
      ssize_t n;
      while ((n = read(gate[0], &c, 1)) < 0 && errno == EINTR) {
      }
      close(gate[0]);
      if (n != 1) _exit(kSetupFailed);  // the process above died: nobody would clean up after us
    }
    SandboxInit(spec);
  }
  if (handshake) {
    close(gate[0]);
    close(hs.made[0]);
    close(hs.seen[1]);
    struct stat st {};
    uint64_t id[2] = {0, 0};
    if (stat("/proc/self/ns/pid_for_children", &st) == 0) {
      id[0] = st.st_dev;
      id[1] = st.st_ino;
    } else {
      id[0] = static_cast<uint64_t>(errno);  // inode 0: the parent says why
    }
    if (write(hs.made[1], id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) Fail("pid namespace handshake");
    close(hs.made[1]);
    char c;
    // EOF too (the parent died or failed to look): go on either way.
    while (read(hs.seen[0], &c, 1) < 0 && errno == EINTR) {
    }
    close(hs.seen[0]);
  }
  ForwardSignalsTo(init);
  if (handshake) {
    const char go = 'g';
    if (write(gate[1], &go, 1) != 1) Fail("release the sandbox's init");
    close(gate[1]);  // init goes on
  }
  UnblockForwardedSignals();  // what arrived meanwhile goes to init now
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
  PidnsHandshake hs;
  if (spec.on_pid_namespace && (pipe2(hs.made, O_CLOEXEC) != 0 || pipe2(hs.seen, O_CLOEXEC) != 0)) {
    return ErrnoStatus(errno, "pipe");
  }
  pid_t child = fork();
  if (child < 0) return ErrnoStatus(errno, "fork");
  if (child == 0) EnterSandbox(spec, hs);
  if (hs.made[0] >= 0) {
    close(hs.made[1]);
    close(hs.seen[0]);
    uint64_t id[2];
    ssize_t n;
    while ((n = read(hs.made[0], id, sizeof(id))) < 0 && errno == EINTR) {
    }
    // n == 0: the child failed before unsharing (it reports why).
    if (n == static_cast<ssize_t>(sizeof(id)) && id[1] != 0) {
      spec.on_pid_namespace(id[0], id[1]);
    } else if (n == static_cast<ssize_t>(sizeof(id))) {
      std::fprintf(stderr, "egressctl run: the sandbox's pid namespace is not known: stat "
                           "/proc/self/ns/pid_for_children: %s\n", strerror(static_cast<int>(id[0])));
    }
    close(hs.made[0]);
    close(hs.seen[1]);  // the child goes on
  }
  ForwardSignalsTo(child);
  // Anything that arrived while deferred is delivered now, to the command.
  UnblockForwardedSignals();
  int code = WaitFor(child);
  ForwardSignalsTo(-1);
  return code;
}

}  // namespace egressd::sandbox
