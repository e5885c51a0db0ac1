// Creating and tearing down sandbox cgroups.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "userspace/common/unique_fd.h"

namespace egressd {

// Kills every process in dir and below (cgroup.kill where the kernel has it,
// SIGKILL per pid otherwise), waits for `cgroup.events` to say "populated 0"
// (a wakeup from the kernel, not a poll loop), then removes the directories
// depth-first.  Processes die before anything is unregistered, so nothing of
// the sandbox ever runs unenforced.  DeadlineExceeded if they outlive
// `deadline`.
absl::Status KillAndRemoveCgroup(const std::string& dir,
                                 std::chrono::milliseconds deadline = std::chrono::milliseconds(5000));

// Whether the cgroup with this id still exists (open_by_handle_at on the
// cgroup2 mount: a removed cgroup's handle is stale).  Errors other than
// "stale" are returned, so a caller can stay on the safe side.
absl::StatusOr<bool> CgroupExists(uint64_t cgroup_id);
// The cgroup with this id, opened O_RDONLY by its handle (not by a path
// another cgroup could take); NotFound once it was removed.
absl::StatusOr<UniqueFd> OpenCgroupById(uint64_t cgroup_id);

// The cgroup's level in the cgroup2 tree mounted at cgroup2_mount (the root
// is level 0): how many directories below the mount its real path lies.
absl::StatusOr<int> CgroupLevel(const std::string& cgroup2_mount, const std::string& dir);

}  // namespace egressd
