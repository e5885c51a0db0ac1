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

// How far a write goes to survive a crash.  kDurable: the file and its
// directory fsynced (state that must outlive a power cut: records, held PUTs,
// declarations).  kWhole: renamed into place whole, never fsynced, for files a
// reader must never see half of but whose loss costs nothing (a cache checked
// against its source, a metrics textfile rewritten each interval): an fsync
// there is milliseconds on a path that runs often.
enum class FileSync { kDurable, kWhole };

// `path`'s directory must exist.  The temporary (`path`.tmp.PID, O_NOFOLLOW)
// is removed on any failure; errors name the step and the file.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view text, mode_t mode = 0600,
                                 FileSync sync = FileSync::kDurable);

}  // namespace egressd
