// UDP operations: udp-connected, udp-sendto, udp-sendmsg, udp-sendmmsg,
// rthdr6 (IPv6 routing header), lsrr4 (IPv4 loose/strict source route).
#include <arpa/inet.h>
#include <poll.h>

#include <cerrno>
#include <cstring>

#include "probe_common.h"

namespace egressd::probe {
namespace {

// Socket for unconnected sends: dual-stack AF_INET6 for a v6 (or ::ffff:) target.
int DatagramSocketFor(int family) {
  int fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0 && family == AF_INET6) {
    int zero = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  }
  return fd;
}

Target TargetAt(const Op& op, size_t i) {
  Target t;
  uint16_t port = 0;
  ParsePort(op.pos[i + 1], &port);
  MakeTarget(op.pos[i], port, false, &t);
  return t;
}

void FinishSend(Json& j, const Op& op, int fd, ssize_t n, const Target& t, const char* stage) {
  if (n < 0) return j.Err(errno, stage).Emit();
  int recv_err = 0;
  const bool echo = WaitEcho(fd, op.Int("wait-ms", kDefaultWaitMs), &t, &recv_err);
  j.Ok().Bool("echo", echo);
  // What an ICMP error told a connected socket (a reject at the veth).
  if (recv_err) j.Str("recv_errno", ErrName(recv_err));
  j.Emit();
}

// With --tcp: the same option on a TCP socket, then a (non-blocking) connect.
void TcpWithOption(Json& j, const Op& op, const Target& t, int level, int name,
                   const void* val, socklen_t len) {
  j.Str("proto", "tcp");
  Fd fd(socket(t.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  if (setsockopt(fd.get(), level, name, val, len) != 0) return j.Err(errno, "setsockopt").Emit();
  int err = ConnectWithin(fd.get(), t, op.Int("timeout-ms", kDefaultTimeoutMs));
  if (err != 0) return j.Err(err, "connect").Emit();
  j.Ok().Emit();
}

// connect() then send(): the connected-UDP path (connect4/6 judge it once).
void ConnectAndSend(Json& j, const Op& op, int fd, const Target& t) {
  if (connect(fd, reinterpret_cast<const sockaddr*>(&t.sa), t.len) != 0)
    return j.Err(errno, "connect").Emit();
  const std::string payload = op.Str("payload", kDefaultPayload);
  FinishSend(j, op, fd, send(fd, payload.data(), payload.size(), MSG_NOSIGNAL), t, "send");
}

}  // namespace

void OpUdpConnected(const Op& op) {
  Target t = TargetAt(op, 0);
  Json j = TargetLine(op, t);
  Fd fd(DatagramSocketFor(t.family));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  ConnectAndSend(j, op, fd.get(), t);
}

void OpUdpSendto(const Op& op) {
  Target t = TargetAt(op, 0);
  Json j = TargetLine(op, t);
  Fd fd(DatagramSocketFor(t.family));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  const std::string payload = op.Str("payload", kDefaultPayload);
  FinishSend(j, op, fd.get(),
             sendto(fd.get(), payload.data(), payload.size(), MSG_NOSIGNAL,
                    reinterpret_cast<const sockaddr*>(&t.sa), t.len),
             t, "sendto");
}

void OpUdpSendmsg(const Op& op) {
  Target t = TargetAt(op, 0);
  Json j = TargetLine(op, t);
  Fd fd(DatagramSocketFor(t.family));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  std::string payload = op.Str("payload", kDefaultPayload);
  iovec iov{payload.data(), payload.size()};
  msghdr m{};
  m.msg_name = &t.sa;
  m.msg_namelen = t.len;
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  FinishSend(j, op, fd.get(), sendmsg(fd.get(), &m, MSG_NOSIGNAL), t, "sendmsg");
}

// One socket, one sendmmsg() for the whole list. sendmmsg stops at the first
// failing message (returning the count sent, or -1 if it was the first), so the
// rest is retried with further sendmmsg calls to learn each message's fate.
void OpUdpSendmmsg(const Op& op) {
  std::vector<Target> targets;
  bool any_v6 = false;
  for (size_t start = 0; start <= op.pos[0].size();) {
    size_t comma = op.pos[0].find(',', start);
    if (comma == std::string::npos) comma = op.pos[0].size();
    std::string addr;
    uint16_t port = 0;
    ParseAddrPort(op.pos[0].substr(start, comma - start), &addr, &port);
    Target t;
    MakeTarget(addr, port, false, &t);
    any_v6 |= t.family == AF_INET6;
    targets.push_back(t);
    start = comma + 1;
  }
  std::vector<Target> wire = targets;  // as sent: v4 mapped when the socket is AF_INET6
  if (any_v6) {
    for (auto& t : wire) {
      if (t.family == AF_INET) MakeTarget(t.text, t.port, true, &t);
    }
  }
  Fd fd(DatagramSocketFor(any_v6 ? AF_INET6 : AF_INET));
  if (!fd.ok()) {
    Json j(op.name);
    return j.Err(errno, "socket").Emit();
  }
  std::string payload = op.Str("payload", kDefaultPayload);
  const size_t n = wire.size();
  std::vector<iovec> iov(n, iovec{payload.data(), payload.size()});
  std::vector<mmsghdr> msgs(n);
  for (size_t i = 0; i < n; ++i) {
    msgs[i] = mmsghdr{};
    msgs[i].msg_hdr.msg_name = &wire[i].sa;
    msgs[i].msg_hdr.msg_namelen = wire[i].len;
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  std::vector<int> err(n, 0), call(n, 0);
  int first_ret = 0, calls = 0;
  for (size_t i = 0; i < n;) {
    int ret = sendmmsg(fd.get(), &msgs[i], static_cast<unsigned>(n - i), MSG_NOSIGNAL);
    int e = errno;
    ++calls;
    if (calls == 1) first_ret = ret < 0 ? -e : ret;
    if (ret <= 0) {
      err[i] = ret < 0 ? e : EIO;
      call[i++] = calls;
      continue;
    }
    for (int k = 0; k < ret; ++k) call[i++] = calls;
  }
  // Echoes, matched to messages by source.
  std::vector<bool> echo(n, false);
  const long long deadline = NowMs() + op.Int("wait-ms", kDefaultWaitMs);
  while (NowMs() < deadline) {
    if (!WaitFd(fd.get(), POLLIN, static_cast<int>(std::max(0LL, deadline - NowMs())))) break;
    char buf[65536];
    sockaddr_storage src{};
    socklen_t sl = sizeof(src);
    if (recvfrom(fd.get(), buf, sizeof(buf), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&src),
                 &sl) < 0)
      continue;
    for (size_t i = 0; i < n; ++i) {
      if (!echo[i] && SameEndpoint(src, wire[i])) {
        echo[i] = true;
        break;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    Json j = TargetLine(op, targets[i]);
    j.Int("index", static_cast<long long>(i)).Int("count", static_cast<long long>(n));
    j.Int("first_call_ret", first_ret).Int("call", call[i]);
    if (err[i]) j.Err(err[i], call[i] == 1 ? "sendmmsg" : "sendmmsg-retry");
    else j.Ok();
    j.Bool("echo", echo[i]).Emit();
  }
}

// IPv6 UDP with a routing header (IPV6_RTHDR sticky option) whose first hop is
// VIA: connect() and the sock_addr hooks see DST, the packet goes to VIA.
void OpRthdr6(const Op& op) {
  Target t = TargetAt(op, 0);
  Json j = TargetLine(op, t);
  j.Str("via", op.pos[2]);
  in6_addr via;
  std::string via_text = op.pos[2];
  if (via_text.size() > 2 && via_text.front() == '[') via_text = via_text.substr(1, via_text.size() - 2);
  inet_pton(AF_INET6, via_text.c_str(), &via);
  const int type = op.Int("rh-type", 4);
  j.Int("rh_type", type);
  std::vector<uint8_t> rh;
  const auto* dst6 = &reinterpret_cast<const sockaddr_in6*>(&t.sa)->sin6_addr;
  auto put = [&](const in6_addr& a) { rh.insert(rh.end(), a.s6_addr, a.s6_addr + 16); };
  if (type == 4) {  // SRH: segments[0] = final (kernel rewrites it), segments[1] = first hop
    rh = {0, 4, 4, 1, 1, 0, 0, 0};
    put(*dst6);
    put(via);
  } else if (type == 2) {  // MIPv6: one address
    rh = {0, 2, 2, 1, 0, 0, 0, 0};
    put(via);
  } else {  // type 0 (deprecated): one intermediate address
    rh = {0, 2, static_cast<uint8_t>(type), 1, 0, 0, 0, 0};
    put(via);
  }
  if (op.Flag("tcp"))
    return TcpWithOption(j, op, t, IPPROTO_IPV6, IPV6_RTHDR, rh.data(), rh.size());
  Fd fd(socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  if (setsockopt(fd.get(), IPPROTO_IPV6, IPV6_RTHDR, rh.data(), rh.size()) != 0)
    return j.Err(errno, "setsockopt").Emit();
  ConnectAndSend(j, op, fd.get(), t);
}

// IPv4 UDP with IP_OPTIONS loose (or --strict) source route via VIA.
void OpLsrr4(const Op& op) {
  Target t = TargetAt(op, 0);
  Json j = TargetLine(op, t);
  j.Str("via", op.pos[2]);
  in_addr via;
  inet_pton(AF_INET, op.pos[2].c_str(), &via);
  uint8_t opt[8] = {static_cast<uint8_t>(op.Flag("strict") ? 0x89 : 0x83), 7, 4, 0, 0, 0, 0, 0};
  std::memcpy(opt + 3, &via, 4);  // opt[7] stays IPOPT_END
  if (op.Flag("tcp")) return TcpWithOption(j, op, t, IPPROTO_IP, IP_OPTIONS, opt, sizeof(opt));
  Fd fd(socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  if (setsockopt(fd.get(), IPPROTO_IP, IP_OPTIONS, opt, sizeof(opt)) != 0)
    return j.Err(errno, "setsockopt").Emit();
  ConnectAndSend(j, op, fd.get(), t);
}

}  // namespace egressd::probe
