#include "userspace/dns/upstream_socket.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <array>
#include <chrono>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "userspace/common/unique_fd.h"

namespace egressd::dns {

absl::StatusOr<int> RouteOutputInterface(const sockaddr* dst, socklen_t len) {
  struct {
    nlmsghdr nh;
    rtmsg rt;
    char attrs[64];
  } req{};
  const void* addr = nullptr;
  size_t alen = 0;
  if (dst->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    addr = &reinterpret_cast<const sockaddr_in*>(dst)->sin_addr;
    alen = 4;
  } else if (dst->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    addr = &reinterpret_cast<const sockaddr_in6*>(dst)->sin6_addr;
    alen = 16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("route lookup: address family ", dst->sa_family));
  }
  req.nh.nlmsg_type = RTM_GETROUTE;
  req.nh.nlmsg_flags = NLM_F_REQUEST;
  req.nh.nlmsg_seq = 1;
  req.rt.rtm_family = static_cast<unsigned char>(dst->sa_family);
  req.rt.rtm_dst_len = static_cast<unsigned char>(alen * 8);
  auto* rta = reinterpret_cast<rtattr*>(req.attrs);
  rta->rta_type = RTA_DST;
  rta->rta_len = static_cast<unsigned short>(RTA_LENGTH(alen));
  std::memcpy(RTA_DATA(rta), addr, alen);
  req.nh.nlmsg_len = static_cast<uint32_t>(NLMSG_LENGTH(sizeof(rtmsg)) + RTA_SPACE(alen));

  UniqueFd fd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!fd.valid()) return absl::InternalError(absl::StrCat("route lookup: netlink socket: ", std::strerror(errno)));
  if (send(fd.get(), &req, req.nh.nlmsg_len, 0) < 0) {
    return absl::InternalError(absl::StrCat("route lookup: netlink send: ", std::strerror(errno)));
  }
  char buf[8192];
  ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
  if (n < 0) return absl::InternalError(absl::StrCat("route lookup: netlink recv: ", std::strerror(errno)));
  for (auto* nh = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(nh, static_cast<unsigned>(n)); nh = NLMSG_NEXT(nh, n)) {
    if (nh->nlmsg_type == NLMSG_ERROR) {
      const int err = -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(nh))->error;
      return absl::UnavailableError(absl::StrCat("route lookup: ", std::strerror(err)));
    }
    if (nh->nlmsg_type != RTM_NEWROUTE) continue;
    auto* rt = reinterpret_cast<rtmsg*>(NLMSG_DATA(nh));
    int attrlen = static_cast<int>(RTM_PAYLOAD(nh));
    for (auto* a = RTM_RTA(rt); RTA_OK(a, attrlen); a = RTA_NEXT(a, attrlen)) {
      if (a->rta_type == RTA_OIF) return *reinterpret_cast<int*>(RTA_DATA(a));
    }
  }
  return absl::UnavailableError("route lookup: no output interface");
}

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

constexpr int kLoopbackIfindex = 1;  // `lo` in every netns

bool IsLoopback(const sockaddr* a) {
  if (a->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  }
  const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
}

// The source address the kernel would give a socket bound to `ifindex` for
// `dst` (port 0): a UDP socket's connect() picks it and sends nothing.
absl::Status RouteSource(const sockaddr* dst, socklen_t len, int ifindex, sockaddr_storage* src, socklen_t* slen) {
  UniqueFd probe(socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!probe.valid()) return absl::InternalError(absl::StrCat("source lookup: socket: ", std::strerror(errno)));
  if ((ifindex != 0 && setsockopt(probe.get(), SOL_SOCKET, SO_BINDTOIFINDEX, &ifindex, sizeof(ifindex)) != 0) ||
      connect(probe.get(), dst, len) != 0) {
    return absl::UnavailableError(absl::StrCat("source lookup: ", std::strerror(errno)));
  }
  *slen = sizeof(*src);
  if (getsockname(probe.get(), reinterpret_cast<sockaddr*>(src), slen) != 0) {
    return absl::InternalError(absl::StrCat("source lookup: getsockname: ", std::strerror(errno)));
  }
  if (src->ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(src)->sin6_port = 0;
  } else {
    reinterpret_cast<sockaddr_in*>(src)->sin_port = 0;
  }
  return absl::OkStatus();
}

// The address and port of a bound socket's name.
std::pair<net::IpAddr, uint16_t> AddrOf(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    std::array<uint8_t, 16> b;
    std::memcpy(b.data(), &a->sin6_addr, 16);
    return {net::IpAddr::V6(b), ntohs(a->sin6_port)};
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
  std::array<uint8_t, 4> b;
  std::memcpy(b.data(), &a->sin_addr, 4);
  return {net::IpAddr::V4(b), ntohs(a->sin_port)};
}

