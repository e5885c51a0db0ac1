#include "tests/dns/dns_fixture.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace egressd::dns::testing {
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

std::string Run(const std::vector<std::string>& argv, int* rc) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(pipefd[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) out.append(buf, n);
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (rc) *rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return out;
}

absl::Status EnterPrivateNetns(const std::vector<std::string>& addrs) {
  if (unshare(CLONE_NEWNET) != 0) return absl::InternalError(absl::StrCat("unshare(CLONE_NEWNET): ", strerror(errno)));
  int rc = 0;
  Run({"ip", "link", "set", "lo", "up"}, &rc);
  if (rc != 0) return absl::InternalError("ip link set lo up failed");
  for (const auto& a : addrs) {
    std::vector<std::string> cmd = {"ip", "addr", "add", a, "dev", "lo"};
    if (a.find(':') != std::string::npos) cmd.push_back("nodad");
    Run(cmd, &rc);
    if (rc != 0) return absl::InternalError("ip addr add " + a + " failed");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Dnsmasq>> Dnsmasq::Start(const std::string& listen,
                                                       const std::vector<std::string>& args) {
  auto d = std::make_unique<Dnsmasq>();
  char tmpl[] = "/tmp/egr-dnsmasq-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp");
  d->dir_ = tmpl;
  d->log_ = d->dir_ + "/queries.log";
  std::vector<std::string> argv = {"dnsmasq",
                                   "--keep-in-foreground",
                                   "--conf-file=/dev/null",
                                   "--no-resolv",
                                   "--no-hosts",
                                   "--no-poll",
                                   "--user=root",
                                   "--pid-file=",
                                   "--bind-interfaces",
                                   "--listen-address=" + listen,
                                   "--port=53",
                                   "--log-queries",
                                   "--log-facility=" + d->log_,
                                   "--host-record=ready.probe.test,192.0.2.250"};
  argv.insert(argv.end(), args.begin(), args.end());
  d->pid_ = fork();
  if (d->pid_ == 0) {
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execvp(a[0], a.data());
    _exit(127);
  }
  // Ready once it answers.
  Bytes probe = MakeQuery("ready.probe.test");
  for (int i = 0; i < 50; ++i) {
    if (UdpExchange(listen, 53, probe, std::chrono::milliseconds(100))) return d;
    int status = 0;
    if (waitpid(d->pid_, &status, WNOHANG) == d->pid_) {
      d->pid_ = -1;
      return absl::InternalError("dnsmasq exited at start");
    }
  }
  return absl::DeadlineExceededError("dnsmasq did not answer within 5 s");
}

Dnsmasq::~Dnsmasq() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  if (!dir_.empty()) Run({"rm", "-rf", dir_});
}

int Dnsmasq::QueriesFor(const std::string& name) const {
  std::ifstream in(log_);
  std::string line;
  int n = 0;
  const std::string want = " " + absl::AsciiStrToLower(name) + " from ";
  while (std::getline(in, line)) {
    if (line.find("query[") != std::string::npos && absl::AsciiStrToLower(line).find(want) != std::string::npos) ++n;
  }
  return n;
}

bool Dnsmasq::WaitForQuery(const std::string& name, std::chrono::milliseconds limit) const {
  // dnsmasq writes its log on its own schedule: wake on each write (inotify)
  // until the line is there or the limit passes.
  int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0) return false;
  inotify_add_watch(fd, log_.c_str(), IN_MODIFY);
  auto deadline = std::chrono::steady_clock::now() + limit;
  bool found = false;
  while (!(found = QueriesFor(name) > 0)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left.count())) == 1) {
      char buf[4096];
      while (read(fd, buf, sizeof(buf)) > 0) {
      }
    }
  }
  close(fd);
  return found;
}

std::optional<Bytes> UdpExchange(const std::string& addr, uint16_t port, const Bytes& query,
                                 std::chrono::milliseconds timeout) {
  sockaddr_storage ss;
  socklen_t len;
  if (!FillAddr(addr, port, ss, len)) return std::nullopt;
  int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  std::optional<Bytes> out;
  if (sendto(fd, query.data(), query.size(), 0, reinterpret_cast<sockaddr*>(&ss), len) ==
      static_cast<ssize_t>(query.size())) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(timeout.count())) == 1) {
      Bytes buf(65535);
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

std::vector<Bytes> TcpPipelined(const std::string& addr, uint16_t port, const std::vector<Bytes>& queries,
                                std::chrono::milliseconds timeout) {
  sockaddr_storage ss;
  socklen_t len;
  if (!FillAddr(addr, port, ss, len)) return {};
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  std::vector<Bytes> out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0) {
    Bytes all;
    for (const Bytes& q : queries) {
      all.push_back(q.size() >> 8);
      all.push_back(q.size() & 0xff);
      all.insert(all.end(), q.begin(), q.end());
    }
    if (write(fd, all.data(), all.size()) == static_cast<ssize_t>(all.size())) {
      auto deadline = std::chrono::steady_clock::now() + timeout;
      for (size_t i = 0; i < queries.size(); ++i) {
        uint8_t l[2];
        if (!ReadFull(fd, l, 2, deadline)) break;
        Bytes m((size_t{l[0]} << 8) | l[1]);
        if (!ReadFull(fd, m.data(), m.size(), deadline)) break;
        out.push_back(std::move(m));
      }
    }
  }
  close(fd);
  return out;
}

}  // namespace egressd::dns::testing
