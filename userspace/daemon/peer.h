// Who is calling the control API: a caller whose process sits inside a
// sandbox cgroup (or below one) is refused whatever its uid, since a
// sandbox's root must never reconfigure its own containment.
//
// At accept: the peer's pidfd (SO_PEERPIDFD where the kernel has it, 6.5+:
// the process that connected, race-free; else pidfd_open of SO_PEERCRED's
// pid), then its cgroup from /proc/<pid>/cgroup, then the pidfd is asked
// whether that process still lives (pidfd_send_signal 0).  A peer that is
// gone by then is refused: the pid may already name another process, whose
// cgroup was what we read.  Residual risk before 6.5 (no SO_PEERPIDFD): a
// client that exits and whose pid is reused before pidfd_open runs (a
// window of microseconds after connect) is judged as the new process.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace egressd::daemon {

struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
  std::string cgroup;  // "/a/b" as /proc/<pid>/cgroup says (cgroup2 path)
  bool pidfd_from_socket = false;  // SO_PEERPIDFD, not pidfd_open
};

// Whether a cgroup2 path (relative to the mount, "/a/b") is a sandbox or
// below one.
using IsSandboxed = std::function<bool(const std::string& cgroup_path)>;

// PermissionDenied naming the pid and cgroup when the peer sits in a
// sandbox, or when it cannot be verified (gone, unreadable); OK with the
// peer otherwise.
absl::StatusOr<Peer> CheckPeer(int socket_fd, const IsSandboxed& sandboxed);

// The "0::" line of a /proc/<pid>/cgroup text ("" when absent).
std::string Cgroup2PathOf(const std::string& proc_cgroup_text);

}  // namespace egressd::daemon
