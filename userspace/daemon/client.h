// A blocking client of the control API (egressctl sandbox apply|get|list|
// delete, tests): one request on a fresh connection to the unix socket.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "userspace/common/node.h"

namespace egressd::daemon {

// <runtime_dir>/egressd.sock (/run/egressd/egressd.sock for the default
// instance), unless EGRESSD_SOCKET names another.
std::string DefaultSocketPath(const Paths& paths);

struct ClientResponse {
  int status = 0;
  nlohmann::json body;  // discarded when the answer was no JSON
};

// Unavailable when nothing listens at `socket_path` (no socket, or a stale
// one: no daemon runs); Internal when a daemon is there but the exchange
// fails (connect refused otherwise, the write, the read).
absl::StatusOr<ClientResponse> Call(const std::string& socket_path, const std::string& method,
                                    const std::string& target, const std::string& body = "");

}  // namespace egressd::daemon
