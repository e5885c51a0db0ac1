// egressctl run beside a running daemon: the transient sandbox is
// registered through the daemon's API (PUT /v1/sandboxes/{id}) instead of
// directly, so the daemon serves its DNS (run starts no proxy of its own)
// and, holding its record like any other, serves it again after a restart;
// DELETE when the command exits.  Without a daemon, run is unchanged.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "tools/egressctl/commands.h"
#include "userspace/common/node.h"
#include "userspace/daemon/sandbox_request.h"

namespace egressd::cli {

// The daemon's socket when one answers there (GET /healthz) and run's
// flags leave the deployment to it: --floor, --config and --upstream-dns are
// run's own deployment, so with them run keeps its own proxy (said at info).
std::optional<std::string> RunDaemonSocket(const Paths& paths, const PolicyFlags& flags, const RunFlags& run);

// The PUT body for run's cgroup: the policy flags as `sandbox apply` sends
// them; InvalidArgument naming every bad flag.
absl::StatusOr<daemon::SandboxRequest> RunRequest(const PolicyFlags& flags, const SandboxFlags& sandbox,
                                                  const std::string& cgroup);

// PUT, OK once the daemon says enforced (the kernel and the DNS endpoint
// serve it).  The daemon's reasons in the error: InvalidArgument for 400,
// FailedPrecondition when the node cannot contain (409), else Unavailable.
absl::Status RegisterWithDaemon(const std::string& socket, const std::string& id, const daemon::SandboxRequest& r);

// DELETE; NotFound when the daemon holds no such sandbox, Unavailable when
// no daemon answers (the caller then unregisters directly).
absl::Status DeleteFromDaemon(const std::string& socket, const std::string& id);

}  // namespace egressd::cli
