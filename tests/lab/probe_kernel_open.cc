// Connections the kernel opens for a process, and sockets that change hands:
//   mptcp ADDR PORT [--hold-ms N] [--until-subflow [--linger-ms M]]  an
//       MPTCP connection; echoes, then keeps echoing for N ms while the path
//       manager opens subflows to addresses the server announces; "subflows"
//       is MPTCP_INFO's count of subflows the path manager created
//       (attempted, not necessarily established); --until-subflow stops M ms
//       (default 0) after the first, so a slow path manager (an emulated
//       guest) gets the whole hold and a quick one is not waited for
//   mptcp-serve PORT               MPTCP echo server on 0.0.0.0:PORT (prints
//       {"state":"listening"} when ready; serves until killed)
//   scm-give PATH                  makes a TCP socket, offers it on the unix
//       socket PATH ({"state":"listening"}), hands it to one client over
//       SCM_RIGHTS and exits
//   scm-connect PATH ADDR PORT     receives a socket from PATH, then connects
//       it to ADDR PORT and echoes
#include <linux/mptcp.h>
#include <poll.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

#include "probe_common.h"

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif
#ifndef SOL_MPTCP
#define SOL_MPTCP 284
#endif

namespace egressd::probe {
namespace {

int ExtraSubflows(int fd) {
  mptcp_info info{};
  socklen_t len = sizeof(info);
  if (getsockopt(fd, SOL_MPTCP, MPTCP_INFO, &info, &len) != 0) return -1;
  return info.mptcpi_subflows;
}

sockaddr_un UnixAddr(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  return a;
}

}  // namespace

void OpMptcp(const Op& op) {
  Target t;
  uint16_t port = 0;
  ParsePort(op.pos[1], &port);
  MakeTarget(op.pos[0], port, false, &t);
  Json j = TargetLine(op, t);
  Fd fd(socket(t.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_MPTCP));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  const int timeout = op.Int("timeout-ms", kDefaultTimeoutMs);
  int err = ConnectWithin(fd.get(), t, timeout);
  if (err != 0) return j.Err(err, "connect").Emit();
  std::string stage;
  const std::string payload = op.Str("payload", kDefaultPayload);
  const long long until = NowMs() + op.Int("hold-ms", 0);
  int rounds = 0, subflows = 0;
  long long stop_at = -1;  // set when the first subflow appears under --until-subflow
  do {
    err = EchoRoundTrip(fd.get(), payload, timeout, &stage);
    if (err != 0) return j.Err(err, stage).Emit();
    ++rounds;
    subflows = ExtraSubflows(fd.get());
    if (subflows > 0 && op.Flag("until-subflow") && stop_at < 0)
      stop_at = NowMs() + op.Int("linger-ms", 0);
    if (stop_at >= 0 && NowMs() >= stop_at) break;
    pollfd none{-1, 0, 0};
    poll(&none, 0, 20);  // the attacker's own pace between rounds
  } while (NowMs() < until);
  j.Ok().Bool("echo", true).Int("rounds", rounds).Int("subflows", subflows).Emit();
}

void OpMptcpServe(const Op& op) {
  uint16_t port = 0;
  ParsePort(op.pos[0], &port);
  Json j(op.name);
  Fd l(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_MPTCP));
  if (!l.ok()) return j.Err(errno, "socket").Emit();
  int on = 1;
  setsockopt(l.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (bind(l.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return j.Err(errno, "bind").Emit();
  if (listen(l.get(), 16) != 0) return j.Err(errno, "listen").Emit();
  Json(op.name).Str("state", "listening").Emit();
  for (;;) {
    Fd c(accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!c.ok()) continue;
    char buf[2048];
    for (;;) {
      ssize_t n = recv(c.get(), buf, sizeof(buf), 0);
      if (n <= 0 || send(c.get(), buf, n, MSG_NOSIGNAL) != n) break;
    }
  }
}

void OpScmGive(const Op& op) {
  Json j(op.name);
  Fd give(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!give.ok()) return j.Err(errno, "socket").Emit();
  Fd l(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un a = UnixAddr(op.pos[0]);
  unlink(a.sun_path);
  if (bind(l.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return j.Err(errno, "bind").Emit();
  if (listen(l.get(), 1) != 0) return j.Err(errno, "listen").Emit();
  Json(op.name).Str("state", "listening").Emit();
  Fd c(accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!c.ok()) return j.Err(errno, "accept").Emit();
  char one = 'x';
  iovec iov{&one, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  int fd = give.get();
  std::memcpy(CMSG_DATA(cm), &fd, sizeof(fd));
  if (sendmsg(c.get(), &msg, MSG_NOSIGNAL) != 1) return j.Err(errno, "sendmsg").Emit();
  // The receiver closes its end once it is done with the socket.
  char b;
  (void)!recv(c.get(), &b, 1, 0);
  j.Ok().Emit();
}

void OpScmConnect(const Op& op) {
  Target t;
  uint16_t port = 0;
  ParsePort(op.pos[2], &port);
  MakeTarget(op.pos[1], port, false, &t);
  Json j = TargetLine(op, t);
  Fd u(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un a = UnixAddr(op.pos[0]);
  if (connect(u.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return j.Err(errno, "unix-connect").Emit();
  char one;
  iovec iov{&one, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (recvmsg(u.get(), &msg, MSG_CMSG_CLOEXEC) != 1) return j.Err(errno, "recvmsg").Emit();
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  if (!cm || cm->cmsg_type != SCM_RIGHTS) return j.Err(EPROTO, "recvmsg").Emit();
  int raw;
  std::memcpy(&raw, CMSG_DATA(cm), sizeof(raw));
  Fd fd(raw);
  const int timeout = op.Int("timeout-ms", kDefaultTimeoutMs);
  int err = ConnectWithin(fd.get(), t, timeout);
  if (err != 0) return j.Err(err, "connect").Emit();
  std::string stage;
  err = EchoRoundTrip(fd.get(), op.Str("payload", kDefaultPayload), timeout, &stage);
  if (err != 0) return j.Err(err, stage).Emit();
  j.Ok().Bool("echo", true).Emit();
}

}  // namespace egressd::probe
