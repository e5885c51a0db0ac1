// The runtime hint of a registration (issue 17): which runtime runs the
// sandbox, so that a registration which cannot hold for it is refused with
// the reason instead of looking enforced.  Under gVisor (its netstack writes
// frames on the pod's interface from a packet socket) or a VM runtime (Kata,
// Firecracker: a guest kernel sends), the workload's sockets never reach the
// node's cgroup hooks: such a sandbox must be registered with its interface
// (the tc program on its veth), alone or beside its cgroup.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace egressd::control {

struct RuntimeHint {
  std::string name;         // as given: runc, crun, gvisor, runsc, kata, firecracker
  bool own_stack = false;   // sends from its own network stack, not the node's sockets
};

// "" is no hint; any other name not above is InvalidArgument naming `what`
// (the flag or field) and the value.
absl::StatusOr<std::optional<RuntimeHint>> ParseRuntimeHint(const std::string& text, const std::string& what);

// A runtime that sends from its own stack registered without an interface:
// InvalidArgument saying why, naming `what` and the runtime.
absl::Status CheckRuntimeRegistration(const std::optional<RuntimeHint>& hint, bool has_interface,
                                      const std::string& what, const std::string& interface_what);

}  // namespace egressd::control
