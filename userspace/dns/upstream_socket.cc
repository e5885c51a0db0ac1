#include "userspace/dns/upstream_socket.h"

#include <netinet/in.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace egressd::dns {

namespace {

ares_socket_t Socket(int family, int type, int protocol, void*) { return socket(family, type | SOCK_CLOEXEC, protocol); }
int Close(ares_socket_t fd, void*) { return close(fd); }

int Connect(ares_socket_t fd, const sockaddr* addr, ares_socklen_t len, void*) {
  auto ifindex = RouteOutputInterface(addr, len);
  if (!ifindex.ok()) {
    spdlog::warn("dns: upstream socket not connected: {}", ifindex.status().ToString());
    errno = ENETUNREACH;
    return -1;
  }
  const int index = *ifindex;
  if (setsockopt(fd, SOL_SOCKET, SO_BINDTOIFINDEX, &index, sizeof(index)) != 0) {
    const int e = errno;
    spdlog::warn("dns: upstream socket not bound to interface {}: {}", index, std::strerror(e));
    errno = e;
    return -1;
  }
  return connect(fd, addr, len);
}

int ConnectFailed(int e, const std::string& why) {
  spdlog::warn("dns: upstream socket not connected: {}", why);
  errno = e;
  return -1;
}

bool SameAddress(const sockaddr* a, socklen_t alen, const sockaddr_storage& b, socklen_t blen) {
  return alen == blen && std::memcmp(a, &b, alen) == 0;
}

// Routes and binds `fd`, guards it, then connects it: a socket made for the
// query at hand (none ready, or not the one server's).  The one server's
// route is the ready sockets' (GuardedSockets::ServerRoute); any other is
// looked up now.
int GuardedConnectFresh(ares_socket_t fd, const sockaddr* addr, ares_socklen_t len, GuardedSockets* g) {
  std::optional<UpstreamRoute> own;
  const UpstreamRoute* route = nullptr;
  if (g->ready_server && SameAddress(addr, len, *g->ready_server, g->ready_server_len)) {
    auto shared = g->ServerRoute();
    if (!shared.ok()) return ConnectFailed(ENETUNREACH, shared.status().ToString());
    route = *shared;
  } else {
    auto looked = LookupUpstreamRoute(addr, len);
    if (!looked.ok()) return ConnectFailed(ENETUNREACH, looked.status().ToString());
    route = &own.emplace(*looked);
  }
  auto bound = BindAsRouted(fd, *route);
  if (!bound.ok()) {
    const int e = errno;
    return ConnectFailed(e, bound.status().ToString());
  }
  const auto [src, port] = *bound;
  // The guard before the first packet (a TCP SYN leaves at connect()).
  if (absl::Status s = g->guard->Add(src, port); !s.ok()) {
    return ConnectFailed(absl::IsAlreadyExists(s) ? EADDRINUSE : EPERM,
                         absl::StrCat("guard for ", src.ToString(), " port ", port, ": ", s.ToString()));
  }
  g->held[fd] = {src, port};
  return connect(fd, addr, len);
}

// Closed first, unguarded after: a guard outlives its socket.
int CloseGuarded(GuardedSockets* g, int fd) {
  const int rc = close(fd);
  if (auto it = g->held.find(fd); it != g->held.end()) {
    g->guard->Remove(it->second.first, it->second.second);
    g->held.erase(it);
  }
  return rc;
}

// c-ares closes a UDP socket once its last query is answered (the answer
// is the client's by then): the next ready one is made after it, off every
// query's path.
int GuardedClose(ares_socket_t fd, void* data) {
  auto* g = static_cast<GuardedSockets*>(data);
  g->taken.erase(fd);
  const int rc = CloseGuarded(g, fd);
  if (g->refill && g->ready.size() < GuardedSockets::kReadySockets) g->refill();
  return rc;
}

// A ready socket for the one server (its family, UDP) when there is one
// young enough, else a fresh one; the loop is asked to prepare the next.
ares_socket_t GuardedSocket(int family, int type, int protocol, void* data) {
  auto* g = static_cast<GuardedSockets*>(data);
  if (g->ready_server && type == SOCK_DGRAM && family == g->ready_server->ss_family) {
    const auto now = std::chrono::steady_clock::now();
    while (!g->ready.empty()) {
      const GuardedSockets::Ready r = g->ready.front();
      g->ready.erase(g->ready.begin());
      if (now - r.routed > GuardedSockets::kReadyMaxAge) {
        CloseGuarded(g, r.fd);
        continue;
      }
      g->taken.insert(r.fd);
      ++g->ready_used;
      return r.fd;
    }
    // None ready (the first query, or a burst used them): this one is made
    // now, the next ready ones once the loop is free.
    if (g->refill) g->refill();
  }
  if (type == SOCK_DGRAM) ++g->fresh_made;
  return socket(family, type | SOCK_CLOEXEC, protocol);
}

// A ready socket is connected to the one server already (routed, bound and
// guarded before it): c-ares connecting it there is done.  Anything else is
// made the usual way.
int GuardedConnect(ares_socket_t fd, const sockaddr* addr, ares_socklen_t len, void* data) {
  auto* g = static_cast<GuardedSockets*>(data);
  if (g->taken.erase(fd) > 0) {
    if (SameAddress(addr, len, *g->ready_server, g->ready_server_len)) return 0;
    // Not the server it was made for (never with one server): c-ares gets
    // an error for it and moves on, as for any socket that cannot connect.
    spdlog::warn("dns: a prepared upstream socket asked to connect elsewhere");
    errno = ENETUNREACH;
    return -1;
  }
  return GuardedConnectFresh(fd, addr, len, g);
}

ares_ssize_t RecvFrom(ares_socket_t fd, void* buf, size_t len, int flags, sockaddr* from, ares_socklen_t* fromlen,
                      void*) {
  return recvfrom(fd, buf, len, flags, from, fromlen);
}

ares_ssize_t SendV(ares_socket_t fd, const iovec* iov, int iovcnt, void*) { return writev(fd, iov, iovcnt); }

const ares_socket_functions kFunctions = {&Socket, &Close, &Connect, &RecvFrom, &SendV};
const ares_socket_functions kGuarded = {&GuardedSocket, &GuardedClose, &GuardedConnect, &RecvFrom, &SendV};

}  // namespace

