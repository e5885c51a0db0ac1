// egr_cgroups_v1: which cgroups are sandboxes (and which policy judges them)
// and which are contained roots.  One map update flips a sandbox from one
// policy to another, so it is judged wholly by the old or wholly by the new.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "maps/lpm_keys.h"
#include "maps/pinned_maps.h"

namespace egressd::maps {

struct CgroupEntry {
  uint64_t cgroup_id;
  egr_cgroup_val value;
};

class SandboxTable {
 public:
  explicit SandboxTable(const PinnedMaps& maps) : maps_(maps) {}

  // Registers cgroup_id as a sandbox judged by policy, or flips it.
  absl::Status Point(uint64_t cgroup_id, PolicyId policy);
  absl::Status MarkContainedRoot(uint64_t cgroup_id);
  absl::StatusOr<std::optional<egr_cgroup_val>> Get(uint64_t cgroup_id) const;
  absl::Status Remove(uint64_t cgroup_id);
  absl::StatusOr<std::vector<CgroupEntry>> List() const;

 private:
  const PinnedMaps& maps_;
};

}  // namespace egressd::maps
