#include "userspace/common/node.h"

#include <fcntl.h>
#include <sched.h>
#include <mntent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <cstdlib>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "userspace/common/errors.h"
#include "userspace/common/unique_fd.h"

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif
#ifndef BPF_FS_MAGIC
#define BPF_FS_MAGIC 0xcafe4a11
#endif

namespace egressd {

Paths Paths::FromEnvironment() {
  Paths p;
  if (const char* v = std::getenv("EGRESSD_PIN_ROOT"); v && *v) p.pin_root = v;
  p.runtime_dir = DefaultRuntimeDir(p.pin_root);
  if (const char* v = std::getenv("EGRESSD_RUNTIME_DIR"); v && *v) p.runtime_dir = v;
  if (const char* v = std::getenv("EGRESSD_NODE_NETNS"); v && *v) p.node_netns = v;
  return p;
}

std::string Paths::DefaultRuntimeDir(const std::string& pin_root) {
  static const Paths kDefaults;
  if (pin_root == kDefaults.pin_root) return kDefaults.runtime_dir;
  std::string name;
  for (char ch : pin_root) {
    bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '-' || ch == '.';
    if (ch == '/' && name.empty()) continue;
    name += plain ? ch : '_';
  }
  return absl::StrCat(kDefaults.runtime_dir, "/instances/", name);
}

absl::StatusOr<std::string> FindMountOfType(const std::string& fstype) {
  FILE* f = setmntent("/proc/mounts", "re");
  if (f == nullptr) return ErrnoStatus(errno, "open /proc/mounts");
  std::optional<std::string> found;
  // getmntent_r: the buffer is ours, so this is safe beside other threads.
  char buf[4096];
  mntent ent {};
  while (getmntent_r(f, &ent, buf, sizeof(buf)) != nullptr) {
    if (fstype == ent.mnt_type) {
      found = ent.mnt_dir;
      break;
    }
  }
  endmntent(f);
  if (!found) return absl::NotFoundError(absl::StrCat("no ", fstype, " filesystem in /proc/mounts"));
  return *found;
}

absl::StatusOr<std::string> FindCgroup2Mount() {
  auto m = FindMountOfType("cgroup2");
  if (m.ok() || !absl::IsNotFound(m.status())) return m;
  return absl::FailedPreconditionError(
      "no cgroup2 filesystem in /proc/mounts: egressd needs cgroup v2 (mount -t cgroup2 none /sys/fs/cgroup)");
}

absl::Status MakeDirs(const std::string& path, unsigned mode) {
  std::string cur;
  for (const auto& part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    absl::StrAppend(&cur, "/", part);
    if (mkdir(cur.c_str(), mode) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, absl::StrCat("mkdir ", cur));
    }
  }
  return absl::OkStatus();
}

bool IsBpffs(const std::string& path) {
  struct statfs fs {};
  return statfs(path.c_str(), &fs) == 0 && static_cast<uint64_t>(fs.f_type) == BPF_FS_MAGIC;
}

absl::StatusOr<uint64_t> CgroupIdOf(const std::string& cgroup_dir) {
  struct stat st {};
  if (stat(cgroup_dir.c_str(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("stat cgroup ", cgroup_dir));
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("\"", cgroup_dir, "\" is not a cgroup directory"));
  }
  struct statfs fs {};
  if (statfs(cgroup_dir.c_str(), &fs) != 0) return ErrnoStatus(errno, absl::StrCat("statfs ", cgroup_dir));
  if (fs.f_type != 0x63677270 /* CGROUP2_SUPER_MAGIC */) {
    return absl::InvalidArgumentError(absl::StrCat("\"", cgroup_dir, "\" is not on a cgroup2 filesystem"));
  }
  return static_cast<uint64_t>(st.st_ino);
}

absl::StatusOr<uint64_t> NetnsCookieOf(const std::string& netns_path) {
  UniqueFd ns(open(netns_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns.valid()) return ErrnoStatus(errno, absl::StrCat("open netns ", netns_path));
  // setns() changes only the calling thread's namespace: do it on a thread
  // that exists for this one question.
  absl::StatusOr<uint64_t> result = absl::InternalError("netns thread did not run");
  std::thread t([&] {
    if (setns(ns.get(), CLONE_NEWNET) != 0) {
      result = ErrnoStatus(errno, absl::StrCat("setns ", netns_path));
      return;
    }
    UniqueFd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!s.valid()) {
      result = ErrnoStatus(errno, "socket for SO_NETNS_COOKIE");
      return;
    }
    uint64_t cookie = 0;
    socklen_t len = sizeof(cookie);
    if (getsockopt(s.get(), SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &len) != 0) {
      result = ErrnoStatus(errno, "getsockopt SO_NETNS_COOKIE (needs Linux 5.14+)");
      return;
    }
    result = cookie;
  });
  t.join();
  return result;
}

}  // namespace egressd
