#include "userspace/control/sandbox_runtime.h"

#include "absl/strings/str_cat.h"
#include "userspace/policy/runtime_kind.h"

namespace egressd::control {

absl::StatusOr<std::optional<RuntimeHint>> ParseRuntimeHint(const std::string& text, const std::string& what) {
  if (text.empty()) return std::optional<RuntimeHint>();
  auto stack = policy::RuntimeStackOf(text);
  if (!stack) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", text, "\" is not a runtime egressd knows: ", policy::kKnownRuntimes));
  }
  return std::optional(RuntimeHint{text, *stack == policy::RuntimeStack::kOwnStack});
}

absl::Status CheckRuntimeRegistration(const std::optional<RuntimeHint>& hint, bool has_interface,
                                      const std::string& what, const std::string& interface_what) {
  if (!hint || !hint->own_stack || has_interface) return absl::OkStatus();
  const bool gvisor = hint->name == "gvisor" || hint->name == "runsc";
  return absl::InvalidArgumentError(absl::StrCat(
      what, " \"", hint->name, "\": ",
      gvisor ? "gVisor's network stack runs in user space and sends raw frames on the pod's interface"
             : "a guest kernel sends the sandbox's traffic from its VM",
      ", so no cgroup hook of the node ever sees its connections: a registration by cgroup only would not be "
      "enforced. Register it with ", interface_what, " (the node end of its pod's veth or its VM's tap)"));
}

}  // namespace egressd::control
