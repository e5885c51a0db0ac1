// Facts about the node that every layer needs, found rather than assumed:
// the instance's paths, where cgroup2 and bpffs are mounted, a cgroup's id, a
// netns cookie.  No libbpf here: this is the bottom layer (userspace/common).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace egressd {

struct Paths {
  std::string bpffs = "/sys/fs/bpf";
  std::string pin_root = "/sys/fs/bpf/egressd";  // maps + links/ of one instance
  // The instance's runtime state (its lock, its sandbox records, later the
  // daemon's socket): /run/egressd for the default pin root, a directory of
  // its own below /run/egressd/instances for any other.
  std::string runtime_dir = "/run/egressd";
  // Whose loopback the policy governs: the node's, which is configuration
  // (EGRESSD_NODE_NETNS, --node-netns), by default the init process's.  Never
  // the loader's own: a loader started in a pod would make the node's
  // loopback a pod's.  The first load pins it; a load naming another
  // namespace is refused.
  std::string node_netns = "/proc/1/ns/net";

  // Defaults, overridden by EGRESSD_PIN_ROOT / EGRESSD_RUNTIME_DIR /
  // EGRESSD_NODE_NETNS (tests run isolated instances side by side with
  // unique pin roots; each gets its own runtime directory).
  static Paths FromEnvironment();
  // Where an instance pinned at `pin_root` keeps its runtime state unless
  // told otherwise.
  static std::string DefaultRuntimeDir(const std::string& pin_root);
};

// The cgroup2 mount point, from /proc/mounts (hybrid hosts mount it at
// /sys/fs/cgroup/unified, unified ones at /sys/fs/cgroup).
absl::StatusOr<std::string> FindCgroup2Mount();

// Whether a bpffs is mounted at `path` (statfs; changes nothing).
bool IsBpffs(const std::string& path);

// The mount point of the first mount of `fstype` in /proc/mounts, read with
// getmntent(3) so escaped paths ("\040" for a space) come back decoded.
absl::StatusOr<std::string> FindMountOfType(const std::string& fstype);

// cgroup v2 ids are the inode numbers of the cgroup directories.
absl::StatusOr<uint64_t> CgroupIdOf(const std::string& cgroup_dir);

// The cookie of the network namespace behind a /proc/PID/ns/net or
// /var/run/netns/NAME path (SO_NETNS_COOKIE from a socket made inside it).
absl::StatusOr<uint64_t> NetnsCookieOf(const std::string& netns_path);

absl::Status MakeDirs(const std::string& path, unsigned mode);

}  // namespace egressd
