// Where the proxy's upstream sockets leave from: the interface the routing
// table sends the server's address over and the source address that route
// gives, which a socket is bound to before its guard is written
// (upstream_socket.h says why both).
#ifndef EGRESSD_USERSPACE_DNS_UPSTREAM_ROUTE_H_
#define EGRESSD_USERSPACE_DNS_UPSTREAM_ROUTE_H_

#include <sys/socket.h>

#include <chrono>
#include <utility>

#include "absl/status/statusor.h"
#include "userspace/net/ip.h"

namespace egressd::dns {

// The interface index the kernel's routing table sends `dst` over (netlink
// RTM_GETROUTE in the caller's network namespace; `lo` for a local address).
absl::StatusOr<int> RouteOutputInterface(const sockaddr* dst, socklen_t len);

struct UpstreamRoute {
  int ifindex = 0;  // SO_BINDTOIFINDEX (0: bound to none)
  sockaddr_storage src{};
  socklen_t src_len = 0;
  std::chrono::steady_clock::time_point looked_up;
};

// The route to `dst`: its interface (none for an upstream on one of the
// node's own addresses other than loopback: see the .cc) and the source
// address the kernel gives a socket bound to it.
absl::StatusOr<UpstreamRoute> LookupUpstreamRoute(const sockaddr* dst, socklen_t len);

// Binds `fd` to the route's interface and source address (port 0: the
// kernel picks one); returns the address and port it has, what its guard
// must name.  On an error, errno is that of the call that failed.
absl::StatusOr<std::pair<net::IpAddr, uint16_t>> BindAsRouted(int fd, const UpstreamRoute& route);

// The address and port of a socket address.
std::pair<net::IpAddr, uint16_t> AddrOf(const sockaddr_storage& ss);

}  // namespace egressd::dns

#endif  // EGRESSD_USERSPACE_DNS_UPSTREAM_ROUTE_H_
