// Loading, upgrading and unloading egressd's programs.  Programs are attached
// at the cgroup2 root with bpf_link (multi-attach: they run alongside other
// cgroup programs) and links and maps are pinned under Paths::pin_root, so
// enforcement stays in force when the loading process exits or is killed.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/common/node.h"
#include "userspace/common/instance_lock.h"
#include "loader/migrate.h"

namespace egressd {

struct LoadReport {
  int links_attached = 0;  // new attachments
  int links_updated = 0;   // existing links switched to the new programs in place
  // The LSM hooks (socket families, abstract unix peers) are in force.
  bool socket_containment = false;
  std::string bpf_lsm;  // what the probe found
  // Layout migrations this load made (loader/migration.h), none when the
  // pinned layouts were already this build's.
  std::vector<MigrationReport> migrations;
};

// Idempotent: a second load reuses the pinned maps (their entries survive) and
// swaps each pinned link's program atomically, so there is no window without
// enforcement.  Pinned maps are checked against the object's declarations
// first (a mismatch or a newer pinned state: IsPinnedStateError, nothing
// changed); maps an older egressd pinned under an older _vN name are
// migrated (loader/migration.h).  Probes the kernel first and self-tests after.  Caller holds
// the pin lock.
absl::StatusOr<LoadReport> LoadEnforcement(const Paths& paths, const InstanceLock& lock);

// Detaches every link and removes the pins.  Refuses while sandboxes are
// registered unless force.  Caller holds the pin lock.
absl::Status UnloadEnforcement(const Paths& paths, const InstanceLock& lock, bool force);

// All cgroup links pinned: enforcement is in force.
bool IsLoaded(const Paths& paths);

// OK when the LSM hooks are in force; else FailedPrecondition naming what is
// missing (the load recorded that the bpf LSM is not active, or a pin is gone).
absl::Status RequireSocketContainment(const Paths& paths);

// Whether the programs pinned under paths.pin_root are this build's: every
// cgroup link is pinned and the last load wrote this build's program id
// (a hash of the embedded BPF object) to <runtime_dir>/programs.id.  The
// daemon adopts such an instance without loading (a restart in milliseconds)
// and loads (swapping in place) otherwise.
bool ProgramsCurrent(const Paths& paths);
std::string EmbeddedProgramsId();

// The cgroup programs' link names (their pin files under <pin_root>/links),
// in load order; the LSM links are not among them (link_check.h).
std::vector<std::string> CgroupLinkNames();

}  // namespace egressd
