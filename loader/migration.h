// The table of layout migrations: each entry carries the pinned state of a
// map an older egressd pinned under an older _vN name into the map of this
// build that replaced it.  One file per migration under loader/migrations/,
// each with the old layout as history has it (the commit that retired it).
//
// How a load applies them (loader/migrate.cc): the new map is created at a
// staging pin, filled from the old one while the old programs still
// enforce from the old map, the programs are swapped through their links
// (bpf_link_update: each hook moves from an old program reading the old map
// to a new program reading a copy of it), the staging pin is renamed to the
// map's name, the copy is brought level with the old map once more, and only
// after the self-test is the old map unpinned.
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"
#include "loader/pin_check.h"

namespace egressd {

struct Migration {
  const char* from;      // the old map's pin name
  const char* to;        // this build's map (its BPF name) that replaces it
  MapShape from_shape;   // the old layout, frozen from history
  // Fills `to_fd` from `from_fd`, returning how many entries it carried.
  // Null: nothing can be carried (`note` says why and what that means).
  absl::StatusOr<size_t> (*carry)(int from_fd, int to_fd) = nullptr;
  // After the swap: makes `to_fd` what carry() would make of `from_fd` now
  // (entries the old writers added, changed or deleted since the carry),
  // returning how many it deleted.  Null: not needed (or not possible).
  absl::StatusOr<size_t> (*level)(int from_fd, int to_fd) = nullptr;
  const char* note = "";
};

// Every known migration, newest first within one target map.
const std::vector<const Migration*>& Migrations();

// loader/migrations/*.cc
extern const Migration kMigrateResolvedV1;
extern const Migration kMigrateStatsV2;
extern const Migration kMigrateStatsV1;
extern const Migration kMigrateSockV1;
extern const Migration kMigrateTcStatsV1;

}  // namespace egressd
