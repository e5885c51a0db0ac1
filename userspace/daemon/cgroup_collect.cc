// A sandbox whose cgroup vanished while the daemon runs is collected at once
// (cgroup_gone_watch.h tells us), the way `egressctl sandbox remove` does:
// its sandbox table entry, its policy reference (the policy goes with its
// last one), its DNS endpoint and guard, its learned addresses and its
// record, then an audit `removed` record saying why.  No process can run in
// a removed cgroup, so nothing is opened.  While the daemon is down the next
// start's reconcile collects such sandboxes instead (control/reconcile.h).
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "maps/if_sandbox_table.h"
#include "userspace/audit/lifecycle.h"
#include "userspace/common/cgroup_tree.h"
#include "userspace/control/registry.h"
#include "userspace/daemon/daemon.h"

namespace egressd::daemon {

absl::Status Daemon::StartCollecting() {
  gone_watch_ = std::make_unique<CgroupGoneWatch>(io_, *records_,
                                                  [this](uint64_t id) { CollectVanished(id); });
  return gone_watch_->Start();
}

void Daemon::CollectVanished(uint64_t cgroup_id) {
  // Told twice (a watch and a rescan), or the cgroup's remover (egressctl
  // run) unregistered it first: nothing is left to collect.
  auto rec = records_->Load(cgroup_id);
  if (rec.ok() && !rec->has_value()) {
    if (proxy_) proxy_->Stop(cgroup_id);
  TrimAfterStop();
    return;
  }
  // No cgroup (registered by interface alone): never collected as one.
  if (maps::IsInterfaceSandboxId(cgroup_id)) return;
  // The watch said so; the kernel must agree before anything goes.
  if (auto exists = CgroupExists(cgroup_id); !exists.ok() || *exists) {
    spdlog::warn("cgroup {}: reported removed but {}: kept", cgroup_id,
                 exists.ok() ? "it exists" : exists.status().ToString());
    if (exists.ok() && gone_watch_ && rec.ok()) gone_watch_->Watch(cgroup_id, (*rec)->cgroup_path);
    return;
  }
  std::string path, id_text;
  control::Labels labels;
  if (rec.ok()) {
    path = (*rec)->cgroup_path;
    labels = (*rec)->labels;
    if (auto id = ApiIdOf(**rec)) {
      id_text = *id;
      index_.erase(*id);
    }
  }
  if (proxy_) proxy_->Stop(cgroup_id);
  TrimAfterStop();
  if (absl::Status s = IndexedRegistry().Unregister(cgroup_id); !s.ok()) {
    // The next start's reconcile collects what is left (a dead cgroup's
    // entry and record go there).
    spdlog::error("cgroup {} ({}) was removed but collecting its sandbox failed: {}", cgroup_id, path, s.ToString());
    return;
  }
  nlohmann::json j = audit::SandboxJson("removed", cgroup_id, "egressd", path, labels);
  j["reason"] = "cgroup removed";
  if (!id_text.empty()) j["api_id"] = id_text;
  audit_->Submit(j, cgroup_id);
  spdlog::info("sandbox {}{}: cgroup {} removed: collected (entry, policy reference, DNS endpoint, learned "
               "addresses, record)",
               cgroup_id, id_text.empty() ? "" : absl::StrCat(" (", id_text, ")"), path);
}

}  // namespace egressd::daemon
