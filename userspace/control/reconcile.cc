#include "userspace/control/reconcile.h"

#include <spdlog/spdlog.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "loader/tc_attach.h"
#include "maps/dns_endpoints.h"
#include "maps/if_sandbox_table.h"
#include "maps/pinned_maps.h"
#include "maps/policy_store.h"
#include "maps/sandbox_table.h"
#include "userspace/common/errors.h"
#include "userspace/common/cgroup_tree.h"
#include "userspace/control/sandbox_record.h"
#include "userspace/net/sandbox_interface.h"

namespace egressd::control {
namespace {

using EntryMap = absl::flat_hash_map<uint64_t, egr_cgroup_val>;
using HeaderMap = absl::flat_hash_map<maps::PolicyId, egr_policy_val>;

struct Snapshot {
  EntryMap entries;
  HeaderMap headers;
  std::vector<SandboxRecord> records;
};

absl::StatusOr<Snapshot> Read(const maps::PolicyStore& store, const maps::SandboxTable& table,
                              const SandboxRecords& records, std::vector<uint64_t>* corrupt = nullptr) {
  Snapshot s;
  EGR_ASSIGN_OR_RETURN(auto entries, table.List());
  for (const auto& e : entries) s.entries[e.cgroup_id] = e.value;
  EGR_ASSIGN_OR_RETURN(auto headers, store.List());
  for (const auto& h : headers) s.headers[h.id] = h.header;
  EGR_ASSIGN_OR_RETURN(s.records, records.List(corrupt));
  return s;
}

bool IsSandbox(const EntryMap& entries, uint64_t cg, egr_cgroup_val* out = nullptr) {
  auto it = entries.find(cg);
  if (it == entries.end() || it->second.kind != EGR_CG_SANDBOX) return false;
  if (out) *out = it->second;
  return true;
}

// Whether `p` is what the header under its id was written from.
bool MatchesHeader(const HeaderMap& headers, maps::PolicyId id, const policy::CompiledPolicy& p) {
  auto it = headers.find(id);
  return it != headers.end() && it->second.content_hash == p.ContentHash();
}

// The policy of a consistent record (another cgroup's) judged by `id`.
std::optional<policy::CompiledPolicy> SiblingPolicy(const Snapshot& s, maps::PolicyId id, uint64_t except) {
  for (const auto& r : s.records) {
    egr_cgroup_val m{};
    if (r.cgroup_id == except || !IsSandbox(s.entries, r.cgroup_id, &m) || m.policy_id != id) continue;
    if (r.current.policy_id == id && r.current.policy && MatchesHeader(s.headers, id, *r.current.policy)) {
      return r.current.policy;
    }
  }
  return std::nullopt;
}

absl::Status ReconcileRecord(const Snapshot& s, SandboxRecord r, const SandboxRecords& records,
                             ReconcileReport& report) {
  egr_cgroup_val m{};
  if (!IsSandbox(s.entries, r.cgroup_id, &m)) {
    spdlog::info("cgroup {}: record without a sandbox entry (its register never landed, or its remove did): deleted",
                 r.cgroup_id);
    ++report.records_dropped;
    return records.Remove(r.cgroup_id);
  }
  if (m.policy_id == r.current.policy_id) {
    if (!r.current.policy || MatchesHeader(s.headers, m.policy_id, *r.current.policy) ||
        !s.headers.contains(m.policy_id)) {
      return absl::OkStatus();
    }
    r.current.policy.reset();
    r.note = absl::StrCat("reconciled: the recorded policy is not the one in force under ", m.policy_id,
                          "; its names are unknown");
    ++report.records_repaired;
  } else if (r.previous && r.previous->policy_id == m.policy_id) {
    spdlog::info("cgroup {}: a flip to policy {:#x} never landed; the record goes back to {:#x}", r.cgroup_id,
                 r.current.policy_id, m.policy_id);
    r.current = *r.previous;
    r.labels = r.previous_labels;
    r.previous.reset();
    r.previous_labels.clear();
    r.note.clear();
    ++report.records_reverted;
  } else {
    r.current = PolicyRef{m.policy_id, SiblingPolicy(s, m.policy_id, r.cgroup_id)};
    r.previous.reset();
    r.previous_labels.clear();
    r.note = absl::StrCat("reconciled: the maps enforce policy ", m.policy_id, ", which this record did not name",
                          r.current.policy ? "" : "; its names are unknown");
    ++report.records_repaired;
  }
  spdlog::warn("cgroup {}: {}", r.cgroup_id, r.note.empty() ? "record reverted" : r.note);
  return records.Write(r);
}

// The DNS endpoints follow the records (which are written first): a sandbox
// entry whose record names an endpoint gets it; any other endpoint goes, and
// every guard whose owner does not name it.
absl::StatusOr<uint32_t> ReconcileDns(const Paths& paths, const maps::SandboxTable& table,
                                      const SandboxRecords& records) {
  EGR_ASSIGN_OR_RETURN(auto dns, maps::DnsEndpoints::Open(paths.pin_root));
  EGR_ASSIGN_OR_RETURN(auto all, records.List());
  EGR_ASSIGN_OR_RETURN(auto entries, table.List());
  absl::flat_hash_map<uint64_t, maps::DnsEndpoint> wanted;
  for (const auto& r : all) {
    bool sandbox = false;
    for (const auto& e : entries) sandbox |= e.cgroup_id == r.cgroup_id && e.value.kind == EGR_CG_SANDBOX;
    if (sandbox && r.dns) wanted[r.cgroup_id] = *r.dns;
  }
  uint32_t fixed = 0;
  EGR_ASSIGN_OR_RETURN(auto present, dns.List());
  for (const auto& e : present) {
    if (wanted.contains(e.sandbox_id)) continue;
    spdlog::info("sandbox {}: a DNS endpoint no record names: removed", e.sandbox_id);
    EGR_RETURN_IF_ERROR(dns.Remove(e.sandbox_id));
    ++fixed;
  }
  for (const auto& [cg, ep] : wanted) {
    EGR_ASSIGN_OR_RETURN(auto have, dns.Get(cg));
    if (have && *have == ep) continue;
    spdlog::info("sandbox {}: its DNS endpoint (port {}) was not in force: written", cg, ep.port);
    EGR_RETURN_IF_ERROR(dns.Set(cg, ep));
    ++fixed;
  }
  EGR_RETURN_IF_ERROR(dns.RemoveOrphanGuards());
  return fixed;
}

// The record of sandbox `id` in `records`, if any.
const SandboxRecord* RecordOf(const std::vector<SandboxRecord>& records, uint64_t id) {
  for (const auto& r : records) {
    if (r.cgroup_id == id) return &r;
  }
  return nullptr;
}

// egr_ifsbox_v1 after the records and sandbox entries are settled (see the
// header): returns the number of entries collected or re-pointed.
absl::StatusOr<uint32_t> ReconcileInterfaces(const Paths& paths, const maps::SandboxTable& table,
                                             const SandboxRecords& records) {
  EGR_ASSIGN_OR_RETURN(auto ifs, maps::IfSandboxTable::Open(paths.pin_root));
  EGR_ASSIGN_OR_RETURN(auto entries, ifs.List());
  EGR_ASSIGN_OR_RETURN(auto all, records.List());
  uint32_t fixed = 0;
  for (const auto& e : entries) {
    const SandboxRecord* r = RecordOf(all, e.value.sandbox_id);
    EGR_ASSIGN_OR_RETURN(auto m, table.Get(e.value.sandbox_id));
    const bool sandbox = m && m->kind == EGR_CG_SANDBOX;
    if (!net::InterfaceExists(e.ifindex, r && r->ifindex == e.ifindex ? r->interface : "")) {
      spdlog::info("interface {} (sandbox {}) no longer exists: its egr_ifsbox_v1 entries go", e.ifindex,
                   e.value.sandbox_id);
    } else if (!sandbox) {
      spdlog::info("interface {}: judged for sandbox {}, which has no sandbox entry: detached", e.ifindex,
                   e.value.sandbox_id);
      EGR_RETURN_IF_ERROR(DetachTcIngress(e.ifindex));
    } else if (m->policy_id != e.value.policy_id) {
      spdlog::info("interface {}: policy {:#x}, its sandbox {}'s is {:#x}: re-pointed", e.ifindex, e.value.policy_id,
                   e.value.sandbox_id, m->policy_id);
      EGR_RETURN_IF_ERROR(ifs.Set(e.ifindex, *m));
      ++fixed;
      continue;
    } else {
      continue;
    }
    EGR_RETURN_IF_ERROR(ifs.Remove(e.ifindex));
    EGR_RETURN_IF_ERROR(ifs.RemovePod(e.ifindex));
    ++fixed;
  }
  // A sandbox with a cgroup too keeps it, without the interface it lost.
  for (SandboxRecord r : all) {
    if (!r.ifindex || maps::IsInterfaceSandboxId(r.cgroup_id) || net::InterfaceExists(r.ifindex, r.interface)) continue;
    spdlog::info("cgroup {}: its interface {} ({}) vanished: the record forgets it", r.cgroup_id, r.interface,
                 r.ifindex);
    r.note = absl::StrCat("reconciled: its interface ", r.interface, " vanished");
    r.interface.clear();
    r.ifindex = 0;
    EGR_RETURN_IF_ERROR(records.Write(r));
  }
  return fixed;
}

}  // namespace

bool ReconcileReport::changed() const {
  return records_dropped + records_reverted + records_repaired + records_created + records_quarantined + dead_cgroups +
             refcounts_fixed + headers_collected + keys_collected + dns_endpoints_fixed + dead_interfaces +
             interface_entries_fixed >
         0;
}

bool Consistency::consistent() const {
  return corrupt_records + records_without_entry + entries_without_record + records_not_in_force + unreferenced_headers +
             wrong_refcounts + orphan_keys ==
         0;
}

absl::StatusOr<ReconcileReport> Reconcile(const Paths& paths, const InstanceLock&) {
  EGR_ASSIGN_OR_RETURN(auto maps, maps::PinnedMaps::Open(paths.pin_root));
  maps::PolicyStore store(maps);
  maps::SandboxTable table(maps);
  SandboxRecords records(paths);
  ReconcileReport report;

  // Sandboxes whose cgroup is gone: nothing can run in them any more.  A
  // record that does not parse is set aside; its sandbox is then one without
  // a record (below).
  {
    std::vector<uint64_t> corrupt;
    EGR_ASSIGN_OR_RETURN(Snapshot s, Read(store, table, records, &corrupt));
    for (uint64_t cg : corrupt) {
      spdlog::warn("the record of cgroup {} does not parse: moved to {}.corrupt", cg, records.PathOf(cg));
      EGR_RETURN_IF_ERROR(records.Quarantine(cg));
      ++report.records_quarantined;
    }
    for (const auto& [cg, m] : s.entries) {
      if (m.kind != EGR_CG_SANDBOX) continue;
      if (maps::IsInterfaceSandboxId(cg)) {
        // No cgroup: it lives as long as its interface (its pod's veth).
        const uint32_t ifindex = maps::IfindexOfInterfaceSandbox(cg);
        const SandboxRecord* r = RecordOf(s.records, cg);
        if (net::InterfaceExists(ifindex, r ? r->interface : "")) continue;
        spdlog::info("sandbox {}: its interface {} ({}) no longer exists: its sandbox entry and record go", cg,
                     r ? r->interface : "?", ifindex);
        EGR_ASSIGN_OR_RETURN(auto ifs, maps::IfSandboxTable::Open(paths.pin_root));
        EGR_ASSIGN_OR_RETURN(auto held, ifs.Get(ifindex));
        if (held && held->sandbox_id == cg) {
          EGR_RETURN_IF_ERROR(ifs.Remove(ifindex));
          EGR_RETURN_IF_ERROR(ifs.RemovePod(ifindex));
        }
        EGR_RETURN_IF_ERROR(table.Remove(cg));
        EGR_RETURN_IF_ERROR(records.Remove(cg));
        ++report.dead_interfaces;
        continue;
      }
      EGR_ASSIGN_OR_RETURN(bool alive, CgroupExists(cg));
      if (alive) continue;
      spdlog::info("cgroup {} no longer exists: its sandbox entry and record go", cg);
      EGR_RETURN_IF_ERROR(table.Remove(cg));
      EGR_RETURN_IF_ERROR(records.Remove(cg));
      ++report.dead_cgroups;
    }
  }

  EGR_ASSIGN_OR_RETURN(Snapshot s, Read(store, table, records));
  for (const auto& r : s.records) EGR_RETURN_IF_ERROR(ReconcileRecord(s, r, records, report));
  for (const auto& [cg, m] : s.entries) {
    if (m.kind != EGR_CG_SANDBOX) continue;
    bool recorded = false;
    for (const auto& r : s.records) recorded |= r.cgroup_id == cg;
    if (recorded) continue;
    SandboxRecord r{.cgroup_id = cg, .current = {m.policy_id, SiblingPolicy(s, m.policy_id, cg)}};
    r.note = absl::StrCat("reconciled: a sandbox entry without a record (policy ", m.policy_id,
                          r.current.policy ? ")" : "; its names are unknown)");
    spdlog::warn("cgroup {}: {}", cg, r.note);
    EGR_RETURN_IF_ERROR(records.Write(r));
    ++report.records_created;
  }

  absl::flat_hash_map<maps::PolicyId, uint32_t> refs;
  for (const auto& [cg, m] : s.entries) {
    if (m.kind == EGR_CG_SANDBOX) ++refs[m.policy_id];
  }
  for (const auto& [id, h] : s.headers) {
    uint32_t n = refs.contains(id) ? refs[id] : 0;
    if (n == 0) {
      // Its keys go with the orphan sweep below (one walk for all).
      spdlog::info("policy {:#x}: no sandbox points at it (refcount was {}): collected", id, h.refcount);
      EGR_RETURN_IF_ERROR(store.DropHeader(id));
      ++report.headers_collected;
    } else if (n != h.refcount) {
      spdlog::info("policy {:#x}: refcount {} but {} sandbox(es) point at it: fixed", id, h.refcount, n);
      EGR_RETURN_IF_ERROR(store.SetRefcount(id, n));
      ++report.refcounts_fixed;
    }
  }
  EGR_ASSIGN_OR_RETURN(report.keys_collected, store.CollectOrphanKeys());
  EGR_ASSIGN_OR_RETURN(report.dns_endpoints_fixed, ReconcileDns(paths, table, records));
  EGR_ASSIGN_OR_RETURN(report.interface_entries_fixed, ReconcileInterfaces(paths, table, records));
  return report;
}

absl::StatusOr<Consistency> CheckConsistency(const Paths& paths) {
  EGR_ASSIGN_OR_RETURN(auto maps, maps::PinnedMaps::Open(paths.pin_root));
  maps::PolicyStore store(maps);
  maps::SandboxTable table(maps);
  SandboxRecords records(paths);
  std::vector<uint64_t> corrupt;
  EGR_ASSIGN_OR_RETURN(Snapshot s, Read(store, table, records, &corrupt));
  Consistency c;
  c.records = s.records.size();
  c.corrupt_records = corrupt.size();
  absl::flat_hash_map<maps::PolicyId, uint32_t> refs;
  absl::flat_hash_set<uint64_t> recorded;
  for (const auto& r : s.records) recorded.insert(r.cgroup_id);
  for (const auto& [cg, m] : s.entries) {
    if (m.kind != EGR_CG_SANDBOX) continue;
    ++c.sandbox_entries;
    ++refs[m.policy_id];
    if (!s.headers.contains(m.policy_id)) ++c.dangling_entries;
    c.entries_without_record += !recorded.contains(cg);
  }
  for (const auto& r : s.records) {
    egr_cgroup_val m{};
    if (!IsSandbox(s.entries, r.cgroup_id, &m)) {
      ++c.records_without_entry;
    } else if (m.policy_id != r.current.policy_id ||
               (r.current.policy && s.headers.contains(m.policy_id) &&
                !MatchesHeader(s.headers, m.policy_id, *r.current.policy))) {
      ++c.records_not_in_force;
    }
  }
  for (const auto& [id, h] : s.headers) {
    uint32_t n = refs.contains(id) ? refs[id] : 0;
    c.unreferenced_headers += n == 0;
    c.wrong_refcounts += n != 0 && n != h.refcount;
  }
  for (const auto& [id, counts] : store.CountKeys()) {
    if (!s.headers.contains(id)) c.orphan_keys += counts.total();
  }
  return c;
}

}  // namespace egressd::control
