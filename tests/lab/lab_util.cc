// Small helpers: files, sysctls in a netns, addresses, probe-output parsing
// (nlohmann-json),
// killing what lives in a netns or cgroup.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/inotify.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "nlohmann/json.hpp"
#include "lab_internal.h"

namespace egressd::lab {
namespace fs = std::filesystem;

static std::string_view Trim(std::string_view s) {
  while (!s.empty() && isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

const std::vector<std::string>& HostAddressesV4() {
  static const std::vector<std::string> v = {
      kPublicA4, kPublicB4, kPublicC4, kPublicD4,  kPublicE4,   kPublicF4,   kImds4,
      kEcsMeta4, kAlibabaMeta4, kDns4, kPrivate10, kPrivate172, kPrivate192};
  return v;
}

const std::vector<std::string>& HostAddressesV6() {
  static const std::vector<std::string> v = {kPublicA6,  kPublicB6,  kPublicC6,     kImds6,
                                             kEc2Dns6,   kNat64Imds, kNat64PublicA, kUla6};
  return v;
}

absl::Status ErrnoStatus(std::string_view what, int err) {
  return absl::InternalError(absl::StrCat(AV(what), ": ", strerror(err)));
}

std::string ReadFileOr(const std::string& path, std::string fallback) {
  std::ifstream f(path);
  if (!f) return fallback;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

absl::Status WriteFile(const std::string& path, std::string_view data) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(absl::StrCat("open ", path), errno);
  ssize_t n = write(fd, data.data(), data.size());
  int e = errno;
  close(fd);
  if (n != static_cast<ssize_t>(data.size()))
    return ErrnoStatus(absl::StrCat("write ", path), n < 0 ? e : EIO);
  return absl::OkStatus();
}

absl::Status InNetns(std::string_view netns_path, const std::function<absl::Status()>& fn) {
  absl::Status st;
  std::thread t([&] {
    if (!netns_path.empty()) {
      int fd = open(std::string(netns_path).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        st = ErrnoStatus(absl::StrCat("open ", AV(netns_path)), errno);
        return;
      }
      int rc = setns(fd, CLONE_NEWNET);
      int e = errno;
      close(fd);
      if (rc != 0) {
        st = ErrnoStatus(absl::StrCat("setns ", AV(netns_path)), e);
        return;
      }
    }
    st = fn();
  });
  t.join();
  return st;
}

absl::Status RunChecked(const std::vector<std::string>& argv, std::string_view stdin_data,
                        std::chrono::milliseconds timeout) {
  RunSpec spec;
  spec.argv = argv;
  spec.stdin_data = std::string(stdin_data);
  spec.timeout = timeout;
  RunResult r = Run(spec);
  if (r.exit_code != 0 || r.timed_out) {
    return absl::InternalError(absl::StrCat(absl::StrJoin(argv, " "), " failed: ", r.Describe(),
                                            stdin_data.empty() ? "" : "\n--- stdin:\n",
                                            AV(stdin_data)));
  }
  return absl::OkStatus();
}

static std::string SysctlPath(std::string_view key) {
  return absl::StrCat("/proc/sys/", absl::StrReplaceAll(AV(key), {{".", "/"}}));
}

absl::Status SetSysctl(std::string_view netns_path, std::string_view key,
                       std::string_view value) {
  std::string path = SysctlPath(key);
  return InNetns(netns_path, [&] { return WriteFile(path, value); });
}

absl::StatusOr<std::string> GetSysctl(std::string_view netns_path, std::string_view key) {
  std::string path = SysctlPath(key), value;
  absl::Status st = InNetns(netns_path, [&]() -> absl::Status {
    std::ifstream f(path);
    if (!f) return ErrnoStatus(absl::StrCat("open ", path), errno);
    std::getline(f, value);
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  return std::string(Trim(value));
}

bool CanonicalAddress(std::string_view text, std::array<uint8_t, 16>* out) {
  std::string s(Trim(text));
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  if (size_t pct = s.find('%'); pct != std::string::npos) s.resize(pct);
  in6_addr a6;
  in_addr a4;
  if (inet_pton(AF_INET6, s.c_str(), &a6) == 1) {
    std::memcpy(out->data(), &a6, 16);
    return true;
  }
  if (inet_pton(AF_INET, s.c_str(), &a4) == 1) {
    out->fill(0);
    (*out)[10] = (*out)[11] = 0xff;
    std::memcpy(out->data() + 12, &a4, 4);
    return true;
  }
  return false;
}

std::string AddressToString(const std::array<uint8_t, 16>& a) {
  static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  char buf[INET6_ADDRSTRLEN];
  if (std::memcmp(a.data(), kMapped, 12) == 0) {
    inet_ntop(AF_INET, a.data() + 12, buf, sizeof(buf));
  } else {
    inet_ntop(AF_INET6, a.data(), buf, sizeof(buf));
  }
  return buf;
}

bool RunningAsRootWithSysAdmin() {
  if (geteuid() != 0) return false;
  std::istringstream in(ReadFileOr("/proc/self/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "CapEff:")) {
      uint64_t caps = std::strtoull(line.c_str() + 7, nullptr, 16);
      return caps & (1ULL << 21);  // CAP_SYS_ADMIN
    }
  }
  return false;
}

// ---- probe output -------------------------------------------------------------------

absl::StatusOr<ProbeLine> ParseProbeLine(std::string_view line) {
  nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), /*cb=*/nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a probe line (", j.is_discarded() ? "not JSON" : "not an object",
                     "): ", AV(line)));
  }
  ProbeLine out;
  for (const auto& [key, value] : j.items()) {
    out[key] = value.is_string() ? value.get<std::string>() : value.dump();
  }
  return out;
}

std::vector<ProbeLine> ParseProbeLines(std::string_view out) {
  std::vector<ProbeLine> v;
  for (absl::string_view l : absl::StrSplit(absl::string_view(out.data(), out.size()), '\n')) {
    absl::string_view t = absl::StripAsciiWhitespace(l);
    if (t.empty() || t.front() != '{') continue;  // the probe's objects; anything else is noise
    auto p = ParseProbeLine(std::string_view(t.data(), t.size()));
    if (p.ok()) v.push_back(*std::move(p));
  }
  return v;
}

// ---- killing and removing -----------------------------------------------------------

int KillProcessesInNetns(const std::string& netns_path) {
  struct stat ns;
  if (stat(netns_path.c_str(), &ns) != 0) return 0;
  int killed = 0;
  DIR* d = opendir("/proc");
  if (!d) return 0;
  const pid_t self = getpid();
  while (dirent* e = readdir(d)) {
    int pid;
    if (!absl::SimpleAtoi(e->d_name, &pid) || pid <= 1 || pid == self) continue;
    struct stat st;
    std::string p = absl::StrCat("/proc/", pid, "/ns/net");
    if (stat(p.c_str(), &st) != 0) continue;
    if (st.st_dev == ns.st_dev && st.st_ino == ns.st_ino && kill(pid, SIGKILL) == 0) ++killed;
  }
  closedir(d);
  return killed;
}

namespace {
void PostOrderDirs(const fs::path& dir, std::vector<fs::path>* out) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory(ec) && !e.is_symlink(ec)) PostOrderDirs(e.path(), out);
  }
  out->push_back(dir);
}

