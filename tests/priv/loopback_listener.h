// A TCP and UDP listener on 127.0.0.1 and ::1 inside a given network
// namespace (a thread that setns()es), counting what arrives: the lab hosts
// of the loopback tests, which by definition live inside the sandbox's netns.
#pragma once

#include <atomic>
#include <future>
#include <string>
#include <thread>

namespace egressd::test {

class LoopbackListener {
 public:
  // Returns once the sockets are bound (ready()) or setting up failed.
  explicit LoopbackListener(const std::string& netns_path);  // "" = our own netns
  ~LoopbackListener();
  uint16_t tcp_port() const { return tcp_port_; }
  uint16_t udp_port() const { return udp_port_; }
  uint64_t tcp_accepts() const { return accepts_; }
  uint64_t udp_datagrams() const { return datagrams_; }
  bool ready() const { return ready_; }

 private:
  void Loop(std::string netns_path, std::promise<bool> ready);
  int stop_fd_ = -1;  // eventfd: the loop returns once it is readable
  std::thread thread_;
  bool ready_ = false;
  std::atomic<uint16_t> tcp_port_{0}, udp_port_{0};
  std::atomic<uint64_t> accepts_{0}, datagrams_{0};
};

}  // namespace egressd::test
