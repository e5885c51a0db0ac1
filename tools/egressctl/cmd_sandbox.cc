// sandbox add/remove/contain: register cgroups the caller manages (the
// orchestrator's path until the daemon's API arrives).
#include <cstdio>

#include "userspace/common/node.h"
#include "loader/loader.h"
#include "tools/egressctl/commands.h"
#include "tools/egressctl/policy_flags.h"
#include "userspace/control/registry.h"

namespace egressd::cli {
namespace {

absl::StatusOr<uint64_t> LoadedCgroupId(const Paths& paths, const std::string& cgroup) {
  if (!IsLoaded(paths)) {
    return absl::FailedPreconditionError("egressd is not loaded under " + paths.pin_root +
                                         " (run `egressctl load` first)");
  }
  return CgroupIdOf(cgroup);
}

}  // namespace

int CmdSandboxAdd(const Paths& paths, const std::string& cgroup, const PolicyFlags& flags) {
  auto policy = CompileFlags(flags);
  if (!policy.ok()) return Report(policy.status());
  PrintWarnings(*policy);
  auto id = LoadedCgroupId(paths, cgroup);
  if (!id.ok()) return Report(id.status());
  return Report(control::Registry(paths).Register(*id, *policy));
}

int CmdSandboxRemove(const Paths& paths, const std::string& cgroup) {
  auto id = LoadedCgroupId(paths, cgroup);
  if (!id.ok()) return Report(id.status());
  return Report(control::Registry(paths).Unregister(*id));
}

int CmdSandboxContain(const Paths& paths, const std::string& cgroup) {
  auto id = LoadedCgroupId(paths, cgroup);
  if (!id.ok()) return Report(id.status());
  return Report(control::Registry(paths).Contain(*id));
}

}  // namespace egressd::cli
