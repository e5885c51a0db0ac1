#include "userspace/sandbox/node_view.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"
#include "userspace/common/unique_fd.h"

namespace egressd::sandbox {
namespace {

constexpr unsigned long kNoExecFlags = MS_NOSUID | MS_NODEV | MS_NOEXEC;

bool IsDir(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

// `a` is `b` or lies below it.
bool Within(const std::string& a, const std::string& b) {
  if (b == "/") return true;
  return a == b || absl::StartsWith(a, b + "/");
}

std::string Canonical(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) ? std::string(buf) : p;
}

absl::Status SetAttr(int dfd, const char* path, unsigned int flags, uint64_t set, const std::string& what) {
  mount_attr attr{};
  attr.attr_set = set;
  if (mount_setattr(dfd, path, flags, &attr, sizeof(attr)) != 0) {
    if (errno == ENOSYS) return absl::FailedPreconditionError("this kernel has no mount_setattr (Linux 5.12+)");
    return ErrnoStatus(errno, what);
  }
  return absl::OkStatus();
}

// A detached copy of the mount at `path` (that directory or file only, not
// the mounts below it), taken before the node's mounts become read-only so
// the copy keeps its own flags.
absl::StatusOr<UniqueFd> CloneMount(const std::string& path) {
  UniqueFd fd(open_tree(AT_FDCWD, path.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, "open_tree " + path);
  return fd;
}

absl::Status MkdirAll(const std::string& dir) {
  if (IsDir(dir)) return absl::OkStatus();
  size_t slash = dir.rfind('/');
  if (slash != std::string::npos && slash > 0) EGR_RETURN_IF_ERROR(MkdirAll(dir.substr(0, slash)));
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus(errno, "mkdir " + dir);
  return absl::OkStatus();
}

// Attaches a clone at `target`, making the mount point first where it is
// missing (under one of the private tmpfs, which hid the node's).
absl::Status Attach(const UniqueFd& clone, const std::string& target, bool is_dir) {
  if (is_dir) {
    EGR_RETURN_IF_ERROR(MkdirAll(target));
  } else if (!Exists(target)) {
    EGR_RETURN_IF_ERROR(MkdirAll(target.substr(0, target.rfind('/'))));
    UniqueFd f(open(target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    if (!f.valid()) return ErrnoStatus(errno, "create mount point " + target);
  }
  if (move_mount(clone.get(), "", AT_FDCWD, target.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    return ErrnoStatus(errno, "move_mount onto " + target);
  }
  return absl::OkStatus();
}

absl::Status MountTmpfs(const std::string& dir, const std::string& options, unsigned long flags) {
  if (!IsDir(dir)) return absl::OkStatus();
  if (mount("tmpfs", dir.c_str(), "tmpfs", flags, options.c_str()) != 0) {
    return ErrnoStatus(errno, "mount tmpfs on " + dir);
  }
  return absl::OkStatus();
}

absl::Status MountCgroupSubtree(const std::string& cg2) {
  // On hybrid hosts the v1 hierarchies sit beside cgroup2 under
  // /sys/fs/cgroup: cover them all, then show only our cgroup2 subtree.
  if (absl::StartsWith(cg2, "/sys/fs/cgroup/")) {
    EGR_RETURN_IF_ERROR(MountTmpfs("/sys/fs/cgroup", "mode=0755,size=64k", kNoExecFlags));
    if (mkdir(cg2.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus(errno, "mkdir " + cg2);
  }
  // In the new cgroup namespace a fresh cgroup2 mount is rooted at the sandbox.
  // Where cgroup2 is mounted at cg2 itself (unified hosts, Kubernetes nodes)
  // the kernel refuses a second cgroup2 mount on top of it (EBUSY): detach
  // the node's one first (this mount namespace is private).
  if (umount2(cg2.c_str(), MNT_DETACH) != 0 && errno != EINVAL) {
    return ErrnoStatus(errno, "detach the node's cgroup2 mount at " + cg2);
  }
  if (mount("cgroup2", cg2.c_str(), "cgroup2", kNoExecFlags, nullptr) != 0) {
    return ErrnoStatus(errno, "mount cgroup2 on " + cg2);
  }
  return absl::OkStatus();
}

// The kernel's writable knobs under /proc (Docker's list): sysctls, SysRq,
// IRQ affinity, bus and filesystem settings.
absl::Status ReadOnlyProcKnobs() {
  for (const char* p : {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"}) {
    if (!Exists(p)) continue;
    if (mount(p, p, nullptr, MS_BIND | MS_REC, nullptr) != 0) return ErrnoStatus(errno, absl::StrCat("bind ", p));
    if (mount(nullptr, p, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | kNoExecFlags, nullptr) != 0) {
      return ErrnoStatus(errno, absl::StrCat("make ", p, " read-only"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> CheckWritableDir(const std::string& given, const std::vector<std::string>& hidden) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("\"", given, "\": ", why));
  };
  if (given.empty() || given[0] != '/') return bad("not an absolute path");
  char buf[PATH_MAX];
  if (!realpath(given.c_str(), buf)) return bad(std::strerror(errno));
  std::string dir = buf;
  if (!IsDir(dir)) return bad("not a directory");
  if (dir == "/") return bad("that is the whole node");
  for (const char* kernel : {"/proc", "/sys", "/dev"}) {
    if (Within(dir, kernel)) return bad(absl::StrCat("the sandbox may not write ", kernel));
  }
  for (const auto& h : hidden) {
    std::string c = Canonical(h);
    if (Within(dir, c) || Within(c, dir)) return bad(absl::StrCat("would show ", c, ", which sandboxes must not see"));
  }
  return dir;
}

absl::Status SetUpNodeView(const NodeView& view) {
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return ErrnoStatus(errno, "make mounts private");
  std::vector<UniqueFd> writable;
  for (const auto& dir : view.writable) {
    EGR_ASSIGN_OR_RETURN(UniqueFd fd, CloneMount(dir));
    EGR_RETURN_IF_ERROR(SetAttr(fd.get(), "", AT_EMPTY_PATH, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, "nosuid " + dir));
    writable.push_back(std::move(fd));
  }
  std::vector<UniqueFd> readable;
  for (const auto& dir : view.readable) {
    EGR_ASSIGN_OR_RETURN(UniqueFd fd, CloneMount(dir));
    EGR_RETURN_IF_ERROR(SetAttr(fd.get(), "", AT_EMPTY_PATH, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                                "read-only " + dir));
    readable.push_back(std::move(fd));
  }
  // Where /etc/resolv.conf lives under /run or /tmp (systemd-resolved's stub
  // file), the private tmpfs would hide it: it comes along, read-only.
  const std::string resolv = Canonical("/etc/resolv.conf");
  UniqueFd resolv_clone;
  if (resolv != "/etc/resolv.conf" && (Within(resolv, "/run") || Within(resolv, "/tmp")) && Exists(resolv)) {
    EGR_ASSIGN_OR_RETURN(resolv_clone, CloneMount(resolv));
    EGR_RETURN_IF_ERROR(SetAttr(resolv_clone.get(), "", AT_EMPTY_PATH,
                                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                                "read-only " + resolv));
  }

  EGR_RETURN_IF_ERROR(SetAttr(AT_FDCWD, "/", AT_RECURSIVE, MOUNT_ATTR_RDONLY, "make the node read-only"));

  // Private, writable scratch: nothing written there reaches the node, and
  // the node's sockets under /run (containerd, docker, D-Bus, nscd,
  // systemd-resolved) are not there to connect to.
  EGR_RETURN_IF_ERROR(MountTmpfs("/tmp", "mode=1777", MS_NOSUID | MS_NODEV));
  EGR_RETURN_IF_ERROR(MountTmpfs("/dev/shm", "mode=1777", MS_NOSUID | MS_NODEV));
  EGR_RETURN_IF_ERROR(MountTmpfs(
      "/run", absl::StrCat("mode=0755,uid=", view.run_owner, ",gid=", view.run_group), MS_NOSUID | MS_NODEV));
  if (resolv_clone.valid()) EGR_RETURN_IF_ERROR(Attach(resolv_clone, resolv, /*is_dir=*/false));

  EGR_RETURN_IF_ERROR(MountCgroupSubtree(view.cgroup2_mount));
  for (const auto& d : view.hide_dirs) {
    // Absent, or already under an earlier tmpfs (/run holds the runtime dir).
    EGR_RETURN_IF_ERROR(MountTmpfs(d, "mode=0755,size=16k", MS_RDONLY | kNoExecFlags));
  }
  if (mount("proc", "/proc", "proc", kNoExecFlags, nullptr) != 0) return ErrnoStatus(errno, "mount /proc");
  EGR_RETURN_IF_ERROR(ReadOnlyProcKnobs());

  for (size_t i = 0; i < readable.size(); ++i) {
    EGR_RETURN_IF_ERROR(Attach(readable[i], view.readable[i], /*is_dir=*/true));
  }
  for (size_t i = 0; i < writable.size(); ++i) {
    EGR_RETURN_IF_ERROR(Attach(writable[i], view.writable[i], /*is_dir=*/true));
  }
  return absl::OkStatus();
}

}  // namespace egressd::sandbox
