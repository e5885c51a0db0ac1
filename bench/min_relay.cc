// egr-min-relay: the least any user-space DNS proxy at egressd's hop can do,
// to measure what the hop itself adds on this machine (bench/results/
// 2026-12-03-dns-hop-floor.md; bench/README.md's profile list says how to
// run it).  One thread, one epoll, two UDP sockets: the
// sandbox's endpoint and one long-lived socket connected to the upstream.
// A query is read, given a free random ID, sent upstream; its answer gets the
// client's ID back and is sent to the client.  No parsing, no policy, no
// map write, no audit, no per-query source port, no guard: none of what
// egressd must do, so whatever p99 it adds over asking the upstream directly
// is the hop's share (two more deliveries and receiver wake-ups per query),
// which no proxy design at this hop can take off.
//
// --fresh-port adds the one thing egressd will not give up for speed, the
// RFC 5452 defence: each query goes upstream from its own new socket on a
// kernel-chosen port (socket, connect, epoll add; on the answer, close), with
// a random ID.  Run beside the plain relay and `dns serve`, it splits
// egressd's CPU per query into the hop, the fresh port, and the rest
// (deciding, learning, auditing, guarding).  --queries-per-port K prices a
// cheaper variant of the defence: a new socket every K queries (random IDs,
// answers accepted only from the socket their query left by).
//
// Its command line mimics `egressctl dns serve` so EGR_BENCH_SERVE_PREFIX
// (bench/profile/dns_speed_ab.sh) can swap it in for the proxy:
//   egr-min-relay dns serve --upstream-dns ADDR [--listen ADDR] [--port N] [--fresh-port | --queries-per-port K]
// It prints "ready: ..." once both sockets are open, as `dns serve` does.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <string>
#include <utility>

namespace {

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "egr-min-relay: %s\nusage: egr-min-relay dns serve --upstream-dns ADDR [--listen ADDR] [--port N] "
               "[--fresh-port | --queries-per-port K]\n",
               why.c_str());
  return 2;
}

bool ParseV4(const std::string& s, in_addr* out) { return inet_pton(AF_INET, s.c_str(), out) == 1; }

// Queries in flight, by our ID (random, unique while in flight).
struct PortQuery {
  sockaddr_in client{};
  uint64_t sent_ns = 0;
  int fd = -1;             // the upstream socket it left from
  uint16_t client_id = 0;  // network order
  bool used = false;
};

