// via-dev: a send to ADDR forced out of a named interface, the ways an
// unprivileged process can name one: SO_BINDTODEVICE, IP_UNICAST_IF /
// IPV6_UNICAST_IF, or an IP_PKTINFO / IPV6_PKTINFO cmsg carrying its ifindex.
// Aimed at 127.0.0.1 / ::1 it asks loopback traffic to leave the netns.
#include <arpa/inet.h>
#include <net/if.h>

#include <cerrno>
#include <cstring>

#include "probe_common.h"

namespace egressd::probe {
namespace {

// The socket option a mode sets before connecting or sending; false if the
// mode is the cmsg form (set per message) or the option failed (errno set).
bool SetDeviceOption(int fd, int family, const std::string& mode, const std::string& ifname,
                     unsigned ifindex) {
  if (mode == "bindtodevice") {
    return setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, ifname.c_str(), ifname.size()) == 0;
  }
  if (mode == "unicast-if") {
    if (family == AF_INET) {
      uint32_t be = htonl(ifindex);  // IP_UNICAST_IF takes the index in network order
      return setsockopt(fd, IPPROTO_IP, IP_UNICAST_IF, &be, sizeof(be)) == 0;
    }
    int idx = int(ifindex);
    return setsockopt(fd, IPPROTO_IPV6, IPV6_UNICAST_IF, &idx, sizeof(idx)) == 0;
  }
  return true;  // pktinfo: nothing on the socket
}

ssize_t SendWithPktinfo(int fd, const Target& t, unsigned ifindex, const std::string& payload) {
  iovec iov{const_cast<char*>(payload.data()), payload.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(in6_pktinfo))] = {};
  msghdr msg{};
  msg.msg_name = const_cast<sockaddr_storage*>(&t.sa);
  msg.msg_namelen = t.len;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  cmsghdr* c = reinterpret_cast<cmsghdr*>(control);
  if (t.family == AF_INET) {
    msg.msg_controllen = CMSG_SPACE(sizeof(in_pktinfo));
    c->cmsg_level = IPPROTO_IP;
    c->cmsg_type = IP_PKTINFO;
    c->cmsg_len = CMSG_LEN(sizeof(in_pktinfo));
    in_pktinfo pi{};
    pi.ipi_ifindex = int(ifindex);
    std::memcpy(CMSG_DATA(c), &pi, sizeof(pi));
  } else {
    msg.msg_controllen = CMSG_SPACE(sizeof(in6_pktinfo));
    c->cmsg_level = IPPROTO_IPV6;
    c->cmsg_type = IPV6_PKTINFO;
    c->cmsg_len = CMSG_LEN(sizeof(in6_pktinfo));
    in6_pktinfo pi{};
    pi.ipi6_ifindex = ifindex;
    std::memcpy(CMSG_DATA(c), &pi, sizeof(pi));
  }
  return sendmsg(fd, &msg, MSG_NOSIGNAL);
}

}  // namespace

// via-dev MODE ADDR PORT IF [--tcp]
void OpViaDev(const Op& op) {
  const std::string& mode = op.pos[0];
  Target t;
  uint16_t port = 0;
  ParsePort(op.pos[2], &port);
  MakeTarget(op.pos[1], port, false, &t);
  const std::string& ifname = op.pos[3];
  Json j = TargetLine(op, t);
  j.Str("mode", mode).Str("dev", ifname);
  const bool tcp = op.Flag("tcp");
  j.Str("proto", tcp ? "tcp" : "udp");
  if (mode != "bindtodevice" && mode != "unicast-if" && mode != "pktinfo") {
    return j.Err(EINVAL, "mode").Emit();
  }
  unsigned ifindex = if_nametoindex(ifname.c_str());
  if (ifindex == 0) return j.Err(errno, "if_nametoindex").Emit();
  if (tcp && mode == "pktinfo") return j.Err(EINVAL, "mode").Emit();  // a datagram cmsg
  Fd fd(socket(t.family, (tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  if (!SetDeviceOption(fd.get(), t.family, mode, ifname, ifindex)) return j.Err(errno, "setsockopt").Emit();
  const std::string payload = op.Str("payload", kDefaultPayload);
  const int timeout_ms = op.Int("timeout-ms", kDefaultTimeoutMs);
  if (tcp) {
    int err = ConnectWithin(fd.get(), t, timeout_ms);
    if (err != 0) return j.Err(err, "connect").Emit();
    std::string stage;
    err = EchoRoundTrip(fd.get(), payload, timeout_ms, &stage);
    if (err != 0) return j.Err(err, stage).Emit();
    return j.Ok().Bool("echo", true).Emit();
  }
  ssize_t n = mode == "pktinfo" ? SendWithPktinfo(fd.get(), t, ifindex, payload)
                                : sendto(fd.get(), payload.data(), payload.size(), MSG_NOSIGNAL,
                                         reinterpret_cast<const sockaddr*>(&t.sa), t.len);
  if (n < 0) return j.Err(errno, mode == "pktinfo" ? "sendmsg" : "sendto").Emit();
  j.Ok().Emit();
}

}  // namespace egressd::probe
