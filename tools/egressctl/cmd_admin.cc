// load, unload, probe, status.
#include <unistd.h>

#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "loader/loader.h"
#include "userspace/common/instance_lock.h"
#include "loader/probe.h"
#include "maps/map_census.h"
#include "maps/pinned_maps.h"
#include "maps/lpm_keys.h"
#include "maps/policy_store.h"
#include "maps/resolved_table.h"
#include "maps/sandbox_table.h"
#include "maps/stats.h"
#include "tools/egressctl/commands.h"
#include "tools/egressctl/policy_flags.h"
#include "userspace/control/learned_view.h"
#include "userspace/control/reconcile.h"
#include "userspace/control/sandbox_record.h"
#include "userspace/common/errors.h"
#include "userspace/dns/scope.h"
#include "userspace/audit/lifecycle.h"
#include "userspace/audit/user_events.h"

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
  for (const auto& m : r->migrations) {
    std::printf("migrated %s -> %s: %zu entries carried, %zu forgotten since (deleted from the copy), %.3f s; %s unpinned\n",
                m.from.c_str(), m.to.c_str(), m.carried, m.leveled, m.seconds, m.from.c_str());
  }
  // Still under the lock: what a crashed writer left is repaired before
  // anyone else changes the maps.
  auto rec = control::Reconcile(paths, *lock);
  if (!rec.ok()) return Report(rec.status());
  if (rec->changed()) {
    std::printf("reconciled: %u record(s) dropped, %u reverted, %u repaired, %u created; %u dead cgroup(s); "
                "%u refcount(s) fixed; %u unreferenced polic(ies) and %u orphan key(s) collected; %u corrupt record(s) set aside\n",
                rec->records_dropped, rec->records_reverted, rec->records_repaired, rec->records_created,
                rec->dead_cgroups, rec->refcounts_fixed, rec->headers_collected, rec->keys_collected,
                rec->records_quarantined);
  }
  if (!r->socket_containment) {
    std::printf("WARNING: socket-family containment is MISSING (bpf LSM: %s).\n"
                "  Packet, AF_XDP and AF_VSOCK sockets and abstract unix peers are not judged, so\n"
                "  `egressctl sandbox add` and `egressctl run` warn (refuse with\n"
                "  --require-socket-containment) when asked to contain a workload here.\n",
                r->bpf_lsm.c_str());
  }
  audit::WriteOneUserEvent(paths,
                           audit::EngineJson("started", {{"links_attached", r->links_attached},
                                                         {"links_updated", r->links_updated},
                                                         {"socket_containment", r->socket_containment},
                                                         {"pin_root", paths.pin_root}}),
                           0);
  return kExitOk;
}

int CmdUnload(const Paths& paths, bool force) {
  if (access(paths.pin_root.c_str(), F_OK) != 0) {
    std::printf("egressd is not loaded (no %s)\n", paths.pin_root.c_str());
    return kExitOk;
  }
  auto lock = InstanceLock::Acquire(paths);
  if (!lock.ok()) return Report(lock.status());
  absl::Status s = UnloadEnforcement(paths, *lock, force);
  if (s.ok()) {
    audit::WriteOneUserEvent(paths, audit::EngineJson("stopped", {{"pin_root", paths.pin_root}, {"force", force}}), 0);
  }
  return Report(s);
}

int CmdProbe(const Paths& paths) {
  bool all_ok = true;
  for (const auto& i : ProbeKernel(paths)) {
    // An optional item that is absent leaves egressd loadable with less
    // enforcement: shown as "no", not as a reason the node cannot run it.
    std::printf("%-7s %s%s%s\n", i.ok ? "ok" : i.required ? "MISSING" : "no", i.what.c_str(),
                i.detail.empty() ? "" : ": ", i.detail.c_str());
    all_ok &= i.ok || !i.required;
  }
  return all_ok ? kExitOk : kExitFailure;
}

// The learned addresses with their provenance (control/learned_view.h).
static absl::Status PutLearned(const maps::PinnedMaps& m, const std::vector<control::SandboxRecord>& records,
                               nlohmann::json& j) {
  EGR_ASSIGN_OR_RETURN(j["learned"], control::LearnedJson(m, records,
                                                          {.in_use_window_ns = maps::ResolvedTable::DefaultWindowNs()}));
  return absl::OkStatus();
}

