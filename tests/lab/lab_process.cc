// Process runner: fork, join netns and cgroup in the child, exec.
#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lab.h"
#include "lab_internal.h"

extern char** environ;

namespace egressd::lab {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

bool IsExecutable(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}


// Everything the child needs, allocated before fork().
struct Prepared {
  std::string exe;
  std::vector<std::string> args, envs;
  std::vector<char*> argv, envp;
  std::string netns, cgroup_procs;
};

absl::Status Prepare(const RunSpec& spec, Prepared* p) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("RunSpec.argv is empty");
  if (spec.hostile) {
    p->args = {ResolveInPath("setpriv"), "--bounding-set", "-all,+net_raw", "--inh-caps", "-all",
               "--"};
    p->args.push_back(ResolveInPath(spec.argv[0]));
  } else {
    p->args.push_back(ResolveInPath(spec.argv[0]));
  }
  p->args.insert(p->args.end(), spec.argv.begin() + 1, spec.argv.end());
  p->exe = p->args[0];
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
  }
  for (const auto& [k, v] : spec.env) env[k] = v;
  for (const auto& [k, v] : env) p->envs.push_back(k + "=" + v);
  for (auto& s : p->args) p->argv.push_back(s.data());
  p->argv.push_back(nullptr);
  for (auto& s : p->envs) p->envp.push_back(s.data());
  p->envp.push_back(nullptr);
  p->netns = spec.netns;
  if (!spec.cgroup.empty()) p->cgroup_procs = spec.cgroup + "/cgroup.procs";
  return absl::OkStatus();
}

// Child side of Spawn(): only async-signal-safe calls until execve.
[[noreturn]] void ChildExec(const Prepared& p, pid_t parent, int in_fd, int out_fd, int err_fd,
                            int report_fd) {
  auto fail = [&](const char* stage) {
    int e = errno;
    char buf[96];
    size_t n = 0;
    for (const char* s = stage; *s && n < 60; ++s) buf[n++] = *s;
    buf[n++] = ':';
    char num[16];
    int k = 0;
    do { num[k++] = static_cast<char>('0' + e % 10); e /= 10; } while (e && k < 15);
    while (k) buf[n++] = num[--k];
    (void)!write(report_fd, buf, n);
    _exit(127);
  };
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  sigset_t all;
  sigemptyset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  signal(SIGPIPE, SIG_DFL);
  if (!p.netns.empty()) {
    int fd = open(p.netns.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("open netns");
    if (setns(fd, CLONE_NEWNET) != 0) fail("setns");
    close(fd);
  }
  if (!p.cgroup_procs.empty()) {
    int fd = open(p.cgroup_procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) fail("open cgroup.procs");
    if (write(fd, "0", 1) != 1) fail("join cgroup");  // "0" = the writing process
    close(fd);
  }
  if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) fail("dup2");
  syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
  execve(p.exe.c_str(), p.argv.data(), p.envp.data());
  fail("execve");
  _exit(127);
}

struct Spawned {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;  // parent ends
};

absl::StatusOr<Spawned> Spawn(const RunSpec& spec) {
  Prepared p;
  if (auto s = Prepare(spec, &p); !s.ok()) return s;
  int in[2], out[2], err[2], rep[2];
  if (pipe2(in, O_CLOEXEC) != 0) return ErrnoStatus("pipe2", errno);
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(rep, O_CLOEXEC) != 0)
    return ErrnoStatus("pipe2", errno);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return ErrnoStatus("fork", errno);
  if (pid == 0) ChildExec(p, parent, in[0], out[1], err[1], rep[1]);
  setpgid(pid, pid);  // also done by the child; whichever runs first
  close(in[0]);
  close(out[1]);
  close(err[1]);
  close(rep[1]);
  char buf[128];
  ssize_t n;
  do { n = read(rep[0], buf, sizeof(buf)); } while (n < 0 && errno == EINTR);
  close(rep[0]);
  if (n > 0) {  // the child failed before execve
    int st;
    waitpid(pid, &st, 0);
    close(in[1]);
    close(out[0]);
    close(err[0]);
    return absl::InternalError(
        absl::StrCat("starting ", spec.argv[0], ": ", absl::string_view(buf, n),
                     " (stage:errno)"));
  }
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  fcntl(in[1], F_SETFL, O_NONBLOCK);
  return Spawned{pid, in[1], out[0], err[0]};
}

int DecodeStatus(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return -WTERMSIG(st);
  return -1;
}

// Reads what is available; false at EOF or error.
bool Drain(int fd, std::string* into) {
  char buf[16384];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      into->append(buf, n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    return false;
  }
}

