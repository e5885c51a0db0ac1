// The kernel guard on the DNS proxy's upstream sockets: each socket's
// address and port in egr_dnsep_v1 (maps/dns_endpoints.h, owner
// kUpstreamGuardOwner), so no sandbox's connect, send or packet reaches it
// (userspace/dns/upstream_socket.h says when each is written and removed).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "maps/dns_endpoints.h"
#include "userspace/dns/upstream_socket.h"

namespace egressd::daemon {

class KernelUpstreamGuard : public dns::UpstreamGuard {
 public:
  // Opens the pinned maps; guards a killed proxy left (no socket holds
  // their port) are removed first.
  static absl::StatusOr<std::shared_ptr<KernelUpstreamGuard>> Open(const std::string& pin_root);

  absl::Status Add(const net::IpAddr& addr, uint16_t port) override;
  void Remove(const net::IpAddr& addr, uint16_t port) override;

 private:
  explicit KernelUpstreamGuard(maps::DnsEndpoints eps) : eps_(std::move(eps)) {}
  maps::DnsEndpoints eps_;
};

}  // namespace egressd::daemon
