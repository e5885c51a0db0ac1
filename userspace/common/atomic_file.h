// Writing a state file so that a crash leaves either the old or the new
// content, never a torn one: a temporary beside it, written and fsynced,
// renamed over it, and the directory fsynced so the rename itself survives.
// Records, held PUTs and kept declarations all rely on it.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace egressd {

// `path`'s directory must exist.  The temporary (`path`.tmp.PID, O_NOFOLLOW)
// is removed on any failure; errors name the step and the file.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view text, mode_t mode = 0600);

}  // namespace egressd
