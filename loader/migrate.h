// One load's checks of the pinned state and its layout migrations
// (loader/migration.h), in the order LoadEnforcement calls them.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loader/migration.h"
#include "loader/pin_check.h"
#include "userspace/common/node.h"
#include "userspace/common/unique_fd.h"

struct bpf_object;

namespace egressd {

// Where a migrating map waits, filled, until the programs use it.  Every pin
// found there at the start of a load is an interrupted migration's and is
// removed first (the old map is still pinned, so it is redone from there).
std::string StagingDir(const Paths& paths);

struct MigrationReport {
  std::string from, to;
  size_t carried = 0;   // entries filled before the swap
  size_t leveled = 0;   // entries the old map's writers deleted since the fill, deleted from the copy
  double seconds = 0;   // from the first read of the old map to its unpin
};

class MigrationPlan {
 public:
  // Before the object is loaded (it is opened with pin_root_path): removes
  // stale staging pins; refuses a downgrade (names both versions); checks
  // every map already pinned under its own name against the object's
  // declaration and every old map to migrate against its frozen layout; and
  // points each map to migrate at its staging pin, so the load creates it
  // there.  Nothing of the node changes before every check passed, except
  // the stale staging pins' removal.
  static absl::StatusOr<MigrationPlan> Prepare(const Paths& paths, bpf_object* obj);

  bool empty() const { return steps_.empty() && retire_.empty(); }

  // After the load, before any link changes: fills each staging map from its
  // old map (the old programs still enforce from the old one).
  absl::Status Fill(bpf_object* obj);
  // After every link was swapped: each staging pin becomes the map's pin,
  // then the copy is leveled with what the old map's writers did meanwhile.
  absl::Status Commit();
  // The load failed after Commit and its links went back to the old
  // programs: the new maps' pins are removed (the old maps were never
  // unpinned), so the next load migrates again.
  void Abandon();
  // After the self-test: the old maps are unpinned; reports each migration.
  absl::StatusOr<std::vector<MigrationReport>> Finish();

 private:
  struct Step {
    const Migration* m;
    std::string from_pin, staging_pin, final_pin;
    UniqueFd from_fd;
    int to_fd = -1;  // the object's (owned by it)
    bool committed = false;
    MigrationReport report;
    double started = 0;
  };
  std::string pin_root_;
  std::vector<Step> steps_;
  std::vector<std::string> retire_;  // old pins to unpin without carrying (already migrated, or superseded)
};

}  // namespace egressd

namespace egressd {

// What adopting the pinned state without a load requires: every map the
// object declares pinned under its name with the declared shape, the pinned
// schema this build's, and no old layout left to migrate.  Changes nothing.
absl::Status CheckAdoptable(const Paths& paths, const bpf_object* obj);

}  // namespace egressd
