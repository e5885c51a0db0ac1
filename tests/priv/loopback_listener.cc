#include "loopback_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

namespace egressd::test {

LoopbackListener::LoopbackListener(const std::string& netns_path)
    : stop_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  std::promise<bool> ready;
  std::future<bool> is_ready = ready.get_future();
  thread_ = std::thread([this, netns_path, r = std::move(ready)]() mutable {
    Loop(netns_path, std::move(r));
  });
  ready_ = stop_fd_ >= 0 && is_ready.get();
}

LoopbackListener::~LoopbackListener() {
  uint64_t one = 1;
  if (stop_fd_ >= 0) (void)!write(stop_fd_, &one, sizeof(one));
  thread_.join();
  if (stop_fd_ >= 0) close(stop_fd_);
}

void LoopbackListener::Loop(std::string netns_path, std::promise<bool> ready) {
  if (stop_fd_ < 0) return ready.set_value(false);
  if (!netns_path.empty()) {
    int ns = open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) return ready.set_value(false);
    close(ns);
  }
  // One dual-stack socket of each kind on ::, reachable at 127.0.0.1 and ::1
  // (the lab netns has only loopback routes for these).
  int t = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int u = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int off = 0, on = 1;
  setsockopt(t, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
  setsockopt(u, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
  setsockopt(t, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_any;
  socklen_t len = sizeof(a);
  if (bind(t, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(t, 16) != 0)
    return ready.set_value(false);
  getsockname(t, reinterpret_cast<sockaddr*>(&a), &len);
  tcp_port_ = ntohs(a.sin6_port);
  a.sin6_port = 0;
  if (bind(u, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return ready.set_value(false);
  len = sizeof(a);
  getsockname(u, reinterpret_cast<sockaddr*>(&a), &len);
  udp_port_ = ntohs(a.sin6_port);
  ready.set_value(true);
  for (;;) {
    pollfd fds[3] = {{t, POLLIN, 0}, {u, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(fds, 3, -1) <= 0) continue;
    if (fds[2].revents) break;
    if (fds[0].revents & POLLIN) {
      int c = accept4(t, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) {
        ++accepts_;
        char buf[256];
        pollfd in = {c, POLLIN, 0};
        ssize_t n = poll(&in, 1, 1000) > 0 ? recv(c, buf, sizeof(buf), 0) : 0;
        if (n > 0) send(c, buf, n, MSG_NOSIGNAL);
        close(c);
      }
    }
    if (fds[1].revents & POLLIN) {
      char buf[512];
      sockaddr_in6 from{};
      socklen_t flen = sizeof(from);
      ssize_t n = recvfrom(u, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &flen);
      if (n >= 0) {
        ++datagrams_;
        sendto(u, buf, n, 0, reinterpret_cast<sockaddr*>(&from), flen);
      }
    }
  }
  close(t);
  close(u);
}

}  // namespace egressd::test
