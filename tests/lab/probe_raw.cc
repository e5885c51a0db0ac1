// Raw-socket operations: raw-udp, raw-icmp, ping-sock. Raw sockets never pass
// the cgroup sock_addr hooks; only cgroup_skb egress sees them. Each line
// says "socket":"created" once socket() succeeded and "send_ret" once
// sendto() returned, so a test tells a socket the kernel refused (nothing
// was attempted) from a send that egressd judged.
#include <netinet/icmp6.h>
#include <netinet/ip_icmp.h>
#include <netinet/udp.h>
#include <poll.h>

#include <cerrno>
#include <cstring>

#include "probe_common.h"

namespace egressd::probe {
namespace {

Json Line(const Op& op, const Target& t, bool with_port) {
  Json j(op.name);
  j.Str("dst", t.text);
  if (with_port) j.Int("port", t.port);
  return j;
}

uint16_t InetChecksum(const uint8_t* p, size_t n) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < n; i += 2) sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
  if (n & 1) sum += static_cast<uint32_t>(p[n - 1] << 8);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return htons(static_cast<uint16_t>(~sum));
}

// Raw sockets want port 0 (IPv6 rejects anything but 0 or the protocol).
Target NoPort(Target t) {
  if (t.family == AF_INET) reinterpret_cast<sockaddr_in*>(&t.sa)->sin_port = 0;
  else reinterpret_cast<sockaddr_in6*>(&t.sa)->sin6_port = 0;
  return t;
}

bool SameAddr(const sockaddr_storage& a, const Target& t) {
  Target with_port = t;
  sockaddr_storage b = a;
  if (b.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&b)->sin_port = 0;
  if (b.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&b)->sin6_port = 0;
  return SameEndpoint(b, NoPort(with_port));
}

// Waits for an echo reply with `id` from the target. `has_ip_header`: IPv4 raw
// sockets deliver the IP header, ping sockets and IPv6 raw sockets do not.
bool WaitIcmpReply(int fd, const Target& t, uint8_t reply_type, uint16_t id, bool check_id,
                   bool has_ip_header, int wait_ms) {
  const long long deadline = NowMs() + wait_ms;
  for (;;) {
    long long left = deadline - NowMs();
    if (left < 0 || !WaitFd(fd, POLLIN, static_cast<int>(left))) return false;
    uint8_t buf[65536];
    sockaddr_storage src{};
    socklen_t sl = sizeof(src);
    ssize_t n = recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&src), &sl);
    if (n <= 0) continue;
    size_t off = has_ip_header ? (buf[0] & 0x0f) * 4u : 0u;
    if (static_cast<size_t>(n) < off + 8) continue;
    const uint8_t* icmp = buf + off;
    uint16_t got_id = static_cast<uint16_t>(icmp[4] << 8 | icmp[5]);
    if (icmp[0] == reply_type && (!check_id || got_id == id) && SameAddr(src, t)) return true;
  }
}

std::vector<uint8_t> EchoRequest(uint8_t type, uint16_t id, bool checksum) {
  static constexpr char kText[] = "egressd-probe";
  std::vector<uint8_t> m(8 + sizeof(kText) - 1, 0);
  m[0] = type;
  m[4] = static_cast<uint8_t>(id >> 8);
  m[5] = static_cast<uint8_t>(id & 0xff);
  m[7] = 1;  // sequence
  std::memcpy(m.data() + 8, kText, sizeof(kText) - 1);
  if (checksum) {
    uint16_t c = InetChecksum(m.data(), m.size());
    std::memcpy(&m[2], &c, 2);
  }
  return m;
}

uint8_t RequestType(bool v6) { return v6 ? ICMP6_ECHO_REQUEST : uint8_t{ICMP_ECHO}; }
uint8_t ReplyType(bool v6) { return v6 ? ICMP6_ECHO_REPLY : uint8_t{ICMP_ECHOREPLY}; }

Target TargetAt(const Op& op, bool with_port) {
  Target t;
  uint16_t port = 0;
  if (with_port) ParsePort(op.pos[1], &port);
  MakeTarget(op.pos[0], port, false, &t);
  return t;
}

}  // namespace

