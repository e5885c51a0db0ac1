#include <arpa/inet.h>
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "probe_common.h"

namespace egressd::probe {

int Op::Int(const std::string& key, int def) const {
  auto it = opts.find(key);
  return it == opts.end() ? def : std::stoi(it->second);
}

std::string Op::Str(const std::string& key, const std::string& def) const {
  auto it = opts.find(key);
  return it == opts.end() ? def : it->second;
}

namespace {
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}
}  // namespace

Json& Json::Str(const std::string& k, const std::string& v) {
  body_ += (body_.empty() ? "" : ",") + Quote(k) + ":" + Quote(v);
  return *this;
}

Json& Json::Int(const std::string& k, long long v) {
  body_ += (body_.empty() ? "" : ",") + Quote(k) + ":" + std::to_string(v);
  return *this;
}

Json& Json::Bool(const std::string& k, bool v) {
  body_ += (body_.empty() ? "" : ",") + Quote(k) + ":" + (v ? "true" : "false");
  return *this;
}

Json& Json::Err(int err, const std::string& stage) {
  return Str("result", "error").Str("errno", ErrName(err)).Str("stage", stage);
}

void Json::Emit() {
  std::string line = "{" + body_ + "}\n";
  fwrite(line.data(), 1, line.size(), stdout);
  fflush(stdout);
}

std::string ErrName(int err) {
  const char* n = strerrorname_np(err);
  return n ? n : "E" + std::to_string(err);
}

static std::string StripBrackets(const std::string& s) {
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') return s.substr(1, s.size() - 2);
  return s;
}

bool MakeTarget(const std::string& addr_in, uint16_t port, bool force_v6, Target* t) {
  std::string addr = StripBrackets(addr_in);
  *t = Target{};
  t->text = addr;
  t->port = port;
  in_addr a4;
  in6_addr a6;
  if (inet_pton(AF_INET, addr.c_str(), &a4) == 1) {
    if (force_v6) {
      auto* s6 = reinterpret_cast<sockaddr_in6*>(&t->sa);
      s6->sin6_family = AF_INET6;
      s6->sin6_port = htons(port);
      s6->sin6_addr.s6_addr[10] = s6->sin6_addr.s6_addr[11] = 0xff;
      std::memcpy(&s6->sin6_addr.s6_addr[12], &a4, 4);
      t->family = AF_INET6;
      t->len = sizeof(sockaddr_in6);
    } else {
      auto* s4 = reinterpret_cast<sockaddr_in*>(&t->sa);
      s4->sin_family = AF_INET;
      s4->sin_port = htons(port);
      s4->sin_addr = a4;
      t->family = AF_INET;
      t->len = sizeof(sockaddr_in);
    }
    return true;
  }
  if (inet_pton(AF_INET6, addr.c_str(), &a6) == 1) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&t->sa);
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(port);
    s6->sin6_addr = a6;
    t->family = AF_INET6;
    t->len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

bool ParsePort(const std::string& s, uint16_t* port) {
  if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos)
    return false;
  unsigned long v = std::stoul(s);
  if (v > 65535) return false;
  *port = static_cast<uint16_t>(v);
  return true;
}

bool ParseAddrPort(const std::string& s, std::string* addr, uint16_t* port) {
  size_t colon;
  if (!s.empty() && s[0] == '[') {
    size_t rb = s.find(']');
    if (rb == std::string::npos || rb + 1 >= s.size() || s[rb + 1] != ':') return false;
    *addr = s.substr(1, rb - 1);
    colon = rb + 1;
  } else {
    colon = s.rfind(':');
    if (colon == std::string::npos) return false;
    *addr = s.substr(0, colon);
    if (addr->find(':') != std::string::npos) return false;  // bare v6 needs brackets
  }
  Target t;
  return ParsePort(s.substr(colon + 1), port) && MakeTarget(*addr, *port, false, &t);
}

// 16-byte canonical form (v4 as ::ffff:a.b.c.d) and port of a sockaddr.
static bool Canon(const sockaddr_storage& sa, in6_addr* a, uint16_t* port) {
  if (sa.ss_family == AF_INET) {
    const auto* s4 = reinterpret_cast<const sockaddr_in*>(&sa);
    std::memset(a, 0, sizeof(*a));
    a->s6_addr[10] = a->s6_addr[11] = 0xff;
    std::memcpy(&a->s6_addr[12], &s4->sin_addr, 4);
    *port = ntohs(s4->sin_port);
    return true;
  }
  if (sa.ss_family == AF_INET6) {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(&sa);
    *a = s6->sin6_addr;
    *port = ntohs(s6->sin6_port);
    return true;
  }
  return false;
}

bool SameEndpoint(const sockaddr_storage& a, const Target& t) {
  in6_addr x, y;
  uint16_t px, py;
  return Canon(a, &x, &px) && Canon(t.sa, &y, &py) && px == py &&
         std::memcmp(&x, &y, sizeof(x)) == 0;
}

long long NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool WaitFd(int fd, short events, int timeout_ms) {
  const long long deadline = NowMs() + timeout_ms;
  for (;;) {
    pollfd p{fd, events, 0};
    long long left = deadline - NowMs();
    int rc = poll(&p, 1, left > 0 ? static_cast<int>(left) : 0);
    if (rc > 0) return true;
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0 && left > 0) continue;
    errno = ETIMEDOUT;
    return false;
  }
}

int ConnectWithin(int fd, const Target& t, int timeout_ms) {
  if (connect(fd, reinterpret_cast<const sockaddr*>(&t.sa), t.len) == 0) return 0;
  if (errno != EINPROGRESS) return errno;
  if (!WaitFd(fd, POLLOUT, timeout_ms)) return ETIMEDOUT;
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  return err;
}

int EchoRoundTrip(int fd, const std::string& payload, int timeout_ms, std::string* stage) {
  *stage = "send";
  size_t off = 0;
  const long long deadline = NowMs() + timeout_ms;
  while (off < payload.size()) {
    ssize_t n = send(fd, payload.data() + off, payload.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += n;
      continue;
    }
    if (errno != EAGAIN && errno != EINTR) return errno;
    if (!WaitFd(fd, POLLOUT, static_cast<int>(std::max(0LL, deadline - NowMs())))) return ETIMEDOUT;
  }
  *stage = "recv";
  std::string got;
  while (got.size() < payload.size()) {
    if (!WaitFd(fd, POLLIN, static_cast<int>(std::max(0LL, deadline - NowMs())))) return ETIMEDOUT;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return ECONNRESET;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return errno;
    }
    got.append(buf, n);
  }
  return got.compare(0, payload.size(), payload) == 0 ? 0 : EBADMSG;
}

bool WaitEcho(int fd, int wait_ms, const Target* from, int* first_err) {
  const long long deadline = NowMs() + wait_ms;
  if (first_err) *first_err = 0;
  for (;;) {
    long long left = deadline - NowMs();
    if (left < 0 || !WaitFd(fd, POLLIN, static_cast<int>(left))) return false;
    char buf[65536];
    sockaddr_storage src{};
    socklen_t sl = sizeof(src);
    ssize_t n = recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&src), &sl);
    if (n < 0) {  // e.g. ECONNREFUSED from an ICMP error: keep waiting
      if (first_err && *first_err == 0 && errno != EAGAIN) *first_err = errno;
      continue;
    }
    if (!from || SameEndpoint(src, *from)) return true;
  }
}

Json TargetLine(const Op& op, const Target& t) {
  Json j(op.name);
  j.Str("dst", t.text).Int("port", t.port);
  return j;
}

}  // namespace egressd::probe