// An upstream socket's share of queries: it is closed once it has carried
// its K and every one of them is answered or given up.
struct PortUse {
  int sent = 0;
  int out = 0;  // in flight
};

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The relay.  per_port 0: every query leaves by `long_lived`, for ever (the
// bare relay).  per_port K: a new upstream socket every K queries; K = 1 is
// egressd's (there the sockets are prepared ahead and guarded; here on the
// query's path, the same calls).
int RelayLoop(int ep_fd, int es, const sockaddr_in& up, int per_port, int long_lived) {
  static std::array<PortQuery, 65536> by_id;
  static std::array<PortUse, 65536> by_fd;
  int current = long_lived;  // the socket new queries leave from
  auto retire_if_done = [&](int fd) {
    if (fd != current && by_fd[fd].out == 0) close(fd);  // the last reference: epoll forgets it
  };
  // Queries in the order they were sent (id, sent_ns): one unanswered after
  // 2 s is given up (a lost query must not hold its socket for ever).
  std::deque<std::pair<uint16_t, uint64_t>> sent_order;
  // IDs as c-ares makes them: from a generator seeded once, not a system
  // call per query.
  uint64_t rng = 0;
  if (getrandom(&rng, sizeof(rng), 0) != sizeof(rng)) return 1;
  rng |= 1;
  std::array<uint8_t, 4096> buf;
  epoll_event events[64];
  for (;;) {
    const int n = epoll_wait(ep_fd, events, 64, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return 1;
    for (int k = 0; k < n; ++k) {
      const int fd = events[k].data.fd;
      if (fd == es) {
        sockaddr_in from{};
        socklen_t fl = sizeof(from);
        const ssize_t len = recvfrom(es, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &fl);
        if (len < 12) continue;
        const uint64_t now = NowNs();
        while (!sent_order.empty() && now - sent_order.front().second > 2'000'000'000ull) {
          const auto [id, sent_ns] = sent_order.front();
          sent_order.pop_front();
          PortQuery& q = by_id[id];
          if (!q.used || q.sent_ns != sent_ns) continue;  // answered (and the ID reused meanwhile)
          q.used = false;
          --by_fd[q.fd].out;
          retire_if_done(q.fd);
        }
        if (current < 0 || (per_port > 0 && by_fd[current].sent == per_port)) {
          const int old = current;
          current = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
          if (current >= static_cast<int>(by_fd.size()) ||
              (current >= 0 && connect(current, reinterpret_cast<const sockaddr*>(&up), sizeof(up)) != 0)) {
            close(current);
            current = -1;
          }
          if (old >= 0) retire_if_done(old);
          if (current < 0) continue;
          by_fd[current] = {};
          epoll_event ev{};
          ev.events = EPOLLIN;
          ev.data.fd = current;
          epoll_ctl(ep_fd, EPOLL_CTL_ADD, current, &ev);
        }
        uint16_t id;
        do {
          rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;  // xorshift64
          id = static_cast<uint16_t>(rng >> 32);
        } while (by_id[id].used);
        PortQuery& q = by_id[id];
        q = {from, now, current, 0, true};
        std::memcpy(&q.client_id, buf.data(), 2);
        ++by_fd[current].sent;
        ++by_fd[current].out;
        sent_order.emplace_back(id, now);
        const uint16_t wire_id = htons(id);
        std::memcpy(buf.data(), &wire_id, 2);
        send(current, buf.data(), static_cast<size_t>(len), 0);
      } else {
        const ssize_t len = recv(fd, buf.data(), buf.size(), 0);
        if (len < 12) continue;
        uint16_t wire_id;
        std::memcpy(&wire_id, buf.data(), 2);
        PortQuery& q = by_id[ntohs(wire_id)];
        if (!q.used || q.fd != fd) continue;  // not ours, or not from this port
        q.used = false;
        --by_fd[fd].out;
        std::memcpy(buf.data(), &q.client_id, 2);
        sendto(es, buf.data(), static_cast<size_t>(len), 0, reinterpret_cast<sockaddr*>(&q.client), sizeof(q.client));
        retire_if_done(fd);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string upstream, listen = "10.244.0.1";  // the lab's pod gateway (tests/lab/lab.h)
  int port = 53;
  int per_port = 0;  // 0: one long-lived upstream socket
  int i = 1;
  if (argc >= 3 && std::string(argv[1]) == "dns" && std::string(argv[2]) == "serve") i = 3;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--fresh-port") {
      per_port = 1;
      continue;
    }
    if (i + 1 >= argc) return Usage("\"" + a + "\" needs a value");
    std::string v = argv[++i];
    if (a == "--upstream-dns") {
      upstream = v;
    } else if (a == "--listen") {
      listen = v;
    } else if (a == "--queries-per-port") {
      char* end = nullptr;
      long k = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || k < 1 || k > 65535) return Usage("--queries-per-port takes 1..65535 (got \"" + v + "\")");
      per_port = static_cast<int>(k);
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
  // The bare relay's one upstream socket takes every answer: a large buffer,
  // as the endpoint's.  The fresh ones carry a query or K each.
  const int us = per_port == 0 ? socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0) : -2;
  int one = 1, rcvbuf = 4 << 20;
  setsockopt(es, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
  setsockopt(es, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
  if (us >= 0) setsockopt(us, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
  if (es < 0 || us == -1 || bind(es, reinterpret_cast<sockaddr*>(&ep), sizeof(ep)) != 0 ||
      (us >= 0 && connect(us, reinterpret_cast<sockaddr*>(&up), sizeof(up)) != 0)) {
    std::fprintf(stderr, "egr-min-relay: sockets (%s:%d, upstream %s): %s\n", listen.c_str(), port, upstream.c_str(),
                 std::strerror(errno));
    return 1;
  }
  const int ep_fd = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = es;
  epoll_ctl(ep_fd, EPOLL_CTL_ADD, es, &ev);
  if (us >= 0) {
    ev.data.fd = us;
    epoll_ctl(ep_fd, EPOLL_CTL_ADD, us, &ev);
  }
  signal(SIGTERM, SIG_DFL);
  std::printf("ready: relaying %s:%d to %s:53", listen.c_str(), port, upstream.c_str());
  if (per_port > 0) std::printf(" from a fresh port every %d quer%s", per_port, per_port == 1 ? "y" : "ies");
  std::printf("\n");
  std::fflush(stdout);
  return RelayLoop(ep_fd, es, up, per_port, us >= 0 ? us : -1);
}
