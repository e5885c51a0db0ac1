// The proxy's upstream sockets are out of every sandbox's reach, twice over.
//
// 1. A guard in the kernel (GuardedSocketFunctions): before a socket
//    connects, it is bound to the source address its route gives it, and
//    that address and its port are handed to an UpstreamGuard (the daemon
//    writes them to egr_dnsep_v1, owned by no sandbox: the connect/sendmsg
//    hooks refuse every sandbox's connect or send to it and the backstop
//    drops every packet to it, raw sockets included, IPv4 and IPv6).  A
//    sandbox with CAP_NET_RAW that forges an answer with the upstream's
//    address as its source never gets it past its own cgroup's egress hook.
//    The guard is removed after the socket is closed.  A socket whose guard
//    cannot be written is not connected (fails closed: SERVFAIL).
// 2. The socket is bound to the route's output device (SO_BINDTOIFINDEX):
//    a packet that arrived on a pod's veth never matches it (UDP NoPorts).
//    Not for an upstream on a node address other than loopback (routed over
//    `lo`, whose answers a `lo`-bound socket never hears): guard 1 alone.
//
// A connected socket bound to one address hears only that address (the
// kernel matches its local address), so the guarded address and port are
// everything a packet can reach it on.  docs/dns.md ("Forged answers").
#ifndef EGRESSD_USERSPACE_DNS_UPSTREAM_SOCKET_H_
#define EGRESSD_USERSPACE_DNS_UPSTREAM_SOCKET_H_

#include <sys/socket.h>

#include <ares.h>

#include <map>
#include <utility>

#include "absl/status/statusor.h"
#include "userspace/net/ip.h"

namespace egressd::dns {

// Where an upstream socket can be reached, kept from every sandbox.
class UpstreamGuard {
 public:
  virtual ~UpstreamGuard() = default;
  // In force when it returns OK.  AlreadyExists when that address and port
  // are guarded already (another of egressd's sockets holds the port in the
  // other protocol): the socket is not used, c-ares takes a new one.
  virtual absl::Status Add(const net::IpAddr& addr, uint16_t port) = 0;
  virtual void Remove(const net::IpAddr& addr, uint16_t port) = 0;
};

// One c-ares channel's guarded sockets (its socket functions' user data).
struct GuardedSockets {
  UpstreamGuard* guard = nullptr;
  std::map<int, std::pair<net::IpAddr, uint16_t>> held;  // fd -> its guard
};

// The interface index the kernel's routing table sends `dst` over (netlink
// RTM_GETROUTE in the caller's network namespace; `lo` for a local address).
absl::StatusOr<int> RouteOutputInterface(const sockaddr* dst, socklen_t len);

// c-ares socket functions whose connect() first binds the socket to
// RouteOutputInterface(destination); a socket that cannot be bound is not
// connected (c-ares tries the next server; the client gets SERVFAIL).
const ares_socket_functions* InterfaceBoundSocketFunctions();

// The same, and each socket bound to its route's source address and guarded
// (above) before connect(); user data: a GuardedSockets that outlives the
// channel.
const ares_socket_functions* GuardedSocketFunctions();

}  // namespace egressd::dns

#endif  // EGRESSD_USERSPACE_DNS_UPSTREAM_SOCKET_H_
