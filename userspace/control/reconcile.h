// Bringing the sandbox records and the maps back into agreement after a
// crash, at `egressctl load` (and a daemon's start), under the instance lock.
//
// The maps win for what is enforced: a reconcile never points a sandbox at
// another policy, never removes a live sandbox's entry and never writes a
// policy entry, so it cannot leave a sandbox with more allowed than it had.
// The records supply what the maps cannot hold (names, labels, paths).
//
// The cases, for each record R of cgroup C and the entry M of C in
// egr_cgroups_v1:
//   - M points at R's current policy: consistent.  If that policy's header
//     hash differs from R's policy, R's policy is not what is enforced: R
//     keeps the id but loses its policy (no names are known, so a DNS proxy
//     allows none) and says so in its note.
//   - no M, or M marks a contained root: the register or flip never landed,
//     or a remove did; R is deleted (C is judged as the maps say).
//   - M points at R's previous policy: a flip died before it landed; R goes
//     back to the previous policy.
//   - M points elsewhere: R takes M's id, with the policy of another
//     consistent record judged by that id if one exists, else none.
//   - C no longer exists (its cgroup was removed): no process can run in it,
//     so M and R go.  A sandbox registered by interface alone (C an
//     interface sandbox id, maps/if_sandbox_table.h) is dead when its
//     interface is: no ifindex of C's, or one of another name than R's (its
//     pod went with its veth); M, R and its egr_ifsbox_v1 entries go.
// egr_ifsbox_v1 follows egr_cgroups_v1: an interface that vanished loses its
// entries (and a record naming it its interface); an entry whose sandbox has
// no entry is detached and goes (a remove did, or a register never landed);
// one pointing at another policy than its sandbox's entry is pointed there.
// A record file that does not parse is moved aside (<id>.json.corrupt).
// DNS endpoints (egr_dns_v1, egr_dnsep_v1) follow the records: each sandbox
// gets the endpoint its record names, every other endpoint and guard goes.
// For each sandbox entry M without a record: kept (unregistering would open
// the cgroup), and given a record as above (path and labels unknown).
// Then every header's refcount becomes the number of entries pointing at it
// (a crash between a reference and a flip leaks one); a header nothing points
// at is deleted, and every key whose policy id has no header is collected (a
// crash between a header and its keys, or while writing a policy, leaves
// them).  Entries pointing at an id with no header stay: they fail closed.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/common/instance_lock.h"
#include "userspace/common/node.h"

namespace egressd::control {

struct ReconcileReport {
  uint32_t records_dropped = 0;    // register/flip never landed, or remove did
  uint32_t records_reverted = 0;   // flip died before it landed: back to previous
  uint32_t records_repaired = 0;   // pointed elsewhere / policy not what is enforced
  uint32_t records_created = 0;    // entry without a record
  uint32_t records_quarantined = 0;  // did not parse: moved to <id>.json.corrupt
  uint32_t dead_cgroups = 0;       // entry (and record) of a removed cgroup
  uint32_t refcounts_fixed = 0;
  uint32_t headers_collected = 0;  // no sandbox pointed at them
  uint32_t keys_collected = 0;     // their policy id had no header
  uint32_t dns_endpoints_fixed = 0;  // an endpoint not as the records say
  uint32_t dead_interfaces = 0;      // interface-only sandboxes whose interface vanished
  uint32_t interface_entries_fixed = 0;  // egr_ifsbox_v1 entries collected or re-pointed
  bool changed() const;
};

// Needs the instance lock held by the caller (load holds it throughout).
absl::StatusOr<ReconcileReport> Reconcile(const Paths& paths, const InstanceLock& lock);

// What a reconcile would find, read without changing anything (status).
struct Consistency {
  uint32_t records = 0;
  uint32_t corrupt_records = 0;       // files that do not parse
  uint32_t sandbox_entries = 0;
  uint32_t records_without_entry = 0;
  uint32_t entries_without_record = 0;
  uint32_t records_not_in_force = 0;  // record's current id is not the entry's
  uint32_t unreferenced_headers = 0;
  uint32_t wrong_refcounts = 0;
  uint32_t orphan_keys = 0;           // keys whose policy id has no header
  uint32_t dangling_entries = 0;      // entries pointing at an id with no header
  bool consistent() const;
};
absl::StatusOr<Consistency> CheckConsistency(const Paths& paths);

}  // namespace egressd::control
