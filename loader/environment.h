// Facts about the node that the loader and the CLI need, found rather than
// assumed: where cgroup2 and bpffs are mounted, a cgroup's id, a netns cookie.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace egressd {

struct Paths {
  std::string bpffs = "/sys/fs/bpf";
  std::string pin_root = "/sys/fs/bpf/egressd";  // maps + links/ of one instance
  std::string runtime_dir = "/run/egressd";
  // Whose loopback the policy governs: the netns egressd is first loaded
  // from (the node's: the daemon runs with hostNetwork).  EGRESSD_NODE_NETNS
  // overrides it.
  std::string node_netns = "/proc/self/ns/net";

  // Defaults, overridden by EGRESSD_PIN_ROOT / EGRESSD_RUNTIME_DIR /
  // EGRESSD_NODE_NETNS (tests run
  // isolated instances side by side with unique pin roots).
  static Paths FromEnvironment();
};

// The cgroup2 mount point, from /proc/mounts (hybrid hosts mount it at
// /sys/fs/cgroup/unified, unified ones at /sys/fs/cgroup).
absl::StatusOr<std::string> FindCgroup2Mount();

// Mounts bpffs at `path` when nothing bpffs is mounted there.
absl::Status EnsureBpffs(const std::string& path);

// cgroup v2 ids are the inode numbers of the cgroup directories.
absl::StatusOr<uint64_t> CgroupIdOf(const std::string& cgroup_dir);

// The cookie of the network namespace behind a /proc/PID/ns/net or
// /var/run/netns/NAME path (SO_NETNS_COOKIE from a socket made inside it).
absl::StatusOr<uint64_t> NetnsCookieOf(const std::string& netns_path);

absl::Status MakeDirs(const std::string& path, unsigned mode);

}  // namespace egressd
