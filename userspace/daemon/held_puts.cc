// Held PUTs: a pod_uid whose cgroup does not exist yet is held and applied
// the moment its cgroup appears (inotify via cgroup_watch.h, no polling).
#include "userspace/daemon/daemon.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <set>
#include <utility>

#include <spdlog/spdlog.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "loader/loader.h"
#include "loader/probe.h"
#include "maps/egressd_abi.h"
#include "maps/lpm_keys.h"
#include "maps/sandbox_table.h"
#include "userspace/audit/lifecycle.h"
#include "userspace/common/cgroup_tree.h"
#include "userspace/common/errors.h"
#include "userspace/common/instance_lock.h"
#include "userspace/control/reconcile.h"
#include "userspace/control/registry.h"
#include "userspace/daemon/pod_cgroup.h"
#include "userspace/policy/compiled_policy_json.h"
#include "userspace/policy/yaml_walk.h"

namespace egressd::daemon {

std::vector<std::string> Daemon::KubeletRoots() {
  if (!options_.kubelet_cgroup_roots.empty()) return options_.kubelet_cgroup_roots;
  auto mount = FindCgroup2Mount();
  return mount.ok() ? std::vector<std::string>{*mount} : std::vector<std::string>{};
}

Response Daemon::Hold(const std::string& id, const SandboxRequest& req) {
  // Everything that can be judged without the cgroup is judged now: a
  // held PUT is one that will apply.
  Prepared p = Prepare(id, req);
  if (p.refusal) return *p.refusal;
  if (!p.bad.empty()) return FromStatus(absl::InvalidArgumentError(absl::StrJoin(p.bad, "\n")));
  auto existing = Find(id);
  if (!existing.ok()) return FromStatus(existing.status());
  if (*existing) {
    return FromStatus(absl::AlreadyExistsError(absl::StrCat("sandbox ", id, " is registered for cgroup ",
                                                            (*existing)->cgroup_path, ": DELETE it first")));
  }
  for (const auto& [other, h] : held_) {
    if (other != id && h.request.pod_uid == req.pod_uid && h.error.is_null()) {
      return FromStatus(absl::AlreadyExistsError(
          absl::StrCat("pod_uid ", req.pod_uid, " is held already as sandbox ", other, ": DELETE it first")));
    }
  }
  if (auto refused = CheckNode(id, req, p)) return *refused;
  if (!cgroup_watch_) {
    cgroup_watch_ = std::make_unique<CgroupWatch>(io_, [this] { OnCgroupTreeChange(); });
    if (absl::Status s = cgroup_watch_->Start(); !s.ok()) {
      cgroup_watch_.reset();
      return FromStatus(s);
    }
  }
  held_[id] = Held{req, nullptr};
  spdlog::info("sandbox {}: pod {} has no cgroup yet under {}: held until it appears", id, req.pod_uid,
               absl::StrJoin(KubeletRoots(), ", "));
  // Arms the watches, and applies it at once should the cgroup have
  // appeared since we looked.
  OnCgroupTreeChange();
  auto it = held_.find(id);
  if (it == held_.end()) {
    // Applied in between: answer as the registration did.
    auto r = Get(id);
    if (r.status == 200) r.status = 201;
    return r;
  }
  if (!it->second.error.is_null()) return Response{it->second.error.value("status", 500), it->second.error["body"]};
  return Response{202, PendingJson(id)};
}

void Daemon::OnCgroupTreeChange() {
  if (!cgroup_watch_) return;
  const std::vector<std::string> roots = KubeletRoots();
  // Arm, then look; look again while a level appeared between the two
  // (its children's creations went to no watch).  Bounded by the tree's
  // depth: each round that finds nothing new is one where a level appeared.
  for (int round = 0;; ++round) {
    if (round > 2 * EGR_MAX_CGROUP_DEPTH) {
      spdlog::error("held pod registrations: the cgroup tree kept changing while being watched; waiting for the next event");
      return;
    }
    std::set<std::string> wanted;
    for (const auto& [id, h] : held_) {
      if (!h.error.is_null()) continue;
      for (const auto& root : roots) {
        for (auto& c : PodCgroupCandidates(root, h.request.pod_uid)) wanted.insert(std::move(c));
      }
    }
    if (absl::Status s = cgroup_watch_->Arm(wanted); !s.ok()) {
      spdlog::error("held pod registrations: {}", s.ToString());
    }
    bool changed = false;
    for (auto it = held_.begin(); it != held_.end();) {
      Held& h = it->second;
      if (!h.error.is_null()) {
        ++it;
        continue;
      }
      auto cg = FindPodCgroup(roots, h.request.pod_uid);
      if (absl::IsNotFound(cg.status())) {
        ++it;
        continue;
      }
      changed = true;
      Response r;
      if (cg.ok()) {
        SandboxRequest req = h.request;
        req.cgroup = *cg;
        r = Apply(it->first, req);
      } else {
        r = FromStatus(cg.status());
      }
      if (r.status < 300) {
        spdlog::info("sandbox {}: pod {}'s cgroup {} appeared: applied", it->first, h.request.pod_uid,
                     r.body.value("cgroup", ""));
        ForgetHeld(it->first);
        it = held_.erase(it);
        continue;
      }
      spdlog::error("sandbox {}: pod {}'s cgroup appeared but was not applied: {}", it->first, h.request.pod_uid,
                    r.body.dump());
      h.error = {{"status", r.status}, {"body", r.body}};
      ++it;
    }
    std::set<std::string> remaining;
    for (const auto& [id, h] : held_) {
      if (!h.error.is_null()) continue;
      for (const auto& root : roots) {
        for (auto& c : PodCgroupCandidates(root, h.request.pod_uid)) remaining.insert(std::move(c));
      }
    }
    if (!changed && CgroupWatch::DirsFor(remaining) == cgroup_watch_->watched()) return;
  }
}

nlohmann::json Daemon::PendingJson(const std::string& id) {
  const Held& h = held_.at(id);
  nlohmann::json j = {{"id", id},
                      {"pod_uid", h.request.pod_uid},
                      {"state", h.error.is_null() ? "pending" : "failed"},
                      {"in_kernel", false},
                      {"enforced", false}};
  if (h.error.is_null()) {
    j["waiting_on"] = cgroup_watch_ ? cgroup_watch_->watched() : std::set<std::string>{};
  } else {
    j["error"] = h.error["body"].value("error", nlohmann::json(nullptr));
  }
  control::Labels labels = h.request.labels;
  j["labels"] = labels;
  return j;
}

}  // namespace egressd::daemon
