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
#include "maps/if_sandbox_table.h"
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
                "%u refcount(s) fixed; %u unreferenced polic(ies) and %u orphan key(s) collected; %u corrupt record(s) set aside; "
                "%u sandbox(es) of vanished interfaces collected; %u interface entr(ies) fixed\n",
                rec->records_dropped, rec->records_reverted, rec->records_repaired, rec->records_created,
                rec->dead_cgroups, rec->refcounts_fixed, rec->headers_collected, rec->keys_collected,
                rec->records_quarantined, rec->dead_interfaces, rec->interface_entries_fixed);
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

}  // namespace egressd::cli
