// egr-min-relay: the least any user-space DNS proxy at egressd's hop can do,
// to measure what the hop itself adds on this machine (bench/results/
// 2026-12-03-dns-hop-floor.md; bench/README.md's profile list says how to
// run it).  One thread, one epoll, two UDP sockets: the
// sandbox's endpoint and one long-lived socket connected to the upstream.
// A query is read, given the next ID, sent upstream; its answer gets the
// client's ID back and is sent to the client.  No parsing, no policy, no
// map write, no audit, no per-query source port, no guard: none of what
// egressd must do, so whatever p99 it adds over asking the upstream directly
// is the hop's share (two more deliveries and receiver wake-ups per query),
// which no proxy design at this hop can take off.
//
// Its command line mimics `egressctl dns serve` so EGR_BENCH_SERVE_PREFIX
// (bench/profile/dns_speed_ab.sh) can swap it in for the proxy:
//   egr-min-relay dns serve --upstream-dns ADDR [--listen ADDR] [--port N]
// It prints "ready: ..." once both sockets are open, as `dns serve` does.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "egr-min-relay: %s\nusage: egr-min-relay dns serve --upstream-dns ADDR [--listen ADDR] [--port N]\n",
               why.c_str());
  return 2;
}

bool ParseV4(const std::string& s, in_addr* out) { return inet_pton(AF_INET, s.c_str(), out) == 1; }

struct Pending {
  sockaddr_in client{};
  uint16_t id = 0;  // the client's, network order
  bool used = false;
};

}  // namespace

int main(int argc, char** argv) {
  std::string upstream, listen = "10.244.0.1";  // the lab's pod gateway (tests/lab/lab.h)
  int port = 53;
  int i = 1;
  if (argc >= 3 && std::string(argv[1]) == "dns" && std::string(argv[2]) == "serve") i = 3;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return Usage("\"" + a + "\" needs a value");
    std::string v = argv[++i];
    if (a == "--upstream-dns") {
      upstream = v;
    } else if (a == "--listen") {
      listen = v;
    } else if (a == "--port") {
      char* end = nullptr;
      long p = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || p < 1 || p > 65535) return Usage("--port takes 1..65535 (got \"" + v + "\")");
      port = static_cast<int>(p);
    } else {
      return Usage("unknown argument \"" + a + "\"");
    }
  }
  sockaddr_in up{}, ep{};
  up.sin_family = ep.sin_family = AF_INET;
  up.sin_port = htons(53);
  ep.sin_port = htons(static_cast<uint16_t>(port));
  if (!ParseV4(upstream, &up.sin_addr)) return Usage("--upstream-dns takes an IPv4 address (got \"" + upstream + "\")");
  if (!ParseV4(listen, &ep.sin_addr)) return Usage("--listen takes an IPv4 address (got \"" + listen + "\")");

  const int es = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int us = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1, rcvbuf = 4 << 20;
  setsockopt(es, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
  setsockopt(es, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
  setsockopt(us, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
  if (es < 0 || us < 0 || bind(es, reinterpret_cast<sockaddr*>(&ep), sizeof(ep)) != 0 ||
      connect(us, reinterpret_cast<sockaddr*>(&up), sizeof(up)) != 0) {
    std::fprintf(stderr, "egr-min-relay: sockets (%s:%d, upstream %s): %s\n", listen.c_str(), port, upstream.c_str(),
                 std::strerror(errno));
    return 1;
  }
  const int ep_fd = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = es;
  epoll_ctl(ep_fd, EPOLL_CTL_ADD, es, &ev);
  ev.data.fd = us;
  epoll_ctl(ep_fd, EPOLL_CTL_ADD, us, &ev);
  signal(SIGTERM, SIG_DFL);
  std::printf("ready: relaying %s:%d to %s:53\n", listen.c_str(), port, upstream.c_str());
  std::fflush(stdout);

  static std::array<Pending, 65536> pending;
  uint16_t next = 0;
  std::array<uint8_t, 4096> buf;
  epoll_event events[2];
  for (;;) {
    const int n = epoll_wait(ep_fd, events, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return 1;
    for (int k = 0; k < n; ++k) {
      // Level-triggered: one message per socket per wake, as a loop that
      // answers between reads would.
      if (events[k].data.fd == es) {
        sockaddr_in from{};
        socklen_t fl = sizeof(from);
        const ssize_t len = recvfrom(es, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &fl);
        if (len < 12) continue;
        Pending& p = pending[next];
        p.client = from;
        std::memcpy(&p.id, buf.data(), 2);
        p.used = true;
        const uint16_t id = htons(next++);
        std::memcpy(buf.data(), &id, 2);
        send(us, buf.data(), static_cast<size_t>(len), 0);
      } else {
        const ssize_t len = recv(us, buf.data(), buf.size(), 0);
        if (len < 12) continue;
        uint16_t id;
        std::memcpy(&id, buf.data(), 2);
        Pending& p = pending[ntohs(id)];
        if (!p.used) continue;
        p.used = false;
        std::memcpy(buf.data(), &p.id, 2);
        sendto(es, buf.data(), static_cast<size_t>(len), 0, reinterpret_cast<sockaddr*>(&p.client), sizeof(p.client));
      }
    }
  }
}
