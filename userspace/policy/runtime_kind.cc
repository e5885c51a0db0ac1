#include "userspace/policy/runtime_kind.h"

namespace egressd::policy {

std::optional<RuntimeStack> RuntimeStackOf(std::string_view runtime) {
  if (runtime == "runc" || runtime == "crun") return RuntimeStack::kNodeSockets;
  if (runtime == "gvisor" || runtime == "runsc" || runtime == "kata" || runtime == "firecracker") {
    return RuntimeStack::kOwnStack;
  }
  return std::nullopt;
}

}  // namespace egressd::policy
