// Mounting bpffs: the one change to the node's mounts egressd makes, and only
// from `load` (the probe reports a missing bpffs without mounting it).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace egressd {

// Mounts bpffs at `path` (mode 0700) when no bpffs is mounted there.
absl::Status EnsureBpffs(const std::string& path);

}  // namespace egressd
