#include "userspace/daemon/upstream_guard.h"

#include <spdlog/spdlog.h>

namespace egressd::daemon {

absl::StatusOr<std::shared_ptr<KernelUpstreamGuard>> KernelUpstreamGuard::Open(const std::string& pin_root) {
  auto eps = maps::DnsEndpoints::Open(pin_root);
  if (!eps.ok()) return eps.status();
  auto stale = eps->RemoveStaleUpstreamGuards();
  if (!stale.ok()) return stale.status();
  if (*stale > 0) spdlog::info("dns: {} stale upstream socket guard(s) removed (no socket held their port)", *stale);
  return std::shared_ptr<KernelUpstreamGuard>(new KernelUpstreamGuard(std::move(*eps)));
}

absl::Status KernelUpstreamGuard::Add(const net::IpAddr& addr, uint16_t port) {
  absl::Status s = eps_.AddUpstreamGuard(addr, port);
  if (s.ok()) spdlog::debug("dns: upstream socket {} port {} guarded", addr.ToString(), port);
  return s;
}

void KernelUpstreamGuard::Remove(const net::IpAddr& addr, uint16_t port) {
  // The socket is closed already: a guard left behind refuses a port nothing
  // of ours holds, and the next start removes it.
  if (absl::Status s = eps_.RemoveUpstreamGuard(addr, port); !s.ok()) spdlog::warn("dns: {}", s.ToString());
}

}  // namespace egressd::daemon
