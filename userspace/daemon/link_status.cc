// The links the daemon's enforcement rests on, verified in the kernel
// (loader/link_check.h) at start, in /v1/status and on every /readyz: a
// detached link makes the daemon not ready, naming it.  Start loads (a new
// link in the detached one's pin) instead of adopting when one is not in
// force, so a restart restores it, as `egressctl load` does.
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loader/link_check.h"
#include "userspace/daemon/daemon.h"

namespace egressd::daemon {

nlohmann::json Daemon::LinksJson(std::vector<std::string>* missing) {
  nlohmann::json j = nlohmann::json::object();
  auto links = CheckCgroupLinks(options_.paths);
  if (!links.ok()) {
    if (missing) missing->push_back(absl::StrCat("links cannot be verified: ", links.status().message()));
    return {{"error", std::string(links.status().message())}};
  }
  for (const auto& l : *links) {
    j[l.name] = l.attached ? nlohmann::json("attached") : nlohmann::json(l.problem);
  }
  const std::vector<std::string> detached = DetachedLinks(*links);
  if (missing && !detached.empty()) {
    missing->push_back(absl::StrCat("link(s) not in force at the cgroup2 root (restart egressd or run `egressctl "
                                    "load` to re-attach): ",
                                    absl::StrJoin(detached, "; ")));
  }
  return j;
}

bool Daemon::LinksInForce() {
  auto links = CheckCgroupLinks(options_.paths);
  if (!links.ok()) {
    spdlog::warn("links cannot be verified: {}: loading", links.status().ToString());
    return false;
  }
  const std::vector<std::string> detached = DetachedLinks(*links);
  if (detached.empty()) return true;
  spdlog::warn("pinned link(s) not in force, loading to re-attach them: {}", absl::StrJoin(detached, "; "));
  return false;
}

}  // namespace egressd::daemon
