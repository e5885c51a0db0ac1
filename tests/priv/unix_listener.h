// A pathname unix stream socket standing in for a node service under /run
// (containerd, docker, D-Bus, nscd): it answers each connection with one
// line and closes, counting the connections it accepted.
#pragma once

#include <atomic>
#include <string>
#include <thread>

namespace egressd::test {

class UnixListener {
 public:
  // Listening (ready()) once the constructor returns, or not at all.
  UnixListener(std::string path, std::string reply);
  ~UnixListener();
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;
  bool ready() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  uint64_t accepts() const { return accepts_; }

 private:
  void Loop();
  std::string path_, reply_;
  int fd_ = -1;
  int stop_fd_ = -1;  // eventfd: the loop returns once it is readable
  std::atomic<uint64_t> accepts_{0};
  std::thread thread_;
};

}  // namespace egressd::test
