// The daemon's GET /v1/audit and /metrics (issue 14): started after the audit
// host, reported in /v1/status.
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"
#include "userspace/daemon/daemon.h"

namespace egressd::daemon {

absl::Status Daemon::StartApiExtras() {
  audit_route_ = std::make_unique<AuditRoute>(options_.paths, *audit_host_, [this](const std::string& id) {
    auto it = index_.find(id);
    return it == index_.end() ? std::nullopt : std::optional<uint64_t>(it->second);
  });
  if (const auto& a = deployment_.metrics_address) {
    metrics_ = std::make_unique<MetricsServer>(io_, options_.paths);
    EGR_RETURN_IF_ERROR(metrics_->Listen(a->addr, a->port));
  }
  return absl::OkStatus();
}

nlohmann::json Daemon::ExtrasStatus() {
  nlohmann::json j;
  j["audit_streams"] = audit_route_ ? audit_route_->streams() : 0;
  if (metrics_ && deployment_.metrics_address) {
    const auto& a = *deployment_.metrics_address;
    j["metrics"] = {{"address", a.addr.is_v4() ? absl::StrCat(a.addr.ToString(), ":", metrics_->port())
                                                : absl::StrCat("[", a.addr.ToString(), "]:", metrics_->port())},
                    {"scrapes", metrics_->scrapes()}};
  } else {
    j["metrics"] = nullptr;
  }
  return j;
}

}  // namespace egressd::daemon
