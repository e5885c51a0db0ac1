#include "userspace/control/registry.h"

#include <spdlog/spdlog.h>

#include "userspace/common/errors.h"
#include "userspace/common/instance_lock.h"
#include "maps/pinned_maps.h"
#include "maps/policy_store.h"

namespace egressd::control {

// One locked read-modify-write over the instance's maps.
template <typename Fn>
absl::Status Registry::Locked(Fn fn) {
  EGR_ASSIGN_OR_RETURN(auto lock, InstanceLock::Acquire(paths_));
  EGR_ASSIGN_OR_RETURN(auto maps, maps::PinnedMaps::Open(paths_.pin_root));
  maps::PolicyStore store(maps);
  maps::SandboxTable table(maps);
  return fn(store, table);
}

absl::Status Registry::Register(uint64_t cgroup_id, const policy::CompiledPolicy& p) {
  return Locked([&](maps::PolicyStore& store, maps::SandboxTable& table) -> absl::Status {
    EGR_ASSIGN_OR_RETURN(auto old, table.Get(cgroup_id));
    EGR_ASSIGN_OR_RETURN(maps::PolicyId id, store.Acquire(p));
    if (absl::Status s = table.Point(cgroup_id, id); !s.ok()) {
      (void)store.Release(id);
      return s;
    }
    if (old && old->kind == EGR_CG_SANDBOX) EGR_RETURN_IF_ERROR(store.Release(old->policy_id));
    spdlog::debug("cgroup {} now judged by policy {:#x}", cgroup_id, id);
    return absl::OkStatus();
  });
}

absl::Status Registry::Unregister(uint64_t cgroup_id) {
  return Locked([&](maps::PolicyStore& store, maps::SandboxTable& table) -> absl::Status {
    EGR_ASSIGN_OR_RETURN(auto old, table.Get(cgroup_id));
    if (!old) return absl::OkStatus();
    EGR_RETURN_IF_ERROR(table.Remove(cgroup_id));
    if (old->kind == EGR_CG_SANDBOX) EGR_RETURN_IF_ERROR(store.Release(old->policy_id));
    return absl::OkStatus();
  });
}

absl::Status Registry::Contain(uint64_t cgroup_id) {
  return Locked([&](maps::PolicyStore& store, maps::SandboxTable& table) -> absl::Status {
    EGR_ASSIGN_OR_RETURN(auto old, table.Get(cgroup_id));
    EGR_RETURN_IF_ERROR(table.MarkContainedRoot(cgroup_id));
    if (old && old->kind == EGR_CG_SANDBOX) EGR_RETURN_IF_ERROR(store.Release(old->policy_id));
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<maps::CgroupEntry>> Registry::List() const {
  EGR_ASSIGN_OR_RETURN(auto maps, maps::PinnedMaps::Open(paths_.pin_root));
  return maps::SandboxTable(maps).List();
}

}  // namespace egressd::control
