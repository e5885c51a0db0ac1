// TCP operations: tcp, tfo, uring-connect, so-mark, mapped6, hold.
#include <liburing.h>
#include <netinet/tcp.h>
#include <poll.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "probe_common.h"

namespace egressd::probe {
namespace {

// Target from positional args [i] (address) and [i+1] (port); validated by main.
Target TargetAt(const Op& op, size_t i, bool force_v6 = false) {
  Target t;
  uint16_t port = 0;
  ParsePort(op.pos[i + 1], &port);
  MakeTarget(op.pos[i], port, force_v6, &t);
  return t;
}

// connect + echo on `fd`, reported on `j`.
void ConnectAndEcho(Json& j, int fd, const Target& t, const Op& op) {
  const int timeout = op.Int("timeout-ms", kDefaultTimeoutMs);
  const long long t0 = NowMs();
  int err = ConnectWithin(fd, t, timeout);
  if (err != 0) {
    j.Err(err, "connect").Int("ms", NowMs() - t0).Emit();
    return;
  }
  std::string stage;
  err = EchoRoundTrip(fd, op.Str("payload", kDefaultPayload), timeout, &stage);
  if (err != 0) {
    j.Err(err, stage).Int("ms", NowMs() - t0).Emit();
    return;
  }
  j.Ok().Bool("echo", true).Int("ms", NowMs() - t0).Emit();
}

int StreamSocket(int family) {
  return socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

}  // namespace

void OpTcp(const Op& op) {
  Target t = TargetAt(op, 0);
  Json j = TargetLine(op, t);
  Fd fd(StreamSocket(t.family));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  ConnectAndEcho(j, fd.get(), t, op);
}

void OpMapped6(const Op& op) {
  Target t = TargetAt(op, 0, /*force_v6=*/true);
  Json j = TargetLine(op, t);
  const bool udp = op.Flag("udp") || op.Flag("udp-connected");
  j.Str("proto", udp ? "udp" : "tcp");
  Fd fd(socket(AF_INET6, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  int zero = 0;
  if (setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) != 0)
    return j.Err(errno, "setsockopt").Emit();
  if (!udp) return ConnectAndEcho(j, fd.get(), t, op);
  const std::string payload = op.Str("payload", kDefaultPayload);
  ssize_t n;
  if (op.Flag("udp-connected")) {
    if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&t.sa), t.len) != 0)
      return j.Err(errno, "connect").Emit();
    n = send(fd.get(), payload.data(), payload.size(), MSG_NOSIGNAL);
  } else {
    n = sendto(fd.get(), payload.data(), payload.size(), MSG_NOSIGNAL,
               reinterpret_cast<const sockaddr*>(&t.sa), t.len);
  }
  if (n < 0) return j.Err(errno, "send").Emit();
  j.Ok().Bool("echo", WaitEcho(fd.get(), op.Int("wait-ms", kDefaultWaitMs), &t)).Emit();
}

void OpSoMark(const Op& op) {
  Target t = TargetAt(op, 1);
  Json j = TargetLine(op, t);
  const unsigned mark = static_cast<unsigned>(std::stoul(op.pos[0], nullptr, 0));
  j.Int("mark", mark);
  Fd fd(StreamSocket(t.family));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  if (setsockopt(fd.get(), SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) == 0) {
    j.Str("mark_result", "ok");
  } else {
    j.Str("mark_result", "error").Str("mark_errno", ErrName(errno));
  }
  ConnectAndEcho(j, fd.get(), t, op);
}

void OpTfo(const Op& op) {
  Target t = TargetAt(op, 0);
  Json j = TargetLine(op, t);
  const int timeout = op.Int("timeout-ms", kDefaultTimeoutMs);
  const std::string payload = op.Str("payload", kDefaultPayload);
  Fd fd(StreamSocket(t.family));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  ssize_t n = sendto(fd.get(), payload.data(), payload.size(), MSG_FASTOPEN | MSG_NOSIGNAL,
                     reinterpret_cast<const sockaddr*>(&t.sa), t.len);
  if (n < 0 && errno != EINPROGRESS) return j.Err(errno, "sendto").Emit();
  j.Int("syn_data", n < 0 ? 0 : n);  // bytes the kernel put in the SYN
  if (!WaitFd(fd.get(), POLLOUT, timeout)) return j.Err(ETIMEDOUT, "connect").Emit();
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) return j.Err(err, "connect").Emit();
  // Send what did not ride in the SYN, then expect the whole payload back.
  std::string rest = payload.substr(n > 0 ? n : 0);
  std::string stage = "send";
  if (!rest.empty() && send(fd.get(), rest.data(), rest.size(), MSG_NOSIGNAL) < 0)
    return j.Err(errno, "send").Emit();
  std::string got;
  while (got.size() < payload.size()) {
    if (!WaitFd(fd.get(), POLLIN, timeout)) return j.Err(ETIMEDOUT, "recv").Emit();
    char buf[4096];
    ssize_t r = recv(fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (r == 0) return j.Err(ECONNRESET, "recv").Emit();
    if (r < 0 && errno != EAGAIN) return j.Err(errno, "recv").Emit();
    if (r > 0) got.append(buf, r);
  }
  j.Ok().Bool("echo", got == payload).Emit();
}

