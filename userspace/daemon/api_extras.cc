// The daemon's GET /v1/audit and /metrics (issue 14): started after the audit
// host, reported in /v1/status.
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "maps/dns_endpoints.h"
#include "userspace/common/errors.h"
#include "userspace/daemon/daemon.h"
#include "userspace/daemon/handover.h"

namespace egressd::daemon {

absl::Status Daemon::StartApiExtras() {
  audit_route_ = std::make_unique<AuditRoute>(options_.paths, *audit_host_, [this](const std::string& id) {
    auto it = index_.find(id);
    return it == index_.end() ? std::nullopt : std::optional<uint64_t>(it->second);
  });
  // The flag (per node) before the config (shared by every node).
  std::optional<policy::DnsUpstreamSetting> address = deployment_.metrics_address;
  if (!options_.metrics_address.empty()) {
    EGR_ASSIGN_OR_RETURN(address, policy::ParseMetricsAddress(options_.metrics_address));
  }
  if (address) {
    metrics_ = std::make_unique<MetricsServer>(io_, options_.paths, [this] {
      audit::DaemonFigures f;
      if (dns_host_) f.dns_self_test_late_answers = dns_host_->self_test_late_answers();
      return f;
    });
    // Taking over: the old daemon's listener at this address, never a second
    // bind (it would fail while the old one listens, or open a gap after).
    if (taking_over_) {
      for (ReceivedFd& f : taking_over_->fds()) {
        if (f.fd.valid() && f.what.value("what", "") == "metrics" &&
            f.what.value("addr", "") == address->addr.ToString() && f.what.value("port", 0) == address->port) {
          return metrics_->Adopt(address->addr, address->port, f.fd.release());
        }
      }
    }
    EGR_RETURN_IF_ERROR(metrics_->Listen(address->addr, address->port));
  } else if (auto eps = maps::DnsEndpoints::Open(options_.paths.pin_root); eps.ok()) {
    // No listener now: an earlier daemon's guard would refuse a port nothing
    // of ours listens on (another process may bind it later).
    if (absl::Status s = eps->SetOwnGuards({}); !s.ok()) spdlog::warn("metrics: {}", s.ToString());
  }
  return absl::OkStatus();
}

nlohmann::json Daemon::ExtrasStatus() {
  nlohmann::json j;
  j["audit_streams"] = audit_route_ ? audit_route_->streams() : 0;
  if (metrics_) {
    j["metrics"] = {{"address", metrics_->address()}, {"scrapes", metrics_->scrapes()}};
  } else {
    j["metrics"] = nullptr;
  }
  return j;
}

}  // namespace egressd::daemon
