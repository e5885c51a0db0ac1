// The control plane's one entry point for changing what the kernel enforces:
// register a sandbox with a compiled policy (or flip it to a new one),
// unregister it, mark a contained root.  Each call holds the pin-dir lock for
// its whole read-modify-write, so egressctl processes and the daemon can share
// one loaded instance.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/common/node.h"
#include "maps/policy_store.h"
#include "maps/sandbox_table.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::control {

class Registry {
 public:
  explicit Registry(Paths paths) : paths_(std::move(paths)) {}

  // Writes the policy aside, then points the sandbox at it in one map update
  // (wholly old or wholly new policy, never a mix), then drops the old one.
  absl::Status Register(uint64_t cgroup_id, const policy::CompiledPolicy& p);
  absl::Status Unregister(uint64_t cgroup_id);
  absl::Status Contain(uint64_t cgroup_id);
  absl::StatusOr<std::vector<maps::CgroupEntry>> List() const;

 private:
  template <typename Fn>
  absl::Status Locked(Fn fn);

  Paths paths_;
};

}  // namespace egressd::control