int CmdStatus(const Paths& paths, bool json) {
  auto m = maps::PinnedMaps::Open(paths.pin_root);
  if (!m.ok()) return Report(m.status());
  auto cgroups = maps::SandboxTable(*m).List();
  auto policies = maps::PolicyStore(*m).List();
  if (!cgroups.ok()) return Report(cgroups.status());
  if (!policies.ok()) return Report(policies.status());
  auto stats = maps::ReadCounters(*m);
  std::vector<uint64_t> corrupt;
  auto records = control::SandboxRecords(paths).List(&corrupt);
  if (!records.ok()) return Report(records.status());
  auto consistency = control::CheckConsistency(paths);
  if (!consistency.ok()) return Report(consistency.status());
  auto keys = maps::PolicyStore(*m).CountKeys();
  nlohmann::json j;
  j["loaded"] = IsLoaded(paths);
  j["socket_containment"] = RequireSocketContainment(paths).ok();
  j["pin_root"] = paths.pin_root;
  // What the kernel does for a sandbox is its policy header's: an audit-only
  // one is not enforced, and is never shown as if it were.
  std::map<uint32_t, uint8_t> policy_flags;
  for (const auto& p : *policies) policy_flags[p.id] = p.header.flags;
  auto put_mode = [](nlohmann::json& into, uint8_t flags) {
    into["enforced"] = !(flags & EGR_POLICY_AUDIT_ONLY);
    into["audit_only"] = (flags & EGR_POLICY_AUDIT_ONLY) != 0;
    into["strict_audit"] = (flags & EGR_POLICY_STRICT_AUDIT) != 0;
  };
  j["cgroups"] = nlohmann::json::array();
  for (const auto& c : *cgroups) {
    j["cgroups"].push_back({{"cgroup_id", c.cgroup_id},
                            {"kind", c.value.kind == EGR_CG_SANDBOX ? "sandbox" : "contained-root"},
                            {"policy_id", c.value.policy_id}});
    if (c.value.kind == EGR_CG_SANDBOX) put_mode(j["cgroups"].back(), policy_flags[c.value.policy_id]);
  }
  j["policies"] = nlohmann::json::array();
  for (const auto& p : *policies) {
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
  for (const auto& r : *records) {
    j["records"].push_back(control::ToJson(r));
    // As recorded (a record whose policy is unknown shows the kernel's).
    const uint8_t flags = r.current.policy ? maps::MakePolicyHeader(*r.current.policy, 0).flags
                                           : policy_flags[r.current.policy_id];
    put_mode(j["records"].back(), flags);
  }
  const auto& c = *consistency;
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
  if (absl::Status s = PutLearned(*m, *records, j); !s.ok()) return Report(s);
  // The node-wide map of learned addresses (issue 12): what every sandbox's
  // quota comes out of.
  auto census = maps::CountPinnedMaps(paths.pin_root);
  if (!census.ok()) return Report(census.status());
  for (const auto& mc : *census) {
    if (mc.name.rfind("egr_resolved", 0) != 0 || !mc.entries) continue;
    j["resolved"] = {{"map", mc.name}, {"capacity", mc.max_entries}, {"entries", *mc.entries}};
  }
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("egressd %s (pins under %s)\n", j["loaded"].get<bool>() ? "loaded" : "NOT fully loaded",
              paths.pin_root.c_str());
  for (const auto& c : j["cgroups"]) {
    std::printf("  cgroup %-12s %-15s policy %#x%s%s\n", std::to_string(c["cgroup_id"].get<uint64_t>()).c_str(),
                c["kind"].get<std::string>().c_str(), c["policy_id"].get<uint32_t>(),
                c.value("audit_only", false) ? " NOT ENFORCED (audit-only: denials recorded as would-deny)" : "",
                c.value("strict_audit", false) ? " strict-audit" : "");
  }
  for (const auto& p : j["policies"]) {
    std::printf("  policy %#-10x default %-5s on-deny %-6s sandboxes %u\n", p["policy_id"].get<uint32_t>(),
                p["default"].get<std::string>().c_str(), p["on_deny"].get<std::string>().c_str(),
                p["refcount"].get<uint32_t>());
  }
  for (const auto& r : *records) {
    std::string labels;
    for (const auto& [k, v] : r.labels) labels += " " + k + "=" + v;
    std::printf("  record %-12s %s%s%s\n", std::to_string(r.cgroup_id).c_str(),
                r.cgroup_path.empty() ? "(path unknown)" : r.cgroup_path.c_str(), labels.c_str(),
                r.current.policy ? "" : " (names unknown)");
  }
  for (const auto& e : j["learned"]["entries"]) {
    const int64_t left = e["expires_in_s"].get<int64_t>();
    std::string use;
    if (e["socks"].get<uint32_t>()) use += absl::StrCat(" held by ", e["socks"].get<uint32_t>(), " sockets");
    if (e.contains("last_used_s_ago")) use += absl::StrCat(" last used ", e["last_used_s_ago"].get<int64_t>(), "s ago");
    std::printf("  learned %-12s %-39s %s via %s%s\n", std::to_string(e["sandbox"].get<uint64_t>()).c_str(),
                e["address"].get<std::string>().c_str(),
                left > 0 ? absl::StrCat("expires in ", left, "s").c_str() : absl::StrCat("expired ", -left, "s ago").c_str(),
                absl::StrJoin(e["rules"].get<std::vector<std::string>>(), ",").c_str(), use.c_str());
  }
  if (!c.consistent()) std::printf("  INCONSISTENT (run `egressctl load` to reconcile): %s\n", j["consistency"].dump().c_str());
  if (j.contains("resolved")) {
    const auto& r = j["resolved"];
    const uint64_t cap = r["capacity"].get<uint64_t>(), n = r["entries"].get<uint64_t>();
    std::printf("  learned addresses %llu of %llu (%.1f%%) in %s\n", (unsigned long long)n, (unsigned long long)cap,
                cap ? 100.0 * static_cast<double>(n) / static_cast<double>(cap) : 0.0,
                r["map"].get<std::string>().c_str());
  }
  for (int i = 0; i < EGR_STAT_MAX; ++i) std::printf("  %-15s %llu\n", maps::CounterName(i), (unsigned long long)stats[i]);
  return kExitOk;
}

}  // namespace egressd::cli
