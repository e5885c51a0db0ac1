// Where a sandbox's DNS queries go: its endpoint (an address of either family
// or both, and one port, host order, shared by both).  The kernel steers the
// sandbox's port-53 traffic there (maps/dns_endpoints.h writes egr_dns_v1),
// the proxy listens there (userspace/dns/proxy.h), and the sandbox record
// stores it as "dns"; one type for all three.  An absent family's queries are
// refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "userspace/net/ip.h"

namespace egressd::net {

struct DnsEndpoint {
  std::optional<IpAddr> addr4;
  std::optional<IpAddr> addr6;
  uint16_t port = 0;

  bool operator==(const DnsEndpoint&) const = default;
  // "10.244.0.1:20000 [fd00:244::1]:20000", or "(no address)".
  std::string ToString() const;
};

}  // namespace egressd::net
