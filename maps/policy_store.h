// Compiled policies in the kernel, stored under a policy id.  A policy's
// entries are written completely before its header, and sandboxes are only
// pointed at a policy whose header exists, so a sandbox is always judged by a
// whole policy.
//
// The store never decides on its own that two policies are the same: the
// header's content hash (64-bit FNV over input a task author controls) only
// names candidates, and the caller shares one only after comparing contents
// (userspace/control compares the sandbox records).
//
// Not thread-safe and not multi-process safe on its own: callers hold the
// instance lock (userspace/common/instance_lock.h) around every mutation.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "maps/lpm_keys.h"
#include "maps/pinned_maps.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::maps {

struct StoredPolicy {
  PolicyId id;
  egr_policy_val header;
};

// How many LPM keys of each policy id the four tries hold.
struct KeyCounts {
  uint32_t allow4 = 0, allow6 = 0, prot4 = 0, prot6 = 0;
  uint32_t total() const { return allow4 + allow6 + prot4 + prot6; }
};

class PolicyStore {
 public:
  explicit PolicyStore(const PinnedMaps& maps) : maps_(maps) {}

  // Stored policies whose header hash is `content_hash` (p.ContentHash(),
  // computed once by the caller: it costs as much as writing a large policy):
  // candidates for sharing, never proof of equal contents.
  absl::StatusOr<std::vector<PolicyId>> CandidatesFor(uint64_t content_hash) const;
  // A random id no header uses.
  absl::StatusOr<PolicyId> FreshId() const;
  // Writes p's entries under id, then its header (refcount 1).  On error
  // nothing is left under id.
  absl::Status Install(PolicyId id, const policy::CompiledPolicy& p, uint64_t content_hash);
  // One more sandbox points at id.
  absl::Status AddRef(PolicyId id);
  // Drops a reference; the last one deletes the header, then the policy's own
  // keys, computed from p (the policy that was installed under id).
  absl::Status Release(PolicyId id, const policy::CompiledPolicy& p);
  // The same when the policy's contents are not known: walks every key of
  // every trie (slow with many policies; for repairs only).
  absl::Status Release(PolicyId id);

  // A fresh, never-shared policy (the loader's self-test): Install at a
  // FreshId.
  absl::StatusOr<PolicyId> Acquire(const policy::CompiledPolicy& p);

  absl::StatusOr<std::vector<StoredPolicy>> List() const;
  absl::Status SetRefcount(PolicyId id, uint32_t refcount);
  // Deletes the header whatever its refcount (a reconcile found no sandbox
  // pointing at it); its keys are left to CollectOrphanKeys.
  absl::Status DropHeader(PolicyId id);
  // Keys per policy id, over all four tries (one walk).
  absl::flat_hash_map<PolicyId, KeyCounts> CountKeys() const;
  // Deletes every key whose policy id has no header: left by a process killed
  // between deleting a header and its keys, or while writing a policy.
  // Returns how many keys went.
  absl::StatusOr<uint32_t> CollectOrphanKeys();

 private:
  absl::Status WriteEntries(PolicyId id, const policy::CompiledPolicy& p);
  absl::Status DeleteOwnEntries(PolicyId id, const policy::CompiledPolicy& p);
  absl::Status DeleteAllEntriesOf(PolicyId id);

  const PinnedMaps& maps_;
};

}  // namespace egressd::maps