// Blocks SIGPIPE in this thread while feeding a child's stdin (a child that
// exits early must not kill the test), and drops one that became pending.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlock() {
    timespec zero{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_, old_;
};

}  // namespace

std::string ResolveInPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                      ':')) {
    std::string cand = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (IsExecutable(cand)) return cand;
  }
  return name;
}

std::string RunResult::Describe() const {
  auto cut = [](const std::string& s) { return s.size() > 3000 ? s.substr(0, 3000) + "..." : s; };
  return absl::StrCat("exit=", exit_code, timed_out ? " (timed out)" : "", "\n--- stdout:\n",
                      cut(out), "\n--- stderr:\n", cut(err));
}

double TimeScale() {
  const char* v = std::getenv("EGR_TIME_SCALE");
  const double scale = v ? std::atof(v) : 1.0;
  return scale >= 1.0 ? scale : 1.0;
}

RunResult Run(const RunSpec& spec) {
  SigpipeBlock no_sigpipe;
  RunResult r;
  auto sp = Spawn(spec);
  if (!sp.ok()) {
    r.exit_code = 127;
    r.err = std::string(sp.status().message());
    return r;
  }
  const auto ceiling = spec.timeout.count() > 0
                           ? spec.timeout
                           : std::chrono::milliseconds(static_cast<int64_t>(10000 * TimeScale()));
  const auto deadline = Clock::now() + ceiling;
  size_t in_off = 0;
  int in_fd = sp->in;
  if (spec.stdin_data.empty()) {
    close(in_fd);
    in_fd = -1;
  }
  bool out_open = true, err_open = true, reaped = false;
  Clock::time_point exited_at{};
  int status = 0;
  while (out_open || err_open || !reaped) {
    if (!reaped) {
      pid_t w = waitpid(sp->pid, &status, WNOHANG);
      if (w == sp->pid) {
        reaped = true;
        exited_at = Clock::now();
      }
    }
    // Output held open by a leftover grandchild: stop waiting shortly after exit.
    if (reaped && Clock::now() - exited_at > std::chrono::milliseconds(500)) break;
    if (!r.timed_out && Clock::now() >= deadline) {
      r.timed_out = true;
      kill(-sp->pid, SIGKILL);
      kill(sp->pid, SIGKILL);
    }
    pollfd fds[3];
    int nfds = 0;
    if (out_open) fds[nfds++] = {sp->out, POLLIN, 0};
    if (err_open) fds[nfds++] = {sp->err, POLLIN, 0};
    if (in_fd >= 0) fds[nfds++] = {in_fd, POLLOUT, 0};
    poll(fds, nfds, 10);
    if (out_open) out_open = Drain(sp->out, &r.out);
    if (err_open) err_open = Drain(sp->err, &r.err);
    if (in_fd >= 0) {
      ssize_t n = write(in_fd, spec.stdin_data.data() + in_off, spec.stdin_data.size() - in_off);
      if (n > 0) in_off += n;
      if ((n < 0 && errno != EAGAIN && errno != EINTR) || in_off == spec.stdin_data.size()) {
        close(in_fd);
        in_fd = -1;
      }
    }
  }
  if (in_fd >= 0) close(in_fd);
  close(sp->out);
  close(sp->err);
  if (!reaped) {
    kill(-sp->pid, SIGKILL);
    waitpid(sp->pid, &status, 0);
  }
  r.exit_code = DecodeStatus(status);
  return r;
}

// ---- Background ---------------------------------------------------------------------

struct Background::State {
  pid_t pid = -1;
  bool reaped = false;
  int status = 0;
  int out = -1, err = -1;
  int wake[2] = {-1, -1};
  std::thread reader;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::string out_buf, err_buf;
  size_t out_pos = 0;
  bool out_eof = false, err_eof = false;

  void ReaderLoop() {
    for (;;) {
      pollfd fds[3] = {{out, POLLIN, 0}, {err, POLLIN, 0}, {wake[0], POLLIN, 0}};
      {
        std::lock_guard<std::mutex> l(mu);
        if (out_eof) fds[0].fd = -1;
        if (err_eof) fds[1].fd = -1;
        if (out_eof && err_eof) break;
      }
      poll(fds, 3, -1);
      if (fds[2].revents) break;
      std::string o, e;
      bool o_open = fds[0].fd < 0 || Drain(out, &o);
      bool e_open = fds[1].fd < 0 || Drain(err, &e);
      std::lock_guard<std::mutex> l(mu);
      out_buf += o;
      err_buf += e;
      if (!o_open) out_eof = true;
      if (!e_open) err_eof = true;
      cv.notify_all();
    }
    std::lock_guard<std::mutex> l(mu);
    out_eof = err_eof = true;
    cv.notify_all();
  }

