#include "userspace/common/cgroup_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "userspace/common/errors.h"
#include "userspace/common/node.h"
#include "userspace/common/unique_fd.h"

namespace egressd {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> Children(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (e->d_type == DT_DIR && n != "." && n != "..") out.push_back(dir + "/" + n);
    }
    closedir(d);
  }
  return out;
}

// cgroup.kill (Linux 5.14+) kills the whole subtree atomically, forks
// included.  Returns false when the kernel lacks it.
bool KillViaCgroupKill(const std::string& dir) {
  std::ofstream kill_file(dir + "/cgroup.kill");
  if (!kill_file) return false;
  kill_file << "1";
  kill_file.flush();
  return static_cast<bool>(kill_file);
}

void KillEachPid(const std::string& dir) {
  std::ifstream procs(dir + "/cgroup.procs");
  for (pid_t pid; procs >> pid;) kill(pid, SIGKILL);
  for (const auto& c : Children(dir)) KillEachPid(c);
}

// "populated 0|1" from cgroup.events (covers the whole subtree).
absl::StatusOr<bool> Populated(int events_fd, const std::string& path) {
  char buf[256];
  ssize_t n = pread(events_fd, buf, sizeof(buf) - 1, 0);
  if (n < 0) return ErrnoStatus(errno, absl::StrCat("read ", path));
  buf[n] = '\0';
  const char* p = std::strstr(buf, "populated ");
  if (p == nullptr) return absl::InternalError(absl::StrCat(path, " has no \"populated\" line"));
  return p[10] == '1';
}

absl::Status RemoveTree(const std::string& dir) {
  for (const auto& c : Children(dir)) EGR_RETURN_IF_ERROR(RemoveTree(c));
  if (rmdir(dir.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("rmdir ", dir));
  return absl::OkStatus();
}

}  // namespace

absl::Status KillAndRemoveCgroup(const std::string& dir, std::chrono::milliseconds deadline) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return absl::OkStatus();
  const std::string events = dir + "/cgroup.events";
  UniqueFd fd(open(events.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("open ", events));
  const bool atomic_kill = KillViaCgroupKill(dir);
  if (!atomic_kill) KillEachPid(dir);
  const auto until = Clock::now() + deadline;
  for (;;) {
    // Read before waiting: the kernel signals changes after the last read.
    EGR_ASSIGN_OR_RETURN(bool populated, Populated(fd.get(), events));
    if (!populated) break;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("processes in ", dir, " survived SIGKILL for ", deadline.count(), " ms"));
    }
    // Per-pid kills race with fork (a child born before its parent died
    // does not change "populated"), so without cgroup.kill wake up to kill
    // again; with it one kill is final and only the kernel's event matters.
    int wait_ms = atomic_kill ? static_cast<int>(left.count()) : std::min<int>(left.count(), 50);
    pollfd pfd{fd.get(), POLLPRI, 0};
    if (poll(&pfd, 1, wait_ms) < 0 && errno != EINTR) return ErrnoStatus(errno, absl::StrCat("poll ", events));
    if (!atomic_kill) KillEachPid(dir);
  }
  return RemoveTree(dir);
}

absl::StatusOr<bool> CgroupExists(uint64_t cgroup_id) {
  auto fd = OpenCgroupById(cgroup_id);
  if (fd.ok()) return true;
  if (absl::IsNotFound(fd.status())) return false;
  return fd.status();
}

absl::StatusOr<UniqueFd> OpenCgroupById(uint64_t cgroup_id) {
  EGR_ASSIGN_OR_RETURN(std::string root, FindCgroup2Mount());
  UniqueFd mount_fd(open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!mount_fd.valid()) return ErrnoStatus(errno, absl::StrCat("open ", root));
  // The handle type of this filesystem, learnt from the root; a cgroup2
  // handle is its 64-bit cgroup id.
  struct {
    file_handle fh;
    unsigned char bytes[MAX_HANDLE_SZ];
  } h{};
  h.fh.handle_bytes = MAX_HANDLE_SZ;
  int mount_id = 0;
  if (name_to_handle_at(mount_fd.get(), "", &h.fh, &mount_id, AT_EMPTY_PATH) != 0) {
    return ErrnoStatus(errno, absl::StrCat("name_to_handle_at ", root));
  }
  if (h.fh.handle_bytes != sizeof(cgroup_id)) {
    return absl::InternalError(absl::StrCat("cgroup2 file handles are ", h.fh.handle_bytes, " bytes, not 8"));
  }
  std::memcpy(h.fh.f_handle, &cgroup_id, sizeof(cgroup_id));
  UniqueFd cg(open_by_handle_at(mount_fd.get(), &h.fh, O_RDONLY | O_CLOEXEC));
  if (cg.valid()) return cg;
  if (errno == ESTALE || errno == ENOENT) return absl::NotFoundError(absl::StrCat("cgroup ", cgroup_id, " no longer exists"));
  return ErrnoStatus(errno, absl::StrCat("open_by_handle_at cgroup ", cgroup_id));
}

absl::StatusOr<int> CgroupLevel(const std::string& cgroup2_mount, const std::string& dir) {
  char real_dir[PATH_MAX], real_mount[PATH_MAX];
  if (realpath(dir.c_str(), real_dir) == nullptr) return ErrnoStatus(errno, absl::StrCat("resolve cgroup ", dir));
  if (realpath(cgroup2_mount.c_str(), real_mount) == nullptr) {
    return ErrnoStatus(errno, absl::StrCat("resolve the cgroup2 mount ", cgroup2_mount));
  }
  std::string mount = real_mount, path = real_dir;
  if (mount == "/") mount.clear();
  if (path.compare(0, mount.size(), mount) != 0 || (path.size() > mount.size() && path[mount.size()] != '/')) {
    return absl::InvalidArgumentError(absl::StrCat("\"", dir, "\" is not below the cgroup2 mount ", cgroup2_mount));
  }
  int level = 0;
  for (const auto& part : absl::StrSplit(path.substr(mount.size()), '/', absl::SkipEmpty())) {
    (void)part;
    ++level;
  }
  return level;
}

}  // namespace egressd