// Routes, binds and (unless `defer_guard`) guards `fd`, then connects it.
// Deferred (a UDP socket prepared ahead: connect() sends nothing), the
// guard is written when c-ares takes the socket, before its first packet
// (TakeReady); `*bound` says what it will name.
int GuardedConnectFresh(ares_socket_t fd, const sockaddr* addr, ares_socklen_t len, GuardedSockets* g,
                        bool defer_guard = false, std::pair<net::IpAddr, uint16_t>* bound_to = nullptr) {
  auto fail = [](int e, const std::string& why) {
    spdlog::warn("dns: upstream socket not connected: {}", why);
    errno = e;
    return -1;
  };
  auto ifindex = RouteOutputInterface(addr, len);
  if (!ifindex.ok()) return fail(ENETUNREACH, ifindex.status().ToString());
  // An upstream on one of the node's own addresses other than loopback is
  // routed over `lo`, but its answers are matched against the device that
  // holds the address, never `lo`: a socket bound to `lo` hears none of them
  // (dns_upstream_guard_test found it).  Such a socket is bound to no device;
  // the kernel guard below is what keeps sandboxes out of it.
  const int index = *ifindex == kLoopbackIfindex && !IsLoopback(addr) ? 0 : *ifindex;
  if (index != 0 && setsockopt(fd, SOL_SOCKET, SO_BINDTOIFINDEX, &index, sizeof(index)) != 0) {
    const int e = errno;
    return fail(e, absl::StrCat("binding to interface ", index, ": ", std::strerror(e)));
  }
  // Bound to one address, the socket hears that address only: the guard
  // below names everything it can be reached on.
  sockaddr_storage local{};
  socklen_t llen = 0;
  if (absl::Status s = RouteSource(addr, len, index, &local, &llen); !s.ok()) return fail(ENETUNREACH, s.ToString());
  if (bind(fd, reinterpret_cast<const sockaddr*>(&local), llen) != 0) {
    const int e = errno;
    return fail(e, absl::StrCat("bind to ", AddrOf(local).first.ToString(), ": ", std::strerror(e)));
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof(bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen) != 0) {
    const int e = errno;
    return fail(e, absl::StrCat("getsockname: ", std::strerror(e)));
  }
  const auto [src, port] = AddrOf(bound);
  if (defer_guard) {
    *bound_to = {src, port};
    return connect(fd, addr, len);
  }
  // The guard before the first packet (a TCP SYN leaves at connect()).
  if (absl::Status s = g->guard->Add(src, port); !s.ok()) {
    return fail(absl::IsAlreadyExists(s) ? EADDRINUSE : EPERM,
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

bool SameAddress(const sockaddr* a, socklen_t alen, const sockaddr_storage& b, socklen_t blen) {
  return alen == blen && std::memcmp(a, &b, alen) == 0;
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
      if (now - r.made > GuardedSockets::kReadyMaxAge) {
        close(r.fd);
        continue;
      }
      // Guarded now, before its first packet; what reached it unguarded
      // while it waited (a forgery sprayed at its port) is read and dropped
      // once the guard keeps every sandbox out.
      if (absl::Status s = g->guard->Add(r.addr, r.port); !s.ok()) {
        spdlog::warn("dns: prepared upstream socket {} port {} not guarded: {}", r.addr.ToString(), r.port,
                     s.ToString());
        close(r.fd);
        continue;
      }
      g->held[r.fd] = {r.addr, r.port};
      char drop[512];
      while (recv(r.fd, drop, sizeof(drop), MSG_DONTWAIT) >= 0) {
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

void GuardedSockets::Refill() {
  if (!ready_server) return;
  const auto* server = reinterpret_cast<const sockaddr*>(&*ready_server);
  while (ready.size() < kReadySockets) {
    const int fd = socket(server->sa_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return;
    std::pair<net::IpAddr, uint16_t> bound;
    if (GuardedConnectFresh(fd, server, ready_server_len, this, /*defer_guard=*/true, &bound) != 0) {
      close(fd);
      return;
    }
    ready.push_back({fd, std::chrono::steady_clock::now(), bound.first, bound.second});
  }
}

void GuardedSockets::Drain() {
  for (const Ready& r : ready) close(r.fd);  // never guarded
  ready.clear();
}

const ares_socket_functions* InterfaceBoundSocketFunctions() { return &kFunctions; }
const ares_socket_functions* GuardedSocketFunctions() { return &kGuarded; }

}  // namespace egressd::dns
