// GET /v1/audit from the command line and tests: the response's lines as
// they come (a blocking reader of the chunked body).
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"

namespace egressd::daemon {

// Calls `line` with each line (no newline) until the stream ends or `line`
// returns false.  Unavailable when nothing listens at `socket_path`;
// InvalidArgument with the daemon's reasons for a 4xx answer; Internal for
// another non-200 one.  `on_open` (may be empty) runs once the 200 header
// is read: the stream is open from then on.
absl::Status StreamAudit(const std::string& socket_path, const std::string& target,
                         const std::function<bool(const std::string& line)>& line,
                         const std::function<void()>& on_open = {});

}  // namespace egressd::daemon