void OpRawUdp(const Op& op) {
  Target t = TargetAt(op, true);
  Json j = Line(op, t, true);
  // An ordinary UDP socket on an ephemeral port gives the raw datagram a source
  // port that receives the echo (and keeps us from answering it with ICMP).
  Fd sink(socket(t.family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  uint16_t sport = static_cast<uint16_t>(40000 + getpid() % 20000);
  if (sink.ok()) {
    sockaddr_storage any{};
    any.ss_family = static_cast<sa_family_t>(t.family);
    socklen_t len = t.family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (bind(sink.get(), reinterpret_cast<sockaddr*>(&any), len) == 0 &&
        getsockname(sink.get(), reinterpret_cast<sockaddr*>(&any), &len) == 0) {
      sport = ntohs(t.family == AF_INET ? reinterpret_cast<sockaddr_in*>(&any)->sin_port
                                        : reinterpret_cast<sockaddr_in6*>(&any)->sin6_port);
    }
  }
  j.Int("sport", sport);
  Fd fd(socket(t.family, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_UDP));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  j.Str("socket", "created");
  if (t.family == AF_INET6) {
    int off = 6;  // kernel fills the UDP checksum
    if (setsockopt(fd.get(), IPPROTO_IPV6, IPV6_CHECKSUM, &off, sizeof(off)) != 0)
      return j.Err(errno, "setsockopt").Emit();
  }
  const std::string payload = op.Str("payload", kDefaultPayload);
  std::vector<uint8_t> pkt(sizeof(udphdr) + payload.size());
  udphdr h{};
  h.source = htons(sport);
  h.dest = htons(t.port);
  h.len = htons(static_cast<uint16_t>(pkt.size()));
  h.check = 0;  // IPv4: no checksum (valid); IPv6: computed by the kernel
  std::memcpy(pkt.data(), &h, sizeof(h));
  std::memcpy(pkt.data() + sizeof(h), payload.data(), payload.size());
  Target raw = NoPort(t);
  ssize_t sent = sendto(fd.get(), pkt.data(), pkt.size(), 0, reinterpret_cast<const sockaddr*>(&raw.sa),
                        raw.len);
  const int send_errno = errno;
  j.Int("send_ret", sent);
  if (sent < 0) return j.Err(send_errno, "sendto").Emit();
  bool echo = sink.ok() && WaitEcho(sink.get(), op.Int("wait-ms", kDefaultWaitMs), &t);
  j.Ok().Bool("echo", echo).Emit();
}

void OpRawIcmp(const Op& op) {
  Target t = TargetAt(op, false);
  Json j = Line(op, t, false);
  const bool v6 = t.family == AF_INET6;
  Fd fd(socket(t.family, SOCK_RAW | SOCK_CLOEXEC, v6 ? int{IPPROTO_ICMPV6} : int{IPPROTO_ICMP}));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  j.Str("socket", "created");
  const uint16_t id = static_cast<uint16_t>(getpid() ^ 0x5a5a);
  // ICMPv6 raw sockets always get their checksum from the kernel.
  std::vector<uint8_t> m = EchoRequest(RequestType(v6), id, !v6);
  ssize_t sent = sendto(fd.get(), m.data(), m.size(), 0, reinterpret_cast<const sockaddr*>(&t.sa), t.len);
  const int send_errno = errno;
  j.Int("send_ret", sent);
  if (sent < 0) return j.Err(send_errno, "sendto").Emit();
  bool echo = WaitIcmpReply(fd.get(), t, ReplyType(v6), id, true, !v6,
                            op.Int("wait-ms", kDefaultWaitMs));
  j.Ok().Bool("echo", echo).Emit();
}

void OpPingSock(const Op& op) {
  Target t = TargetAt(op, false);
  Json j = Line(op, t, false);
  const bool v6 = t.family == AF_INET6;
  Fd fd(socket(t.family, SOCK_DGRAM | SOCK_CLOEXEC, v6 ? int{IPPROTO_ICMPV6} : int{IPPROTO_ICMP}));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();  // EACCES: ping_group_range
  j.Str("socket", "created");
  // The kernel sets the identifier (to the socket's port) and the checksum.
  std::vector<uint8_t> m = EchoRequest(RequestType(v6), 0, false);
  ssize_t sent = sendto(fd.get(), m.data(), m.size(), 0, reinterpret_cast<const sockaddr*>(&t.sa), t.len);
  const int send_errno = errno;
  j.Int("send_ret", sent);
  if (sent < 0) return j.Err(send_errno, "sendto").Emit();
  bool echo = WaitIcmpReply(fd.get(), t, ReplyType(v6), 0, false, false,
                            op.Int("wait-ms", kDefaultWaitMs));
  j.Ok().Bool("echo", echo).Emit();
}

}  // namespace egressd::probe
