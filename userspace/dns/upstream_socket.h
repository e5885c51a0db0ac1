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

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/dns/upstream_route.h"
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
//
// c-ares 1.18 opens a UDP socket for a query when none is open and closes it
// when its last query is answered, so at a steady rate where queries rarely
// overlap every query had its own socket: a fresh random source port each
// (the defence against forged answers that per-query ports give), but the
// setup before its query could leave (socket, a netlink route lookup, a
// probe socket for the source address, bind, the guard's map write,
// connect: ~20 system calls) was on the query's path: most of the proxy's
// added p50 at 1k queries/s (bench/results/2026-12-03-dns-notes.md).  With a
// single server the UDP sockets are prepared ahead instead: a few ready
// ones (routed, bound and connected exactly as above: a UDP connect()
// sends nothing), each used for one socket's life as c-ares would have used
// a fresh one and then closed; the loop prepares the next once c-ares
// closed one (its query answered) or found none ready (`refill`).  A ready
// socket is guarded when it is prepared, before connect(), and unguarded
// after its close: nothing of a sandbox's reaches it while it waits either
// (what reached its port between bind() and the guard is read and dropped
// before it is ready), and taking one makes no system call on the query's
// path.  A killed proxy leaves the guards of its ready sockets, as of those
// in use; the next start removes them (no socket holds their port:
// KernelUpstreamGuard::Open).  One routed longer than kReadyMaxAge ago is
// not used (the route may have changed): closed, and a fresh one made the
// usual way.  (Preparing and closing them on a thread of their own instead
// cost more in wake-ups than it took off the loop: same notes, section 4.)
struct GuardedSockets {
  UpstreamGuard* guard = nullptr;
  std::map<int, std::pair<net::IpAddr, uint16_t>> held;  // fd -> its guard (ready or in use)

  // The one UDP server sockets are prepared for (unset: none prepared).
  std::optional<sockaddr_storage> ready_server;
  socklen_t ready_server_len = 0;
  // Schedules Refill() on the channel's loop, after the current handler.
  std::function<void()> refill;
  struct Ready {
    int fd;  // its guard in `held`
    std::chrono::steady_clock::time_point routed;  // its route's lookup
  };
  std::vector<Ready> ready;
  std::set<int> taken;  // handed to c-ares from `ready`, not yet connected
  static constexpr size_t kReadySockets = 2;
  static constexpr std::chrono::milliseconds kReadyMaxAge{1000};
  uint64_t ready_used = 0, fresh_made = 0;  // UDP sockets c-ares got each way

  // The server's route, looked up once per kRouteMaxAge rather than per
  // socket: per socket, the lookup was a
  // netlink socket and a probe socket (9 of the ~20 system calls of a
  // socket's life; serve's CPU per query -15 to -25%, same notes, section 4).
  static constexpr std::chrono::milliseconds kRouteMaxAge = kReadyMaxAge / 2;
  std::optional<UpstreamRoute> route;
  uint64_t route_lookups = 0;

  // The one server's route: `route`, looked up again once older than
  // kRouteMaxAge.  Ready sockets and sockets made for a query (a burst that
  // used the ready ones) both take it.
  absl::StatusOr<const UpstreamRoute*> ServerRoute();
  // Prepares sockets until kReadySockets are ready (or one fails: the next
  // query makes its own and reports why).
  void Refill();
  // Closes the ready ones and removes their guards.
  void Drain();
};

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
