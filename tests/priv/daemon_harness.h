// What the daemon tests share: an egressd on the shared instance in the lab's
// node netns, waited for until it says ready, and calls to its API socket.
// Each test keeps its own config, upstream and registrations; only the
// process and the calls are here, so that a change to how the daemon starts
// or answers is made once.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "lab.h"
#include "userspace/daemon/client.h"

namespace egressd::test {

// The shared instance's API socket: <runtime dir>/egressd.sock.
std::string DaemonSocket();

// egressd --config CONFIG --socket DaemonSocket() EXTRA... in the lab's node
// netns with the instance's environment, returned once it printed its
// "ready:" line (within `ready_within` x EGR_TIME_SCALE); otherwise an error
// with what it printed on stderr, and the process is stopped.
absl::StatusOr<lab::Background> StartDaemonProcess(
    const std::string& config, const std::vector<std::string>& extra = {},
    std::chrono::milliseconds ready_within = std::chrono::seconds(30));

// METHOD TARGET with `body` (none when null) on DaemonSocket().  A call that
// gets no HTTP answer is a test failure, returned as an empty response.
daemon::ClientResponse CallDaemon(const std::string& method, const std::string& target,
                                  const nlohmann::json& body = {});

// DELETE /v1/sandboxes/ID on `socket_path`, for a teardown: the test may
// have deleted it already or stopped the daemon, so no outcome is checked;
// the teardown's `egressctl sandbox remove` is what guarantees the cleanup.
void DeleteSandboxBestEffort(const std::string& socket_path, const std::string& id);

// A command's stdout as a JSON object; anything else is a test failure,
// returned as {}.
nlohmann::json JsonObjectOut(const lab::RunResult& r);

}  // namespace egressd::test
