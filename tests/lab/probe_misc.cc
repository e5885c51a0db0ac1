// Non-network operations: files, signals, cgroups, exec, sleep, info.
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <thread>

#include "probe_common.h"

namespace egressd::probe {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string StatusField(const std::string& name) {
  std::istringstream in(ReadAll("/proc/self/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + ":", 0) == 0) {
      size_t v = line.find_first_not_of(" \t", name.size() + 1);
      return v == std::string::npos ? "" : line.substr(v);
    }
  }
  return "";
}

std::string OwnCgroup() {
  std::istringstream in(ReadAll("/proc/self/cgroup"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

void WriteText(Json& j, const std::string& path, const std::string& text, bool create) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0), 0644);
  if (fd < 0) return j.Err(errno, "open").Emit();
  ssize_t n = write(fd, text.data(), text.size());
  int e = errno;
  close(fd);
  if (n < 0) return j.Err(e, "write").Emit();
  j.Ok().Emit();
}

}  // namespace

int ParseSignal(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos) return std::stoi(s);
  std::string name = s.rfind("SIG", 0) == 0 ? s.substr(3) : s;
  for (int sig = 1; sig < NSIG; ++sig) {
    const char* abbrev = sigabbrev_np(sig);
    if (abbrev && name == abbrev) return sig;
  }
  return -1;
}

void OpWriteFile(const Op& op) {
  Json j(op.name);
  j.Str("path", op.pos[0]);
  WriteText(j, op.pos[0], op.pos[1], op.Flag("create"));
}

void OpUnlink(const Op& op) {
  Json j(op.name);
  j.Str("path", op.pos[0]);
  if (unlink(op.pos[0].c_str()) != 0) return j.Err(errno, "unlink").Emit();
  j.Ok().Emit();
}

void OpMkdir(const Op& op) {
  Json j(op.name);
  j.Str("path", op.pos[0]);
  if (mkdir(op.pos[0].c_str(), 0755) != 0) return j.Err(errno, "mkdir").Emit();
  j.Ok().Emit();
}

void OpKill(const Op& op) {
  Json j(op.name);
  const int pid = std::stoi(op.pos[0]);
  const int sig = ParseSignal(op.pos[1]);
  j.Int("pid", pid).Int("signal", sig);
  if (kill(pid, sig) != 0) return j.Err(errno, "kill").Emit();
  j.Ok().Emit();
}

void OpJoinCgroup(const Op& op) {
  Json j(op.name);
  std::string path = op.pos[0];
  if (path.size() < 12 || path.compare(path.size() - 12, 12, "cgroup.procs") != 0)
    path += "/cgroup.procs";
  j.Str("path", path);
  WriteText(j, path, std::to_string(getpid()), false);
}

// A seccomp filter that fails clone3 with ENOSYS, as container runtimes'
// default profiles do (Docker's, for years), then go on: what follows (an
// `exec -- egressctl run ...`) runs without clone3, so `run` takes its
// fallback of joining the sandbox cgroup by cgroup.procs.
void OpRefuseClone3(const Op& op) {
  Json j(op.name);
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    j.Err(errno, "PR_SET_NO_NEW_PRIVS").Emit();
    return;
  }
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    j.Err(errno, "PR_SET_SECCOMP").Emit();
    return;
  }
  errno = 0;
  const long r = syscall(SYS_clone3, nullptr, 0);
  j.Str("clone3", r < 0 && errno == ENOSYS ? "ENOSYS" : "not refused");
  if (r < 0 && errno == ENOSYS) {
    j.Ok();
  } else {
    j.Err(errno, "clone3 still answers");
  }
  j.Emit();
}

void OpExec(const Op& op) {
  std::vector<char*> argv;
  for (const auto& a : op.exec_argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  fflush(stdout);
  execvp(argv[0], argv.data());
  Json j(op.name);
  j.Str("argv0", op.exec_argv[0]).Err(errno, "execvp").Emit();
}

// Prints a "sleeping" line first: the ready signal a test waits for before it
// acts on a process that is about to be idle (the step itself is the probe's
// own pause, not a test's synchronisation).
void OpSleep(const Op& op) {
  const int ms = std::stoi(op.pos[0]);
  Json(op.name).Int("ms", ms).Str("state", "sleeping").Emit();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  Json j(op.name);
  j.Int("ms", ms).Ok().Emit();
}

void OpInfo(const Op& op) {
  Json j(op.name);
  char ns[64] = {};
  ssize_t n = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
  j.Int("pid", getpid())
      .Int("uid", getuid())
      .Str("cap_eff", StatusField("CapEff"))
      .Str("cap_bnd", StatusField("CapBnd"))
      .Str("cgroup", OwnCgroup())
      .Str("netns", n > 0 ? std::string(ns, n) : "")
      .Ok()
      .Emit();
}

}  // namespace egressd::probe