absl::StatusOr<const UpstreamRoute*> GuardedSockets::ServerRoute() {
  if (!route || std::chrono::steady_clock::now() - route->looked_up >= kRouteMaxAge) {
    ++route_lookups;
    auto r = LookupUpstreamRoute(reinterpret_cast<const sockaddr*>(&*ready_server), ready_server_len);
    if (!r.ok()) {
      route.reset();
      return r.status();
    }
    route = *r;
  }
  return &*route;
}

void GuardedSockets::Refill() {
  if (!ready_server) return;
  const auto* server = reinterpret_cast<const sockaddr*>(&*ready_server);
  while (ready.size() < kReadySockets) {
    auto r = ServerRoute();
    if (!r.ok()) {
      spdlog::warn("dns: upstream socket not prepared: {}", r.status().ToString());
      return;  // the next query makes its own and reports why
    }
    const int fd = socket(server->sa_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return;
    auto bound = BindAsRouted(fd, **r);
    if (!bound.ok()) {
      spdlog::warn("dns: upstream socket not prepared: {}", bound.status().ToString());
      close(fd);
      route.reset();  // looked up again next time: the route may be what failed
      return;
    }
    const auto [src, port] = *bound;
    // Guarded from before its first packet to after its close: no sandbox's
    // packet reaches it, waiting or in use.
    if (absl::Status s = guard->Add(src, port); !s.ok()) {
      spdlog::warn("dns: upstream socket {} port {} not prepared: guard: {}", src.ToString(), port, s.ToString());
      close(fd);
      return;  // the next query makes its own and reports why
    }
    held[fd] = {src, port};
    if (connect(fd, server, ready_server_len) != 0) {
      spdlog::warn("dns: upstream socket not prepared: connect: {}", std::strerror(errno));
      CloseGuarded(this, fd);
      route.reset();
      return;
    }
    // What reached its port between bind() and the guard (a spray at a
    // guessed port) is dropped here, off every query's path: from now on
    // only the server's answers can arrive.
    char drop[512];
    while (recv(fd, drop, sizeof(drop), MSG_DONTWAIT) >= 0) {
    }
    ready.push_back({fd, route->looked_up});
  }
}

void GuardedSockets::Drain() {
  for (const Ready& r : ready) CloseGuarded(this, r.fd);
  ready.clear();
}

const ares_socket_functions* InterfaceBoundSocketFunctions() { return &kFunctions; }
const ares_socket_functions* GuardedSocketFunctions() { return &kGuarded; }

}  // namespace egressd::dns
