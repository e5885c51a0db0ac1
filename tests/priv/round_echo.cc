#include "round_echo.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <vector>

namespace egressd::test {
namespace {

// The local address of an accepted socket, IPv4-mapped shown as IPv4.
std::string LocalAddr(int fd) {
  sockaddr_in6 a{};
  socklen_t len = sizeof(a);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?";
  char buf[INET6_ADDRSTRLEN] = {};
  if (IN6_IS_ADDR_V4MAPPED(&a.sin6_addr)) {
    inet_ntop(AF_INET, &a.sin6_addr.s6_addr[12], buf, sizeof(buf));
  } else {
    inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

}  // namespace

RoundEcho::RoundEcho(const std::string& netns_path, uint16_t port)
    : port_(port), stop_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  std::promise<int> listening;
  std::future<int> fd = listening.get_future();
  // The thread enters the namespace (setns applies to the calling thread
  // only), binds there and serves until stopped.
  thread_ = std::thread([this, netns_path, p = std::move(listening)]() mutable {
    int ns = open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
    const bool in = ns >= 0 && setns(ns, CLONE_NEWNET) == 0;
    if (ns >= 0) close(ns);
    int l = in ? socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;
    int off = 0, on = 1;
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(port_);
    if (l >= 0 && (setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)) != 0 ||
                   setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
                   bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(l, 64) != 0)) {
      close(l);
      l = -1;
    }
    p.set_value(l);
    if (l >= 0) Loop(l);
  });
  ready_ = stop_fd_ >= 0 && fd.get() >= 0;
}

RoundEcho::~RoundEcho() {
  uint64_t one = 1;
  if (stop_fd_ >= 0) (void)!write(stop_fd_, &one, sizeof(one));
  thread_.join();
  if (stop_fd_ >= 0) close(stop_fd_);
}

uint64_t RoundEcho::Accepts(const std::string& addr) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = accepts_.find(addr);
  return it == accepts_.end() ? 0 : it->second;
}

uint64_t RoundEcho::Lines(const std::string& addr) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = lines_.find(addr);
  return it == lines_.end() ? 0 : it->second;
}

void RoundEcho::Loop(int listen_fd) {
  struct Conn {
    int fd;
    std::string addr;
  };
  std::vector<Conn> conns;
  for (;;) {
    std::vector<pollfd> fds = {{stop_fd_, POLLIN, 0}, {listen_fd, POLLIN, 0}};
    for (const auto& c : conns) fds.push_back({c.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) <= 0) continue;
    if (fds[0].revents) break;
    if (fds[1].revents & POLLIN) {
      int c = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c >= 0) {
        conns.push_back({c, LocalAddr(c)});
        std::lock_guard<std::mutex> l(mu_);
        ++accepts_[conns.back().addr];
      }
    }
    std::vector<int> gone;
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      const Conn& c = conns[i - 2];
      char buf[4096];
      ssize_t n = recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        {
          std::lock_guard<std::mutex> l(mu_);
          lines_[c.addr] += std::count(buf, buf + n, '\n');
        }
        // The rounds are a few bytes each, far below the send buffer: an
        // echo that cannot be sent whole means the peer is gone.
        if (send(c.fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL) != n) gone.push_back(c.fd);
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        gone.push_back(c.fd);
      }
    }
    for (int fd : gone) {
      close(fd);
      conns.erase(std::remove_if(conns.begin(), conns.end(), [&](const Conn& c) { return c.fd == fd; }),
                  conns.end());
    }
  }
  for (const auto& c : conns) close(c.fd);
  close(listen_fd);
}

}  // namespace egressd::test