  bool TryReap(bool block) {
    if (reaped || pid <= 0) return reaped;
    pid_t w;
    do { w = waitpid(pid, &status, block ? 0 : WNOHANG); } while (w < 0 && errno == EINTR);
    if (w == pid || (w < 0 && errno == ECHILD)) reaped = true;
    return reaped;
  }

  void StopReader() {
    if (reader.joinable()) {
      // Give the pipes a moment to reach EOF so trailing output is kept.
      std::unique_lock<std::mutex> l(mu);
      cv.wait_for(l, std::chrono::milliseconds(500), [&] { return out_eof && err_eof; });
      l.unlock();
      (void)!write(wake[1], "x", 1);
      reader.join();
    }
    for (int* fd : {&out, &err, &wake[0], &wake[1]}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
  }

  ~State() {
    if (pid > 0 && !reaped) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      TryReap(true);
    }
    StopReader();
  }
};

Background::Background() = default;
Background::Background(Background&&) noexcept = default;
Background& Background::operator=(Background&&) noexcept = default;
Background::~Background() = default;

pid_t Background::pid() const { return st_ ? st_->pid : -1; }

bool Background::running() const { return st_ && !st_->TryReap(false); }

std::string Background::err() const {
  if (!st_) return "";
  std::lock_guard<std::mutex> l(st_->mu);
  return st_->err_buf;
}

std::optional<std::string> Background::ReadOutLine(std::chrono::milliseconds timeout) {
  if (!st_) return std::nullopt;
  std::unique_lock<std::mutex> l(st_->mu);
  size_t nl = std::string::npos;
  st_->cv.wait_for(l, timeout, [&] {
    nl = st_->out_buf.find('\n', st_->out_pos);
    return nl != std::string::npos || st_->out_eof;
  });
  if (nl == std::string::npos) return std::nullopt;
  std::string line = st_->out_buf.substr(st_->out_pos, nl - st_->out_pos);
  st_->out_pos = nl + 1;
  return line;
}

RunResult Background::Wait(std::chrono::milliseconds timeout) {
  RunResult r;
  if (!st_) return r;
  const auto deadline = Clock::now() + timeout;
  while (!st_->TryReap(false)) {
    if (Clock::now() >= deadline) {
      r.timed_out = true;
      kill(-st_->pid, SIGKILL);
      kill(st_->pid, SIGKILL);
      st_->TryReap(true);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  st_->StopReader();
  r.exit_code = DecodeStatus(st_->status);
  std::lock_guard<std::mutex> l(st_->mu);
  r.out = st_->out_buf.substr(st_->out_pos);
  st_->out_pos = st_->out_buf.size();
  r.err = st_->err_buf;
  return r;
}

void Background::Stop() {
  if (!st_ || st_->pid <= 0) return;
  if (!st_->reaped) {
    kill(-st_->pid, SIGKILL);
    kill(st_->pid, SIGKILL);
    st_->TryReap(true);
  }
  st_->StopReader();
}

absl::StatusOr<Background> Start(const RunSpec& spec) {
  auto sp = Spawn(spec);
  if (!sp.ok()) return sp.status();
  close(sp->in);
  Background b;
  b.st_ = std::make_unique<Background::State>();
  auto* st = b.st_.get();
  st->pid = sp->pid;
  st->out = sp->out;
  st->err = sp->err;
  if (pipe2(st->wake, O_CLOEXEC) != 0) return ErrnoStatus("pipe2", errno);
  st->reader = std::thread([st] { st->ReaderLoop(); });
  return b;
}

// ---- BinaryPath ---------------------------------------------------------------------

std::string BinaryPath(std::string_view name_sv) {
  std::string name(name_sv);
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  fs::path dir = ec ? fs::path() : exe.parent_path();
  if (!dir.empty() && IsExecutable(dir / name)) return (dir / name).string();
  if (const char* bin = getenv("EGR_BIN_DIR"); bin && *bin) {
    fs::path p = fs::path(bin) / name;
    if (IsExecutable(p)) return p.string();
  }
  int levels = 0;
  for (fs::path p = dir; !p.empty() && levels < 5; p = p.parent_path(), ++levels) {
    for (const fs::path& cand : {p / name, p / "tests" / "lab" / name, p / "tools" / name / name,
                                 p / "tools" / "egressctl" / name, p / "bench" / name}) {
      if (IsExecutable(cand)) return cand.string();
    }
    if (p == p.parent_path() || p == "/") break;
  }
  return name;
}

}  // namespace egressd::lab
