// egr-churn-dns: the two ends of the churn test (tests/priv/dns_churn_test.cc,
// issue 12): a DNS server whose answers rotate like S3's, and the sandbox's
// client that asks it through the proxy.  dnsmasq answers a name with the same
// addresses every time (a reload per answer would cost a process round trip
// per query and race the queries in flight), so the server is this small
// libknot responder.  One JSON line per event.
//
//   serve ADDR PORT ROTATE_SUFFIX PER_ANSWER TTL FIXED_SUFFIX
//       UDP.  An A query for a name ending in ROTATE_SUFFIX is answered with
//       PER_ANSWER addresses never answered before (198.18.0.0/15, in order),
//       TTL seconds; a name ending in FIXED_SUFFIX whose first label is
//       "o<k>" gets 198.19.255.<k+1> (k < 254), TTL 60; every other
//       question is NOERROR with no record.  "listening" once bound.
//   drive SERVER PORT CHURN_NAME COUNT QPS OTHER_SUFFIX EVERY CONNECT_PORT
//       COUNT A queries for CHURN_NAME (EDNS, so an extended error is seen)
//       at QPS, each waiting for its answer (2 s); every EVERY queries, and
//       once at the end, a new name o<k>OTHER_SUFFIX is resolved the same way
//       and its address connected to on CONNECT_PORT (TCP, 2 s).  One summary
//       line: answers by rcode, extended errors 18, the addresses answered,
//       the other names resolved / connected / refused (EPERM), the time.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/dns/dns_wire.h"

