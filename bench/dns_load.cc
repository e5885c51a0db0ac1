// egr-dns-load: an open-loop DNS load generator for the speed rows
// (bench/dns_speed.cc).  It sends one query every 1/RATE seconds on a fixed
// schedule (never waiting on an answer: a slow path shows as latency and
// loss, not as a lower offered rate), and times every answer from the moment
// its query was handed to the kernel to the kernel's receive timestamp
// (SO_TIMESTAMPNS), so the client's own wake-up delays on a loaded machine
// are not charged to the path.  After the last send it waits up to the
// timeout for stragglers; a query unanswered by then is lost.  Queries go
// round-robin over as many sockets (source ports) as keep every (socket, ID)
// unused for a timeout's length: one up to 60,000/s with the 1 s default, so
// the rate is never capped by 16-bit IDs.  dnsperf 2.10
// reports only mean and deviation, measures in user space, and counts the
// queries still in flight when its time limit ends as lost.
//
//   egr-dns-load --server IP [--port P] --name NAME [--qtype N] --rate R
//                --seconds S [--timeout-ms T] [--ready-line] [--samples FILE]
// With --ready-line it prints "first-answer" on its own line (flushed) when
// the first answer arrives, so a caller can act while the load runs (the
// hand-over bench starts the new daemon then).  At the end it prints one JSON line: sent, answered, lost, late_sends (sent over 1 ms
// behind schedule), rcodes, offered_qps, and latency p50/p90/p99/p999/max in
// µs.  With --samples it also writes every query to FILE, one line each:
// "<send CLOCK_MONOTONIC ns> <latency µs, -1 if lost> <rcode>", so a caller
// can take the figures of the queries sent inside a window it timed on the
// same clock (the hand-over's, from the new daemon's start to the old one's
// exit).  Bad flags: exit 2; a socket or file failure: exit 1.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr int kMaxRate = 1'000'000;
constexpr long long kMaxQueries = 60'000'000;  // ~2 GB of per-query records
// Queries a socket may carry per timeout: fewer than its 65,536 IDs, so an ID
// is never reused while an earlier query with it can still be answered.
constexpr double kQueriesPerSocketPerTimeout = 60000;

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "egr-dns-load: %s\nusage: egr-dns-load --server IP [--port P] --name NAME [--qtype N] --rate R "
               "--seconds S [--timeout-ms T] [--ready-line] [--samples FILE]\n",
               why.c_str());
  return 2;
}

