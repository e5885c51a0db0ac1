// load, unload, probe, status.
#include <unistd.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "loader/loader.h"
#include "userspace/common/instance_lock.h"
#include "loader/probe.h"
#include "maps/pinned_maps.h"
#include "maps/policy_store.h"
#include "maps/sandbox_table.h"
#include "maps/stats.h"
#include "tools/egressctl/commands.h"
#include "tools/egressctl/policy_flags.h"

namespace egressd::cli {
int CmdLoad(const Paths& paths) {
  // Before the lock, which creates the pin dir: a node that cannot run
  // egressd is left exactly as it was.
  if (auto s = RequireKernel(paths); !s.ok()) return Report(s);
  auto lock = InstanceLock::Acquire(paths);
  if (!lock.ok()) return Report(lock.status());
  auto r = LoadEnforcement(paths, *lock);
  if (!r.ok()) return Report(r.status());
  std::printf("egressd loaded: %d link(s) attached, %d updated in place; pins under %s\n",
              r->links_attached, r->links_updated, paths.pin_root.c_str());
  return kExitOk;
}

int CmdUnload(const Paths& paths, bool force) {
  if (access(paths.pin_root.c_str(), F_OK) != 0) {
    std::printf("egressd is not loaded (no %s)\n", paths.pin_root.c_str());
    return kExitOk;
  }
  auto lock = InstanceLock::Acquire(paths);
  if (!lock.ok()) return Report(lock.status());
  return Report(UnloadEnforcement(paths, *lock, force));
}

int CmdProbe(const Paths& paths) {
  bool all_ok = true;
  for (const auto& i : ProbeKernel(paths)) {
    std::printf("%-4s %s%s%s\n", i.ok ? "ok" : "MISSING", i.what.c_str(), i.detail.empty() ? "" : ": ",
                i.detail.c_str());
    all_ok &= i.ok;
  }
  return all_ok ? kExitOk : kExitFailure;
}

int CmdStatus(const Paths& paths, bool json) {
  auto m = maps::PinnedMaps::Open(paths.pin_root);
  if (!m.ok()) return Report(m.status());
  auto cgroups = maps::SandboxTable(*m).List();
  auto policies = maps::PolicyStore(*m).List();
  if (!cgroups.ok()) return Report(cgroups.status());
  if (!policies.ok()) return Report(policies.status());
  auto stats = maps::ReadCounters(*m);
  nlohmann::json j;
  j["loaded"] = IsLoaded(paths);
  j["pin_root"] = paths.pin_root;
  j["cgroups"] = nlohmann::json::array();
  for (const auto& c : *cgroups) {
    j["cgroups"].push_back({{"cgroup_id", c.cgroup_id},
                            {"kind", c.value.kind == EGR_CG_SANDBOX ? "sandbox" : "contained-root"},
                            {"policy_id", c.value.policy_id}});
  }
  j["policies"] = nlohmann::json::array();
  for (const auto& p : *policies) {
    j["policies"].push_back({{"policy_id", p.id},
                             {"refcount", p.header.refcount},
                             {"default", p.header.default_verdict == EGR_VERDICT_ALLOW ? "allow" : "deny"},
                             {"on_deny", p.header.deny_action == EGR_ACTION_DROP ? "drop" : "reject"}});
  }
  for (int i = 0; i < EGR_STAT_MAX; ++i) j["counters"][maps::CounterName(i)] = stats[i];
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("egressd %s (pins under %s)\n", j["loaded"].get<bool>() ? "loaded" : "NOT fully loaded",
              paths.pin_root.c_str());
  for (const auto& c : j["cgroups"]) {
    std::printf("  cgroup %-12s %-15s policy %#x\n", std::to_string(c["cgroup_id"].get<uint64_t>()).c_str(),
                c["kind"].get<std::string>().c_str(), c["policy_id"].get<uint32_t>());
  }
  for (const auto& p : j["policies"]) {
    std::printf("  policy %#-10x default %-5s on-deny %-6s sandboxes %u\n", p["policy_id"].get<uint32_t>(),
                p["default"].get<std::string>().c_str(), p["on_deny"].get<std::string>().c_str(),
                p["refcount"].get<uint32_t>());
  }
  for (int i = 0; i < EGR_STAT_MAX; ++i) std::printf("  %-15s %llu\n", maps::CounterName(i), (unsigned long long)stats[i]);
  return kExitOk;
}

}  // namespace egressd::cli
