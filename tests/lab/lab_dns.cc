#include "lab_dns.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace egressd::lab {

absl::StatusOr<std::unique_ptr<DnsServer>> DnsServer::Start(const DnsServerSpec& spec) {
  RunSpec rs;
  // Nothing but what the test gave: no config file, hosts file, resolv.conf,
  // DHCP or cache; every query logged to stderr.
  rs.argv = {"dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
             "--no-poll", "--bind-interfaces", "--cache-size=0", "--user=root", "--group=root",
             "--pid-file=", "--log-queries", "--log-facility=-", absl::StrCat("--port=", spec.port)};
  for (const auto& a : spec.listen) rs.argv.push_back("--listen-address=" + a);
  for (const auto& [name, addrs] : spec.records) {
    rs.argv.push_back(absl::StrCat("--host-record=", name, ",", absl::StrJoin(addrs, ",")));
  }
  for (const auto& [alias, target] : spec.cnames) rs.argv.push_back(absl::StrCat("--cname=", alias, ",", target));
  rs.argv.insert(rs.argv.end(), spec.extra_args.begin(), spec.extra_args.end());
  rs.netns = spec.netns;
  rs.cgroup = spec.cgroup;
  rs.timeout = std::chrono::hours(1);
  auto bg = lab::Start(rs);
  if (!bg.ok()) return bg.status();
  std::unique_ptr<DnsServer> s(new DnsServer(spec, std::move(*bg)));
  // dnsmasq binds its sockets before it logs that it started.
  const bool up = Lab::WaitFor([&] { return s->Log().find("started, version") != std::string::npos || !s->bg_.running(); },
                               std::chrono::seconds(10));
  if (!up || !s->bg_.running()) {
    return absl::InternalError(absl::StrCat("dnsmasq on ", absl::StrJoin(spec.listen, ","), " port ", spec.port,
                                            " did not start: ", s->Log()));
  }
  return s;
}

DnsServer::~DnsServer() { bg_.Stop(); }

std::string DnsServer::Log() const { return bg_.err(); }

uint64_t DnsServer::Queries() const {
  uint64_t n = 0;
  for (absl::string_view line : absl::StrSplit(Log(), '\n')) n += line.find(": query[") != absl::string_view::npos;
  return n;
}

uint64_t DnsServer::QueriesFor(const std::string& name) const {
  uint64_t n = 0;
  for (absl::string_view line : absl::StrSplit(Log(), '\n')) {
    size_t q = line.find(": query[");
    if (q == absl::string_view::npos) continue;
    size_t sp = line.find("] ", q);
    if (sp == absl::string_view::npos) continue;
    absl::string_view rest = line.substr(sp + 2);
    // Names compare without case: a query in 0x20 case is the same name.
    n += absl::EqualsIgnoreCase(rest.substr(0, rest.find(' ')), name);
  }
  return n;
}

bool DnsServer::WaitForQuery(const std::string& name, std::chrono::milliseconds limit) const {
  // dnsmasq's log arrives through the runner's stderr pipe on its own schedule.
  return Lab::WaitFor([&] { return QueriesFor(name) > 0; }, limit);
}

namespace {

bool FillAddr(const std::string& addr, uint16_t port, sockaddr_storage& ss, socklen_t& len) {
  std::memset(&ss, 0, sizeof(ss));
  auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, addr.c_str(), &s4->sin_addr) == 1) {
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
    len = sizeof(*s4);
    return true;
  }
  if (inet_pton(AF_INET6, addr.c_str(), &s6->sin6_addr) == 1) {
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(port);
    len = sizeof(*s6);
    return true;
  }
  return false;
}

bool ReadFull(int fd, uint8_t* p, size_t n, std::chrono::steady_clock::time_point deadline) {
  while (n > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) return false;
    ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= r;
  }
  return true;
}

}  // namespace

absl::Status EnterPrivateNetns(const std::vector<std::string>& addrs) {
  if (unshare(CLONE_NEWNET) != 0) return absl::InternalError(absl::StrCat("unshare(CLONE_NEWNET): ", strerror(errno)));
  RunResult up = Run(RunSpec{.argv = {"ip", "link", "set", "lo", "up"}});
  if (up.exit_code != 0) return absl::InternalError("ip link set lo up: " + up.Describe());
  for (const auto& a : addrs) {
    RunSpec add{.argv = {"ip", "addr", "add", a, "dev", "lo"}};
    if (a.find(':') != std::string::npos) add.argv.push_back("nodad");
    RunResult r = Run(add);
    if (r.exit_code != 0) return absl::InternalError("ip addr add " + a + ": " + r.Describe());
  }
  return absl::OkStatus();
}

std::optional<std::vector<uint8_t>> UdpExchange(const std::string& addr, uint16_t port,
                                                const std::vector<uint8_t>& query,
                                                std::chrono::milliseconds timeout) {
  sockaddr_storage ss;
  socklen_t len;
  if (!FillAddr(addr, port, ss, len)) return std::nullopt;
  int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  std::optional<std::vector<uint8_t>> out;
  if (sendto(fd, query.data(), query.size(), 0, reinterpret_cast<sockaddr*>(&ss), len) ==
      static_cast<ssize_t>(query.size())) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(timeout.count())) == 1) {
      std::vector<uint8_t> buf(65535);
      ssize_t n = recv(fd, buf.data(), buf.size(), 0);
      if (n > 0) {
        buf.resize(n);
        out = std::move(buf);
      }
    }
  }
  close(fd);
  return out;
}

std::vector<std::vector<uint8_t>> TcpPipelined(const std::string& addr, uint16_t port,
                                               const std::vector<std::vector<uint8_t>>& queries,
                                               std::chrono::milliseconds timeout) {
  sockaddr_storage ss;
  socklen_t len;
  if (!FillAddr(addr, port, ss, len)) return {};
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  std::vector<std::vector<uint8_t>> out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0) {
    std::vector<uint8_t> all;
    for (const auto& q : queries) {
      all.push_back(q.size() >> 8);
      all.push_back(q.size() & 0xff);
      all.insert(all.end(), q.begin(), q.end());
    }
    if (write(fd, all.data(), all.size()) == static_cast<ssize_t>(all.size())) {
      auto deadline = std::chrono::steady_clock::now() + timeout;
      for (size_t i = 0; i < queries.size(); ++i) {
        uint8_t l[2];
        if (!ReadFull(fd, l, 2, deadline)) break;
        std::vector<uint8_t> m((size_t{l[0]} << 8) | l[1]);
        if (!ReadFull(fd, m.data(), m.size(), deadline)) break;
        out.push_back(std::move(m));
      }
    }
  }
  close(fd);
  return out;
}

}  // namespace egressd::lab
