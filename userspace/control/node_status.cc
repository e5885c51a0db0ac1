#include "userspace/control/node_status.h"

#include <map>

#include "absl/strings/str_format.h"
#include "loader/loader.h"
#include "maps/if_sandbox_table.h"
#include "maps/lpm_keys.h"
#include "maps/map_census.h"
#include "maps/policy_store.h"
#include "maps/sandbox_table.h"
#include "maps/stats.h"
#include "userspace/common/errors.h"
#include "userspace/control/learned_view.h"
#include "userspace/control/reconcile.h"
#include "userspace/control/sandbox_record.h"

namespace egressd::control {

absl::StatusOr<nlohmann::json> NodeStatusJson(const Paths& paths, const maps::PinnedMaps& m,
                                              uint64_t in_use_window_ns) {
  EGR_ASSIGN_OR_RETURN(auto cgroups, maps::SandboxTable(m).List());
  EGR_ASSIGN_OR_RETURN(auto policies, maps::PolicyStore(m).List());
  auto stats = maps::ReadCounters(m);
  std::vector<uint64_t> corrupt;
  EGR_ASSIGN_OR_RETURN(auto records, SandboxRecords(paths).List(&corrupt));
  EGR_ASSIGN_OR_RETURN(auto consistency, CheckConsistency(paths));
  auto keys = maps::PolicyStore(m).CountKeys();
  nlohmann::json j;
  j["loaded"] = IsLoaded(paths);
  j["socket_containment"] = RequireSocketContainment(paths).ok();
  j["pin_root"] = paths.pin_root;
  // What the kernel does for a sandbox is its policy header's: an audit-only
  // one is not enforced, and is never shown as if it were.
  std::map<uint32_t, uint8_t> policy_flags;
  for (const auto& p : policies) policy_flags[p.id] = p.header.flags;
  auto put_mode = [](nlohmann::json& into, uint8_t flags) {
    into["enforced"] = !(flags & EGR_POLICY_AUDIT_ONLY);
    into["audit_only"] = (flags & EGR_POLICY_AUDIT_ONLY) != 0;
    into["strict_audit"] = (flags & EGR_POLICY_STRICT_AUDIT) != 0;
  };
  j["cgroups"] = nlohmann::json::array();
  for (const auto& c : cgroups) {
    j["cgroups"].push_back({{"cgroup_id", c.cgroup_id},
                            {"kind", c.value.kind == EGR_CG_SANDBOX ? "sandbox" : "contained-root"},
                            {"policy_id", c.value.policy_id}});
    if (c.value.kind == EGR_CG_SANDBOX) put_mode(j["cgroups"].back(), policy_flags[c.value.policy_id]);
    // Registered by interface alone: its id is no cgroup's (if_sandbox_table.h).
    if (maps::IsInterfaceSandboxId(c.cgroup_id)) j["cgroups"].back()["interface_only"] = true;
  }
  j["policies"] = nlohmann::json::array();
  for (const auto& p : policies) {
    j["policies"].push_back({{"policy_id", p.id},
                             {"refcount", p.header.refcount},
                             {"default", p.header.default_verdict == EGR_VERDICT_ALLOW ? "allow" : "deny"},
                             {"on_deny", p.header.deny_action == EGR_ACTION_DROP ? "drop" : "reject"},
                             {"content_hash", absl::StrFormat("%016x", p.header.content_hash)}});
    put_mode(j["policies"].back(), p.header.flags);
    const maps::KeyCounts k = keys.contains(p.id) ? keys[p.id] : maps::KeyCounts{};
    j["policies"].back()["keys"] = {{"allow4", k.allow4}, {"allow6", k.allow6}, {"prot4", k.prot4}, {"prot6", k.prot6}};
  }
  j["records"] = nlohmann::json::array();
  for (const auto& r : records) {
    j["records"].push_back(ToJson(r));
    // As recorded (a record whose policy is unknown shows the kernel's).
    const uint8_t flags = r.current.policy ? maps::MakePolicyHeader(*r.current.policy, 0).flags
                                           : policy_flags[r.current.policy_id];
    put_mode(j["records"].back(), flags);
  }
  const auto& c = consistency;
  j["consistency"] = {{"consistent", c.consistent()},
                      {"records", c.records},
                      {"corrupt_records", c.corrupt_records},
                      {"sandbox_entries", c.sandbox_entries},
                      {"records_without_entry", c.records_without_entry},
                      {"entries_without_record", c.entries_without_record},
                      {"records_not_in_force", c.records_not_in_force},
                      {"unreferenced_headers", c.unreferenced_headers},
                      {"wrong_refcounts", c.wrong_refcounts},
                      {"orphan_keys", c.orphan_keys},
                      {"dangling_entries", c.dangling_entries}};
  for (int i = 0; i < EGR_STAT_MAX; ++i) j["counters"][maps::CounterName(i)] = stats[i];
  EGR_ASSIGN_OR_RETURN(j["learned"], LearnedJson(m, records, {.in_use_window_ns = in_use_window_ns}));
  // The node-wide map of learned addresses (issue 12): what every sandbox's
  // quota comes out of.
  EGR_ASSIGN_OR_RETURN(auto census, maps::CountPinnedMaps(paths.pin_root));
  for (const auto& mc : census) {
    if (mc.name.rfind("egr_resolved", 0) != 0 || !mc.entries) continue;
    j["resolved"] = {{"map", mc.name}, {"capacity", mc.max_entries}, {"entries", *mc.entries}};
  }
  return j;
}

}  // namespace egressd::control