bool Populated(const fs::path& dir) {
  std::string ev = ReadFileOr((dir / "cgroup.events").string(), "populated 0");
  return absl::StrContains(ev, "populated 1");
}

void KillMembers(const fs::path& dir) {
  std::istringstream in(ReadFileOr((dir / "cgroup.procs").string()));
  int pid;
  while (in >> pid) {
    if (pid > 1 && pid != getpid()) kill(pid, SIGKILL);
  }
}

std::string OwnCgroup2() {
  std::istringstream in(ReadFileOr("/proc/self/cgroup"));
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "0::")) return line.substr(3);
  }
  return "";
}
}  // namespace

absl::Status RemoveCgroupTree(const std::string& dir_s) {
  fs::path dir(dir_s);
  std::error_code ec;
  if (!fs::exists(dir, ec)) return absl::OkStatus();
  std::string root = Lab::cgroup2_root();
  std::string own = root + OwnCgroup2();
  if (own == dir_s || absl::StartsWith(own, dir_s + "/")) {
    return absl::FailedPreconditionError(
        absl::StrCat("refusing to kill cgroup ", dir_s, ": this process is inside it"));
  }
  if (fs::exists(dir / "cgroup.kill", ec)) (void)WriteFile((dir / "cgroup.kill").string(), "1");
  std::vector<fs::path> dirs;
  PostOrderDirs(dir, &dirs);
  absl::Status result;
  for (const auto& d : dirs) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    // cgroup.events is "modified" whenever "populated" changes: wait on that.
    int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (in >= 0) inotify_add_watch(in, (d / "cgroup.events").c_str(), IN_MODIFY);
    for (;;) {
      if (Populated(d)) {
        KillMembers(d);  // no cgroup.kill, or a racing fork
      } else if (rmdir(d.c_str()) == 0 || errno == ENOENT) {
        break;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        result = ErrnoStatus(absl::StrCat("rmdir ", d.string()), errno ? errno : EBUSY);
        break;
      }
      // Woken by the next change; the timeout only re-kills a racing fork
      // (or polls where inotify is unavailable).
      pollfd pfd{in, POLLIN, 0};
      if (poll(&pfd, in >= 0 ? 1 : 0, static_cast<int>(std::min<int64_t>(left.count(), 100))) > 0) {
        char buf[4096];
        while (read(in, buf, sizeof(buf)) > 0) {
        }
      }
    }
    if (in >= 0) close(in);
  }
  return result;
}

}  // namespace egressd::lab