int64_t Now(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// A query for `name` (RD set, no EDNS); the ID is patched per send.
std::vector<uint8_t> Query(const std::string& name, uint16_t qtype) {
  std::vector<uint8_t> q = {0, 0, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    const size_t len = dot - start;
    if (len > 0) {
      q.push_back(static_cast<uint8_t>(len));
      q.insert(q.end(), name.begin() + start, name.begin() + dot);
    }
    start = dot + 1;
  }
  q.push_back(0);
  q.insert(q.end(), {static_cast<uint8_t>(qtype >> 8), static_cast<uint8_t>(qtype), 0, 1});
  return q;
}

const char* RcodeName(int r) {
  static const char* names[] = {"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED"};
  return r >= 0 && r < 6 ? names[r] : "OTHER";
}

double Quantile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

int main(int argc, char** argv) {
  std::string server, name, samples;
  unsigned port = 53, qtype = 1, timeout_ms = 1000;
  double rate = 0, seconds = 0;
  bool ready_line = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ready-line") {
      ready_line = true;
      continue;
    }
    if (i + 1 >= argc) return Usage("\"" + a + "\" needs a value");
    const std::string v = argv[++i];
    char* end = nullptr;
    if (a == "--server") {
      server = v;
    } else if (a == "--name") {
      name = v;
    } else if (a == "--samples") {
      samples = v;
    } else if (a == "--port" && (port = std::strtoul(v.c_str(), &end, 10), *end == 0) && port > 0 && port < 65536) {
    } else if (a == "--qtype" && (qtype = std::strtoul(v.c_str(), &end, 10), *end == 0) && qtype > 0 && qtype < 65536) {
    } else if (a == "--timeout-ms" && (timeout_ms = std::strtoul(v.c_str(), &end, 10), *end == 0) && timeout_ms > 0) {
    } else if (a == "--rate" && (rate = std::strtod(v.c_str(), &end), *end == 0) && rate > 0 && rate <= kMaxRate) {
    } else if (a == "--seconds" && (seconds = std::strtod(v.c_str(), &end), *end == 0) && seconds > 0 && seconds <= 600) {
    } else {
      return Usage("bad flag or value: " + a + " \"" + v + "\" (rate 1-" + std::to_string(kMaxRate) +
                   ", seconds up to 600)");
    }
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  if (server.empty() || inet_pton(AF_INET, server.c_str(), &to.sin_addr) != 1) return Usage("--server IPv4 address");
  if (name.empty() || rate == 0 || seconds == 0) return Usage("--name, --rate and --seconds are required");
  if (rate * seconds > static_cast<double>(kMaxQueries)) {
    return Usage("--rate x --seconds over " + std::to_string(kMaxQueries) + " queries");
  }

  const size_t nsock = static_cast<size_t>(std::ceil(rate * timeout_ms / 1000.0 / kQueriesPerSocketPerTimeout));
  std::vector<int> fds;
  std::vector<pollfd> polls;
  for (size_t i = 0; i < nsock; ++i) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1, buf = 4 << 20;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one)) != 0 ||
        connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
      std::fprintf(stderr, "egr-dns-load: socket %zu of %zu to %s:%u: %s\n", i + 1, nsock, server.c_str(), port,
                   std::strerror(errno));
      return 1;
    }
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    fds.push_back(fd);
    polls.push_back({fd, POLLIN, 0});
  }

  std::vector<uint8_t> q = Query(name, static_cast<uint16_t>(qtype));
  const size_t total = static_cast<size_t>(rate * seconds);
  // Query n goes out on socket n % nsock with ID n / nsock (mod 65,536).
  std::vector<int64_t> sent_at(total, 0), sent_mono(total, 0);
  std::vector<double> lat_of(total, -1);
  std::vector<int> rcode_of(total, -1);
  std::vector<bool> done(total, false);
  std::vector<int64_t> index_of(65536 * nsock, -1);
  std::vector<double> lat_us;
  lat_us.reserve(total);
  std::map<std::string, uint64_t> rcodes;
  size_t sent = 0, answered = 0, late = 0;
  const int64_t interval = static_cast<int64_t>(1e9 / rate);
  const int64_t start = Now(CLOCK_MONOTONIC);
  int64_t last_send = start;
  uint8_t in[4096];
  alignas(cmsghdr) char ctrl[256];

  for (;;) {
    int64_t mono = Now(CLOCK_MONOTONIC);
    while (sent < total && start + static_cast<int64_t>(sent) * interval <= mono) {
      if (mono - (start + static_cast<int64_t>(sent) * interval) > 1'000'000) ++late;
      const size_t sock = sent % nsock;
      const uint16_t id = static_cast<uint16_t>(sent / nsock);
      q[0] = static_cast<uint8_t>(id >> 8);
      q[1] = static_cast<uint8_t>(id);
      sent_at[sent] = Now(CLOCK_REALTIME);  // SO_TIMESTAMPNS is CLOCK_REALTIME
      sent_mono[sent] = Now(CLOCK_MONOTONIC);
      if (send(fds[sock], q.data(), q.size(), 0) < 0 && errno != EAGAIN && errno != ECONNREFUSED) {
        std::fprintf(stderr, "egr-dns-load: send: %s\n", std::strerror(errno));
        return 1;
      }
      index_of[sock * 65536 + id] = static_cast<int64_t>(sent);
      ++sent;
      last_send = mono;
    }
    for (size_t sock = 0; sock < nsock; ++sock) for (;;) {
      iovec iov{in, sizeof(in)};
      msghdr m{};
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      m.msg_control = ctrl;
      m.msg_controllen = sizeof(ctrl);
      const ssize_t n = recvmsg(fds[sock], &m, MSG_DONTWAIT);
      if (n < 0) break;  // drained; the next socket
      if (n < 12) continue;
      int64_t rx = 0;
      for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
          timespec ts;
          std::memcpy(&ts, CMSG_DATA(c), sizeof(ts));
          rx = int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
        }
      }
      const uint16_t id = static_cast<uint16_t>((in[0] << 8) | in[1]);
      const int64_t idx = index_of[sock * 65536 + id];
      if (idx < 0 || done[idx] || (in[2] & 0x80) == 0) continue;
      done[idx] = true;
      if (++answered == 1 && ready_line) {
        std::printf("first-answer\n");
        std::fflush(stdout);
      }
      if (rx == 0) rx = Now(CLOCK_REALTIME);
      lat_us.push_back(static_cast<double>(rx - sent_at[idx]) / 1000.0);
      lat_of[idx] = lat_us.back();
      rcode_of[idx] = in[3] & 0x0f;
      ++rcodes[RcodeName(in[3] & 0x0f)];
    }
    mono = Now(CLOCK_MONOTONIC);
    if (sent == total && (answered == total || mono - last_send > int64_t{timeout_ms} * 1'000'000)) break;
    // Sleep until the next send is due (or an answer arrives).
    int64_t wait = sent < total ? start + static_cast<int64_t>(sent) * interval - mono : 1'000'000;
    if (wait < 0) wait = 0;
    timespec ts{wait / 1'000'000'000, wait % 1'000'000'000};
    ppoll(polls.data(), polls.size(), &ts, nullptr);
  }
  if (!samples.empty()) {
    FILE* f = std::fopen(samples.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "egr-dns-load: --samples %s: %s\n", samples.c_str(), std::strerror(errno));
      return 1;
    }
    for (size_t i = 0; i < sent; ++i) {
      std::fprintf(f, "%lld %.1f %s\n", static_cast<long long>(sent_mono[i]), lat_of[i],
                   rcode_of[i] < 0 ? "-" : RcodeName(rcode_of[i]));
    }
    if (std::fclose(f) != 0) {
      std::fprintf(stderr, "egr-dns-load: --samples %s: %s\n", samples.c_str(), std::strerror(errno));
      return 1;
    }
  }
  const double window_s = static_cast<double>(last_send - start) / 1e9;
  std::string rc;
  for (const auto& [k, v] : rcodes) rc += (rc.empty() ? "" : ", ") + ("\"" + k + "\": " + std::to_string(v));
  const double p50 = Quantile(lat_us, 0.5), p90 = Quantile(lat_us, 0.9), p99 = Quantile(lat_us, 0.99),
               p999 = Quantile(lat_us, 0.999), mx = lat_us.empty() ? 0 : *std::max_element(lat_us.begin(), lat_us.end());
  std::printf("{\"sent\": %zu, \"answered\": %zu, \"lost\": %zu, \"late_sends\": %zu, \"offered_qps\": %.1f, "
              "\"rcodes\": {%s}, \"p50_us\": %.1f, \"p90_us\": %.1f, \"p99_us\": %.1f, \"p999_us\": %.1f, "
              "\"max_us\": %.1f}\n",
              sent, answered, sent - answered, late, window_s > 0 ? static_cast<double>(sent - 1) / window_s : 0,
              rc.c_str(), p50, p90, p99, p999, mx);
  for (int fd : fds) close(fd);
  return 0;
}