namespace {

using egressd::dns::testing::Bytes;
using egressd::dns::testing::MakeAnswer;
using egressd::dns::testing::MakeQuery;
using egressd::dns::testing::Parse;
using egressd::dns::testing::Parsed;
using egressd::dns::testing::QueryOpts;
using egressd::dns::testing::Rr;

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string QnameText(const Bytes& wire) {
  char buf[KNOT_DNAME_TXT_MAXLEN + 1];
  if (wire.empty() || knot_dname_to_str(buf, wire.data(), sizeof(buf)) == nullptr) return "";
  std::string s(buf);
  for (char& c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

int Serve(char** a) {
  const std::string addr = a[0], rotate = a[2], fixed = a[5];
  const int port = std::atoi(a[1]), per_answer = std::atoi(a[3]);
  const uint32_t ttl = static_cast<uint32_t>(std::atoi(a[4]));
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(static_cast<uint16_t>(port));
  if (s < 0 || inet_pton(AF_INET, addr.c_str(), &sin.sin_addr) != 1 ||
      bind(s, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0) {
    std::printf("{\"serve\":\"error\",\"errno\":\"%s\"}\n", strerror(errno));
    return 1;
  }
  std::printf("{\"serve\":\"listening\"}\n");
  std::fflush(stdout);
  uint32_t next = 0;  // the next rotating address: 198.18.0.0 + next
  uint8_t buf[4096];
  for (;;) {
    sockaddr_in from{};
    socklen_t fl = sizeof(from);
    ssize_t n = recvfrom(s, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &fl);
    if (n <= 0) continue;
    Bytes q(buf, buf + n);
    Parsed p = Parse(q);
    if (!p.ok || p.qr || p.qdcount != 1) continue;
    const std::string name = QnameText(p.qname_wire);
    std::vector<Rr> rrs;
    if (p.qtype == KNOT_RRTYPE_A && EndsWith(name, rotate)) {
      for (int i = 0; i < per_answer; ++i, ++next) {
        const uint32_t ip = (198u << 24) | (18u << 16) | (next & 0x1ffff);
        char text[INET_ADDRSTRLEN];
        const uint32_t be = htonl(ip);
        inet_ntop(AF_INET, &be, text, sizeof(text));
        rrs.push_back({0, name, KNOT_RRTYPE_A, ttl, text});
      }
    } else if (p.qtype == KNOT_RRTYPE_A && EndsWith(name, fixed) && name.size() > 1 && name[0] == 'o') {
      const int k = std::atoi(name.c_str() + 1);
      if (k >= 0 && k < 254) rrs.push_back({0, name, KNOT_RRTYPE_A, 60, "198.19.255." + std::to_string(k + 1)});
    }
    Bytes ans = MakeAnswer(q, rrs);
    sendto(s, ans.data(), ans.size(), 0, reinterpret_cast<sockaddr*>(&from), fl);
  }
}

// One UDP exchange on a fresh socket (a fresh source port per query, as a
// stub resolver does).
bool Exchange(const sockaddr_in& server, const Bytes& q, Parsed& out) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  bool ok = false;
  if (connect(s, reinterpret_cast<const sockaddr*>(&server), sizeof(server)) == 0 &&
      send(s, q.data(), q.size(), 0) == static_cast<ssize_t>(q.size())) {
    pollfd pfd{s, POLLIN, 0};
    uint8_t buf[65536];
    while (poll(&pfd, 1, 2000) == 1) {
      ssize_t n = recv(s, buf, sizeof(buf), 0);
      if (n <= 0) break;
      out = Parse(Bytes(buf, buf + n));
      if (out.ok && out.id == (static_cast<uint16_t>(q[0]) << 8 | q[1])) {
        ok = true;
        break;
      }
    }
  }
  close(s);
  return ok;
}

// 0 connected, else the errno (ETIMEDOUT after 2 s).
int ConnectTcp(const std::string& addr, int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return errno;
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, addr.c_str(), &sin.sin_addr);
  int err = 0;
  if (connect(s, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd pfd{s, POLLOUT, 0};
      if (poll(&pfd, 1, 2000) != 1) {
        err = ETIMEDOUT;
      } else {
        socklen_t l = sizeof(err);
        getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &l);
      }
    }
  }
  close(s);
  return err;
}

int Drive(char** a) {
  sockaddr_in server{};
  server.sin_family = AF_INET;
  server.sin_port = htons(static_cast<uint16_t>(std::atoi(a[1])));
  if (inet_pton(AF_INET, a[0], &server.sin_addr) != 1) return 2;
  const std::string churn = a[2], other_suffix = a[5];
  const long count = std::atol(a[3]);
  const double qps = std::atof(a[4]);
  const long every = std::atol(a[6]);
  const int connect_port = std::atoi(a[7]);
  long noerror = 0, servfail = 0, other_rcode = 0, timeouts = 0, ede18 = 0, addresses = 0, max_addresses = 0;
  long other_resolved = 0, other_connected = 0, other_refused = 0, other_failed = 0, others = 0;
  uint16_t id = 1;
  auto ask = [&](const std::string& name, Parsed& p) {
    QueryOpts o;
    o.id = id++;
    o.edns = true;
    return Exchange(server, MakeQuery(name, o), p);
  };
  auto other = [&]() {
    const std::string name = "o" + std::to_string(others++) + other_suffix;
    Parsed p;
    if (!ask(name, p) || p.rcode != 0 || p.Addresses().size() != 1) {
      ++other_failed;
      return;
    }
    ++other_resolved;
    const int err = ConnectTcp(p.Addresses()[0], connect_port);
    if (err == 0) {
      ++other_connected;
    } else if (err == EPERM) {
      ++other_refused;
    } else {
      ++other_failed;
    }
  };
  timespec start{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < count; ++i) {
    // The rate: query i is sent no earlier than i / QPS after the start.
    const double at = static_cast<double>(i) / qps;
    timespec when = start;
    when.tv_sec += static_cast<time_t>(at);
    when.tv_nsec += static_cast<long>((at - static_cast<double>(static_cast<long>(at))) * 1e9);
    if (when.tv_nsec >= 1000000000L) {
      when.tv_sec += 1;
      when.tv_nsec -= 1000000000L;
    }
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &when, nullptr);
    Parsed p;
    if (!ask(churn, p)) {
      ++timeouts;
    } else {
      if (p.rcode == 0) {
        ++noerror;
      } else if (p.rcode == 2) {
        ++servfail;
      } else {
        ++other_rcode;
      }
      if (p.ede_code == 18) ++ede18;
      const long n = static_cast<long>(p.Addresses().size());
      addresses += n;
      if (n > max_addresses) max_addresses = n;
    }
    if (every > 0 && (i + 1) % every == 0) other();
  }
  other();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "{\"queries\":%ld,\"noerror\":%ld,\"servfail\":%ld,\"other_rcode\":%ld,\"timeouts\":%ld,\"ede18\":%ld,"
      "\"addresses\":%ld,\"max_addresses\":%ld,\"others\":%ld,\"other_resolved\":%ld,\"other_connected\":%ld,"
      "\"other_refused\":%ld,\"other_failed\":%ld,\"seconds\":%.2f}\n",
      count, noerror, servfail, other_rcode, timeouts, ede18, addresses, max_addresses, others, other_resolved,
      other_connected, other_refused, other_failed, secs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "serve" && argc == 8) return Serve(argv + 2);
  if (cmd == "drive" && argc == 10) return Drive(argv + 2);
  std::fprintf(stderr,
               "usage: egr-churn-dns serve ADDR PORT ROTATE_SUFFIX PER_ANSWER TTL FIXED_SUFFIX |\n"
               "       drive SERVER PORT CHURN_NAME COUNT QPS OTHER_SUFFIX EVERY CONNECT_PORT\n");
  return 2;
}
