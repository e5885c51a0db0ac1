// The proxy's upstream sockets hear only the interface their upstream is
// reached over.  A sandbox in a pod can address the node's own addresses, and
// with CAP_NET_RAW it can forge a datagram with the upstream's address and
// port as its source; the kernel would deliver it to the proxy's connected
// socket (its source matches), leaving c-ares' 16-bit ID and its question
// check as the only guard.  Bound to the route's output device
// (SO_BINDTOIFINDEX, set before connect()), a socket is never matched by a
// packet that arrived on a pod's veth: the forgery is dropped by the kernel
// (UDP NoPorts) before any process reads it.  What this does not cover is in
// docs/dns.md ("Forged answers").
#ifndef EGRESSD_USERSPACE_DNS_UPSTREAM_SOCKET_H_
#define EGRESSD_USERSPACE_DNS_UPSTREAM_SOCKET_H_

#include <sys/socket.h>

#include <ares.h>

#include "absl/status/statusor.h"

namespace egressd::dns {

// The interface index the kernel's routing table sends `dst` over (netlink
// RTM_GETROUTE in the caller's network namespace; `lo` for a local address).
absl::StatusOr<int> RouteOutputInterface(const sockaddr* dst, socklen_t len);

// c-ares socket functions whose connect() first binds the socket to
// RouteOutputInterface(destination); a socket that cannot be bound is not
// connected (c-ares tries the next server; the client gets SERVFAIL).
const ares_socket_functions* InterfaceBoundSocketFunctions();

}  // namespace egressd::dns

#endif  // EGRESSD_USERSPACE_DNS_UPSTREAM_SOCKET_H_
