// Start-up probe: what egressd needs from the kernel, checked before loading,
// with a message that names whatever is missing.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "userspace/common/node.h"

namespace egressd {

struct ProbeItem {
  std::string what;
  bool ok;
  std::string detail;  // why not, or where
};

// Every check, in order; none of them changes the system (a missing bpffs is
// reported, and mounted only by `load`).
std::vector<ProbeItem> ProbeKernel(const Paths& paths);

// OK, or FailedPrecondition listing every missing item.
absl::Status RequireKernel(const Paths& paths);

}  // namespace egressd
