#include "userspace/dns/upstream_route.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

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

namespace {

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

}  // namespace

absl::StatusOr<UpstreamRoute> LookupUpstreamRoute(const sockaddr* addr, socklen_t len) {
  auto ifindex = RouteOutputInterface(addr, len);
  if (!ifindex.ok()) return ifindex.status();
  UpstreamRoute r;
  // An upstream on one of the node's own addresses other than loopback is
  // routed over `lo`, but its answers are matched against the device that
  // holds the address, never `lo`: a socket bound to `lo` hears none of them
  // (dns_upstream_guard_test found it).  Such a socket is bound to no device;
  // the kernel guard is what keeps sandboxes out of it.
  r.ifindex = *ifindex == kLoopbackIfindex && !IsLoopback(addr) ? 0 : *ifindex;
  if (absl::Status s = RouteSource(addr, len, r.ifindex, &r.src, &r.src_len); !s.ok()) return s;
  r.looked_up = std::chrono::steady_clock::now();
  return r;
}

absl::StatusOr<std::pair<net::IpAddr, uint16_t>> BindAsRouted(int fd, const UpstreamRoute& route) {
  auto failed = [](int e, std::string what) -> absl::Status {
    absl::Status s = absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(e)));
    errno = e;
    return s;
  };
  const int index = route.ifindex;
  if (index != 0 && setsockopt(fd, SOL_SOCKET, SO_BINDTOIFINDEX, &index, sizeof(index)) != 0) {
    const int e = errno;
    return failed(e, absl::StrCat("binding to interface ", index));
  }
  // Bound to one address, the socket hears that address only: its guard
  // names everything it can be reached on.
  if (bind(fd, reinterpret_cast<const sockaddr*>(&route.src), route.src_len) != 0) {
    const int e = errno;
    return failed(e, absl::StrCat("bind to ", AddrOf(route.src).first.ToString()));
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof(bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen) != 0) {
    const int e = errno;
    return failed(e, "getsockname");
  }
  return AddrOf(bound);
}

}  // namespace egressd::dns