void OpUringConnect(const Op& op) {
  Target t = TargetAt(op, 0);
  Json j = TargetLine(op, t);
  const int timeout = op.Int("timeout-ms", kDefaultTimeoutMs);
  io_uring ring;
  int rc = io_uring_queue_init(4, &ring, 0);
  if (rc < 0) return j.Err(-rc, "io_uring_setup").Emit();
  Fd fd(socket(t.family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.ok()) {
    io_uring_queue_exit(&ring);
    return j.Err(errno, "socket").Emit();
  }
  __kernel_timespec ts{timeout / 1000, (timeout % 1000) * 1000000LL};
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  io_uring_prep_connect(sqe, fd.get(), reinterpret_cast<const sockaddr*>(&t.sa), t.len);
  sqe->flags |= IOSQE_IO_LINK;
  sqe->user_data = 1;
  io_uring_sqe* to = io_uring_get_sqe(&ring);
  io_uring_prep_link_timeout(to, &ts, 0);
  to->user_data = 2;
  rc = io_uring_submit(&ring);
  if (rc < 0) {
    io_uring_queue_exit(&ring);
    return j.Err(-rc, "io_uring_submit").Emit();
  }
  int connect_res = 1;  // not seen yet
  for (int seen = 0; seen < 2; ++seen) {
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec wait{timeout / 1000 + 2, 0};
    if (io_uring_wait_cqe_timeout(&ring, &cqe, &wait) < 0 || !cqe) break;
    if (cqe->user_data == 1) connect_res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
  }
  io_uring_queue_exit(&ring);
  j.Int("cqe_res", connect_res);
  if (connect_res == 1) return j.Err(ETIMEDOUT, "io_uring_wait").Emit();
  if (connect_res == -ECANCELED) return j.Err(ETIMEDOUT, "connect").Emit();  // link timeout
  if (connect_res < 0) return j.Err(-connect_res, "connect").Emit();
  std::string stage;
  int err = EchoRoundTrip(fd.get(), op.Str("payload", kDefaultPayload), timeout, &stage);
  if (err != 0) return j.Err(err, stage).Emit();
  j.Ok().Bool("echo", true).Emit();
}

// Sends "round i\n" and reads until that line comes back; echoes of earlier
// rounds that arrive late (after a policy flip) are skipped. 0 or an errno.
static int HoldRound(int fd, int i, int timeout_ms, std::string* inbuf, std::string* stage) {
  const std::string line = "round " + std::to_string(i) + "\n";
  const long long deadline = NowMs() + timeout_ms;
  *stage = "send";
  if (send(fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) return errno;
  *stage = "recv";
  for (;;) {
    if (size_t at = inbuf->find(line); at != std::string::npos) {
      inbuf->erase(0, at + line.size());
      return 0;
    }
    if (!WaitFd(fd, POLLIN, static_cast<int>(std::max(0LL, deadline - NowMs())))) return ETIMEDOUT;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return ECONNRESET;
    if (n < 0 && errno != EAGAIN && errno != EINTR) return errno;
    if (n > 0) inbuf->append(buf, n);
  }
}

void OpHold(const Op& op) {
  Target t = TargetAt(op, 0);
  const int interval = op.Int("interval-ms", 200);
  const int count = op.Int("count", 10);
  const int timeout = op.Int("timeout-ms", std::max(interval, 500));
  // --udp: a connected UDP socket instead (the lab's UDP servers echo each
  // datagram from the address it was sent to, so the connected socket
  // receives it); its rounds are the same "round i" lines, one a datagram.
  const bool udp = op.Flag("udp");
  Fd fd(udp ? socket(t.family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0) : StreamSocket(t.family));
  {
    Json j = TargetLine(op, t);
    if (udp) j.Str("proto", "udp");
    j.Int("round", 0);
    if (!fd.ok()) return j.Err(errno, "socket").Emit();
    int err = ConnectWithin(fd.get(), t, op.Int("connect-timeout-ms", kDefaultTimeoutMs));
    if (err != 0) return j.Err(err, "connect").Emit();
    j.Ok().Str("stage", "connect").Emit();
  }
  std::string inbuf;
  for (int i = 1; i <= count; ++i) {
    const long long t0 = NowMs();
    Json j = TargetLine(op, t);
    // When the round began (CLOCK_MONOTONIC ms, the clock of every process on
    // the machine): a test tells rounds sent after a policy flip from those
    // still in its output pipe.
    j.Int("round", i).Int("start_ms", t0);
    std::string stage;
    int err = HoldRound(fd.get(), i, timeout, &inbuf, &stage);
    if (err != 0) j.Err(err, stage);
    else j.Ok();
    j.Int("ms", NowMs() - t0).Emit();
    if (i < count) {
      long long left = interval - (NowMs() - t0);
      if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(left));
    }
  }
}

}  // namespace egressd::probe
