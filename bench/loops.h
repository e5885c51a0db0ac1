// The loops enforcer_bench times, each in a child that joins a pod's netns
// (and the sandbox cgroup, when egressd governs it) so the hooks under test
// see exactly what a sandboxed process would.  CPU is the child's own (user +
// system): the syscalls, the hooks and the stack they run.
#pragma once

#include <cstdint>
#include <string>

#include "bench_stats.h"
#include "lab.h"

namespace egressd::bench {

struct LoopResult {
  int ok = 0, failed = 0;
  double wall_s = 0, cpu_s = 0;
};

// connect() + the server's accept + close to dst:port (TCP, IPv4), n times.
// SO_LINGER 0: the close is a reset, so no TIME_WAIT exhausts the pod's ports.
LoopResult ConnectLoop(const std::string& netns, const std::string& cgroup, const char* dst, uint16_t port, int n);

// sendto() of a 64-byte datagram on one unconnected UDP socket, n times: every
// send names its destination, so egressd's sendmsg4 judges each one and the
// backstop sees each packet.
LoopResult UdpSendLoop(const std::string& netns, const std::string& cgroup, const char* dst, uint16_t port, int n);

// iperf3 (-J) from a pod to the world's iperf3 server: TCP bits/s, or 64-byte
// UDP datagrams received/s (-b 0: as fast as the sender can), with the
// client's CPU per unit (iperf3's host_total utilisation over the run).
struct IperfResult {
  bool ok = false;
  double value = 0;        // TCP: bits/s received; UDP: datagrams/s received
  double cpu_per_unit = 0; // TCP: client CPU s per GB; UDP: client CPU us per datagram
  double lost_percent = 0; // UDP only
  std::string error;
};
IperfResult Iperf3(const std::string& netns, const std::string& cgroup, const char* server, uint16_t port,
                   bool udp, int seconds);

// The world's iperf3 server (-s -B server -p port), ready when returned.
absl::StatusOr<lab::Background> StartIperf3Server(const lab::Lab& lab, const char* server, uint16_t port);

}  // namespace egressd::bench
