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

// A self-test killed mid-run (SIGKILL cannot be blocked) leaves its cgroup
// registered, which would block `unload`: removes every self-test cgroup of
// this instance and its map entry.  Caller holds the instance lock (so no
// self-test of this instance is running).  Returns how many it collected.
int CollectDeadSelfTests(const Paths& paths);

}  // namespace egressd
