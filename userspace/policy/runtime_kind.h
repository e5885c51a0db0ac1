// Which runtimes send a sandbox's traffic from the node's sockets and which
// from their own network stack (issue 17): pure knowledge, shared by the
// deployment config's runtimeClasses and the registration's runtime hint
// (control/sandbox_runtime.h).  Under gVisor (its netstack writes frames on
// the pod's interface from a packet socket) or a VM runtime (Kata,
// Firecracker: a guest kernel sends) no cgroup hook sees the workload's
// connections; only the tc program on the pod's veth does.
#pragma once

#include <optional>
#include <string_view>

namespace egressd::policy {

enum class RuntimeStack {
  kNodeSockets,  // runc, crun: the workload's sockets are the node kernel's
  kOwnStack,     // gvisor (runsc), kata, firecracker
};

// nullopt for a name not above.
std::optional<RuntimeStack> RuntimeStackOf(std::string_view runtime);

// For messages: every name RuntimeStackOf knows, with its stack.
inline constexpr char kKnownRuntimes[] =
    "runc, crun (the node's sockets), gvisor (or runsc), kata, firecracker (their own stack)";

}  // namespace egressd::policy
