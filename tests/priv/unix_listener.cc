#include "unix_listener.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

namespace egressd::test {

UnixListener::UnixListener(std::string path, std::string reply)
    : path_(std::move(path)), reply_(std::move(reply) + "\n") {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path_.size() >= sizeof(sa.sun_path)) return;
  std::memcpy(sa.sun_path, path_.data(), path_.size());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  unlink(path_.c_str());
  // 0666 like the services it stands for (docker.sock is 0660 root:docker).
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || chmod(path_.c_str(), 0666) != 0 ||
      listen(fd, 16) != 0) {
    close(fd);
    return;
  }
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) {
    close(fd);
    return;
  }
  fd_ = fd;
  thread_ = std::thread([this] { Loop(); });
}

UnixListener::~UnixListener() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (fd_ >= 0) close(fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
  unlink(path_.c_str());
}

void UnixListener::Loop() {
  for (;;) {
    pollfd p[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) continue;
    if (p[1].revents) return;
    int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    ++accepts_;
    // One request line (whatever it says), then the answer.
    pollfd in{c, POLLIN, 0};
    char buf[512];
    if (poll(&in, 1, 2000) > 0) (void)!read(c, buf, sizeof(buf));
    (void)!write(c, reply_.data(), reply_.size());
    close(c);
  }
}

}  // namespace egressd::test
