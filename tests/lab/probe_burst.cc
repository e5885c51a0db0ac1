// Bursts for the audit trail's flood tests: many sends or connects as fast as
// one process makes them, reported as counts in one JSON line.
#include <arpa/inet.h>
#include <errno.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "probe_common.h"

namespace egressd::probe {
namespace {

bool BurstTarget(const Op& op, Target* t, long long* n) {
  uint16_t port = 0;
  if (!ParsePort(op.pos[1], &port) || !MakeTarget(op.pos[0], port, false, t)) return false;
  *n = std::atoll(op.pos[2].c_str());
  return *n > 0;
}

}  // namespace

// udp-burst ADDR PORT N: N sendto() on one socket.
void OpUdpBurst(const Op& op) {
  Target t;
  long long n = 0;
  Json j(op.name);
  if (!BurstTarget(op, &t, &n)) return j.Err(EINVAL, "args").Emit();
  Fd fd(socket(t.family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  long long sent = 0, refused = 0, other = 0;
  const char byte = 'x';
  for (long long i = 0; i < n; ++i) {
    if (sendto(fd.get(), &byte, 1, MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&t.sa), t.len) == 1)
      ++sent;
    else if (errno == EPERM)
      ++refused;
    else
      ++other;
  }
  j.Str("dst", t.text).Int("port", t.port).Int("sent", sent).Int("refused", refused).Int("other", other);
  j.Ok().Emit();
}

// udp-pace ADDR PORT [--interval-ms N] [--count K]: a QUIC-style sender, one
// unconnected socket sending one datagram every N ms with sendto(), a line
// per send (flushed, so a test reads them while it runs).
void OpUdpPace(const Op& op) {
  Target t;
  uint16_t port = 0;
  ParsePort(op.pos[1], &port);  // validated by main
  MakeTarget(op.pos[0], port, false, &t);
  const int interval = op.Int("interval-ms", 100);
  const int count = op.Int("count", 10);
  Fd fd(socket(t.family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return TargetLine(op, t).Err(errno, "socket").Emit();
  for (int i = 1; i <= count; ++i) {
    const long long t0 = NowMs();
    Json j = TargetLine(op, t);
    j.Int("round", i).Int("start_ms", t0);  // CLOCK_MONOTONIC, as hold's rounds
    const char byte = 'q';
    if (sendto(fd.get(), &byte, 1, MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&t.sa), t.len) == 1)
      j.Ok();
    else
      j.Err(errno, "sendto");
    j.Emit();
    if (i < count) {
      const long long left = interval - (NowMs() - t0);
      if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(left));
    }
  }
}

// tcp-burst ADDR PORT N: N sockets, each connect()ed (and closed).
void OpTcpBurst(const Op& op) {
  Target t;
  long long n = 0;
  Json j(op.name);
  if (!BurstTarget(op, &t, &n)) return j.Err(EINVAL, "args").Emit();
  long long connected = 0, refused = 0, other = 0;
  for (long long i = 0; i < n; ++i) {
    Fd fd(socket(t.family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.ok()) return j.Err(errno, "socket").Emit();
    int err = ConnectWithin(fd.get(), t, op.Int("timeout-ms", kDefaultTimeoutMs));
    if (err == 0)
      ++connected;
    else if (err == EPERM)
      ++refused;
    else
      ++other;
  }
  j.Str("dst", t.text).Int("port", t.port).Int("connected", connected).Int("refused", refused).Int("other", other);
  j.Ok().Emit();
}

}  // namespace egressd::probe
