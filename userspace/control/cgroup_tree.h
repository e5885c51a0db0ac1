// Creating and tearing down sandbox cgroups.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace egressd::control {

// Kills every process in dir and below (cgroup.kill where the kernel has it,
// SIGKILL per pid otherwise), waits for them to go, then removes the
// directories depth-first.  Processes die before anything is unregistered, so
// nothing of the sandbox ever runs unenforced.
absl::Status KillAndRemoveCgroup(const std::string& dir);

}  // namespace egressd::control
