// A TCP echo server on every lab host address of a network namespace (the
// lab's world), counting per local address the connections it accepted and
// the newline-terminated lines it received: what a long flow's rounds
// (egressd-probe hold) delivered, counted at the lab host rather than taken
// from the client.  The lab's own TCP servers count accepts only.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace egressd::test {

class RoundEcho {
 public:
  // Listens on [::]:port (dual stack) inside `netns_path`; ready() says
  // whether the socket is bound and listening (it is, once this returns).
  RoundEcho(const std::string& netns_path, uint16_t port);
  ~RoundEcho();
  RoundEcho(const RoundEcho&) = delete;
  RoundEcho& operator=(const RoundEcho&) = delete;

  bool ready() const { return ready_; }
  uint16_t port() const { return port_; }
  // Counted per local address (IPv4 as dotted quad).
  uint64_t Accepts(const std::string& addr) const;
  uint64_t Lines(const std::string& addr) const;

 private:
  void Loop(int listen_fd);

  uint16_t port_;
  bool ready_ = false;
  int stop_fd_ = -1;  // eventfd: the loop returns once it is readable
  std::thread thread_;
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> accepts_, lines_;
};

}  // namespace egressd::test
