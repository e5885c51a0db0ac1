// The functional self-test run after every load: a connect from a probe
// cgroup under a deny-all policy must really be refused.  Proves the programs
// are attached where sandboxes live and the maps they read are the ones the
// control plane writes.
#pragma once

#include "absl/status/status.h"
#include "userspace/common/node.h"

namespace egressd {

// Caller holds the pin lock.  Leaves nothing behind (cgroup, policy, entry).
absl::Status RunSelfTest(const Paths& paths);

}  // namespace egressd
