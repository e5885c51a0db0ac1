// The PUT /v1/sandboxes/{id} body egressctl's policy and sandbox flags
// describe: one translation for `sandbox apply` and for `run` beside a
// daemon, so both ask the daemon for the same thing.
#pragma once

#include <string>
#include <vector>

#include "tools/egressctl/commands.h"
#include "userspace/daemon/sandbox_request.h"

namespace egressd::cli {

// The request for `cgroup`; every flag problem is appended to `bad`, each
// naming its flag (the request is then not to be sent).
daemon::SandboxRequest RequestFromFlags(const PolicyFlags& flags, const SandboxFlags& sandbox,
                                        const std::string& cgroup, std::vector<std::string>& bad);

}  // namespace egressd::cli
