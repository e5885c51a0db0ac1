// Compiled policies in the kernel, stored under a policy id.  A policy's
// entries are written completely before its header, and sandboxes are only
// pointed at a policy whose header exists, so a sandbox is always judged by a
// whole policy.  Identical policies (same content hash) share one id.
//
// Not thread-safe and not multi-process safe on its own: callers hold the
// pin-dir lock (loader/pin_lock.h) around every mutation.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "maps/lpm_keys.h"
#include "maps/pinned_maps.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::maps {

struct StoredPolicy {
  PolicyId id;
  egr_policy_val header;
};

class PolicyStore {
 public:
  explicit PolicyStore(const PinnedMaps& maps) : maps_(maps) {}

  // Returns the id of an identical stored policy (taking a reference), or
  // writes a new one.  On error nothing new is visible to any sandbox.
  absl::StatusOr<PolicyId> Acquire(const policy::CompiledPolicy& p);
  // Drops a reference; the last one deletes the policy's entries.
  absl::Status Release(PolicyId id);
  absl::StatusOr<std::vector<StoredPolicy>> List() const;

 private:
  absl::StatusOr<PolicyId> FindByHash(uint64_t hash) const;
  absl::StatusOr<PolicyId> FreshId() const;
  absl::Status WriteEntries(PolicyId id, const policy::CompiledPolicy& p);
  absl::Status DeleteEntries(PolicyId id);

  const PinnedMaps& maps_;
};

}  // namespace egressd::maps
