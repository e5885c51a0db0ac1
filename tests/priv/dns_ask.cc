// egr-dns-ask NAME: asks for NAME's A record five ways a client can (UDP
// connected over IPv4, connected over a dual-stack IPv6 socket to a mapped
// address, sendto over IPv4, over a mapped address, and over IPv6) and prints
// one JSON object: per mode the address recvfrom reported the answer from, the
// peer getpeername reported (connected modes), and the answer's ID, or the
// stage and errno that failed.  tests/priv/dns_redirect_test runs it inside a
// sandbox: each resolver below is redirected to the sandbox's endpoint, and
// the kernel must make every answer look as if the resolver asked sent it.
// A C++ binary (not a script) so the 6.1 guest, which has no python3, runs it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

constexpr uint16_t kQueryId = 0x1234;

std::vector<uint8_t> Query(const std::string& name) {
  std::vector<uint8_t> q = {kQueryId >> 8, kQueryId & 0xff, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    q.push_back(static_cast<uint8_t>(dot - start));
    q.insert(q.end(), name.begin() + start, name.begin() + dot);
    start = dot + 1;
  }
  q.insert(q.end(), {0, 0, 1, 0, 1});  // root, type A, class IN
  return q;
}

// "addr" and port of a sockaddr, as Python's socket module would print them.
nlohmann::json Endpoint(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    inet_ntop(AF_INET, &a.sin_addr, buf, sizeof(buf));
    return {buf, ntohs(a.sin_port)};
  }
  const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
  inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof(buf));
  return {buf, ntohs(a.sin6_port)};
}

nlohmann::json Failed(const char* stage) {
  return {{"error", std::strerror(errno)}, {"stage", stage}};
}

nlohmann::json Ask(const std::string& name, int family, const char* dst, bool connected) {
  sockaddr_storage to{};
  socklen_t to_len;
  if (family == AF_INET) {
    auto& a = reinterpret_cast<sockaddr_in&>(to);
    a.sin_family = AF_INET;
    a.sin_port = htons(53);
    inet_pton(AF_INET, dst, &a.sin_addr);
    to_len = sizeof(a);
  } else {
    auto& a = reinterpret_cast<sockaddr_in6&>(to);
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(53);
    inet_pton(AF_INET6, dst, &a.sin6_addr);
    to_len = sizeof(a);
  }
  const int s = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Failed("socket");
  const timeval tv{3, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  nlohmann::json out = {{"peer", nullptr}};
  const std::vector<uint8_t> q = Query(name);
  auto fail = [&](const char* stage) {
    nlohmann::json f = Failed(stage);
    close(s);
    return f;
  };
  if (connected) {
    if (connect(s, reinterpret_cast<sockaddr*>(&to), to_len) != 0) return fail("connect");
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof(peer);
    if (getpeername(s, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return fail("getpeername");
    out["peer"] = Endpoint(peer);
    if (send(s, q.data(), q.size(), 0) != static_cast<ssize_t>(q.size())) return fail("send");
  } else if (sendto(s, q.data(), q.size(), 0, reinterpret_cast<sockaddr*>(&to), to_len) !=
             static_cast<ssize_t>(q.size())) {
    return fail("send");
  }
  uint8_t buf[512];
  sockaddr_storage from{};
  socklen_t from_len = sizeof(from);
  const ssize_t n = recvfrom(s, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &from_len);
  if (n < 2) return fail("recv");
  close(s);
  out["src"] = Endpoint(from);
  out["id"] = (buf[0] << 8) | buf[1];
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: egr-dns-ask NAME\n");
    return 2;
  }
  const std::string name = argv[1];
  nlohmann::json out;
  out["connected4"] = Ask(name, AF_INET, "8.8.8.8", true);
  out["connected-mapped"] = Ask(name, AF_INET6, "::ffff:8.8.8.8", true);
  out["sendto4"] = Ask(name, AF_INET, "10.96.0.10", false);
  out["sendto-mapped"] = Ask(name, AF_INET6, "::ffff:169.254.20.10", false);
  out["sendto6"] = Ask(name, AF_INET6, "2001:db8::10", false);
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
