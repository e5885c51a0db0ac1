#include "userspace/dns/upstream_socket.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

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

ares_ssize_t RecvFrom(ares_socket_t fd, void* buf, size_t len, int flags, sockaddr* from, ares_socklen_t* fromlen,
                      void*) {
  return recvfrom(fd, buf, len, flags, from, fromlen);
}

ares_ssize_t SendV(ares_socket_t fd, const iovec* iov, int iovcnt, void*) { return writev(fd, iov, iovcnt); }

const ares_socket_functions kFunctions = {&Socket, &Close, &Connect, &RecvFrom, &SendV};

}  // namespace

const ares_socket_functions* InterfaceBoundSocketFunctions() { return &kFunctions; }

}  // namespace egressd::dns
