#include "maps/sandbox_table.h"

#include <bpf/bpf.h>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"
#include "maps/map_iter.h"

namespace egressd::maps {

absl::Status SandboxTable::Point(uint64_t cgroup_id, PolicyId policy) {
  egr_cgroup_val v{};
  v.kind = EGR_CG_SANDBOX;
  v.policy_id = policy;
  v.sandbox_id = cgroup_id;
  if (bpf_map_update_elem(maps_.cgroups(), &cgroup_id, &v, BPF_ANY) != 0) {
    return ErrnoStatus(errno, absl::StrCat("register cgroup ", cgroup_id, " in ", EGR_MAP_CGROUPS));
  }
  return absl::OkStatus();
}

absl::Status SandboxTable::MarkContainedRoot(uint64_t cgroup_id) {
  egr_cgroup_val v{};
  v.kind = EGR_CG_CONTAINED_ROOT;
  v.sandbox_id = cgroup_id;
  if (bpf_map_update_elem(maps_.cgroups(), &cgroup_id, &v, BPF_ANY) != 0) {
    return ErrnoStatus(errno, absl::StrCat("contain cgroup ", cgroup_id, " in ", EGR_MAP_CGROUPS));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<egr_cgroup_val>> SandboxTable::Get(uint64_t cgroup_id) const {
  egr_cgroup_val v{};
  if (bpf_map_lookup_elem(maps_.cgroups(), &cgroup_id, &v) == 0) return v;
  if (errno == ENOENT) return std::nullopt;
  return ErrnoStatus(errno, absl::StrCat("lookup cgroup ", cgroup_id, " in ", EGR_MAP_CGROUPS));
}

absl::Status SandboxTable::Remove(uint64_t cgroup_id) {
  if (bpf_map_delete_elem(maps_.cgroups(), &cgroup_id) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("remove cgroup ", cgroup_id, " from ", EGR_MAP_CGROUPS));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CgroupEntry>> SandboxTable::List() const {
  std::vector<CgroupEntry> out;
  for (const auto& [id, v] : AllEntries<uint64_t, egr_cgroup_val>(maps_.cgroups())) out.push_back({id, v});
  return out;
}

}  // namespace egressd::maps
