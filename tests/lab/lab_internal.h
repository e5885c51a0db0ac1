// Internals shared by the lab's .cc files; not for tests.
#pragma once

#include <array>
#include <cstdint>
#include <condition_variable>
#include <deque>
#include <set>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "lab.h"

namespace egressd::lab {

using Addr16 = std::array<uint8_t, 16>;

// absl::string_view is not std::string_view in this Abseil build.
inline absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Runs a command (no netns/cgroup) and fails unless it exits 0.
absl::Status RunChecked(const std::vector<std::string>& argv, std::string_view stdin_data = "",
                        std::chrono::milliseconds timeout = std::chrono::milliseconds(15000));

absl::Status ErrnoStatus(std::string_view what, int err);
std::string ReadFileOr(const std::string& path, std::string fallback = "");
absl::Status WriteFile(const std::string& path, std::string_view data);

// Kills every process (other than us) whose network namespace is the one
// bound at `netns_path`. Returns how many were signalled.
int KillProcessesInNetns(const std::string& netns_path);
// Kills members of the cgroup tree at `dir` and removes it depth-first.
absl::Status RemoveCgroupTree(const std::string& dir);

// Counters and capture, fed by the server threads.
class Counters {
 public:
  void TcpAccept(const Addr16& local, uint16_t port);
  void UdpDatagram(const Addr16& dst, uint16_t port);
  void Packet(const CapturedPacket& p);
  void Marker(std::string token);          // the marker server read it; kept across Reset()
  void CapturedMarker(std::string token);  // the capture counted it; kept across Reset()
  void Reset();

  uint64_t Tcp(const Addr16& a, uint16_t port) const;
  uint64_t Udp(const Addr16& a, uint16_t port) const;
  uint64_t Packets(const Addr16& a, int proto, int first_header, bool options_only) const;
  uint64_t FlowsOpened(const Addr16& a) const;
  std::vector<CapturedPacket> Log() const;
  std::string Summary() const;
  // Waits until both the marker server and the capture saw `token` (true) or
  // the timeout passes. The two are separate threads reading separate sockets:
  // the server's read alone says nothing of what the capture has counted, so
  // a drain that waited only for it let a packet be counted after a Reset()
  // or after a "nothing arrived" check (CI: LabTest.ResetCountersZeroesEverything).
  bool WaitMarker(const std::string& token, std::chrono::milliseconds timeout) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable marker_cv_;
  std::set<std::string> markers_, captured_markers_;
  std::map<Addr16, uint64_t> flows_opened_;
  std::map<std::pair<Addr16, uint16_t>, uint64_t> tcp_, udp_;
  // (dst, proto, first_header, has_options)
  std::map<std::tuple<Addr16, int, int, bool>, uint64_t> packets_;
  std::deque<CapturedPacket> log_;
};

struct Lab::Impl {
  Counters counters;
  std::string cgroup_base;  // absolute, created lazily
  bool cgroup_created = false;
  std::vector<std::string> netns_added;  // names, in creation order
  int stop_fd = -1;  // eventfd: servers and capture exit when readable
  std::vector<std::thread> threads;
  int capture_fd = -1;          // the AF_PACKET socket, set before the capture is ready
  bool capture_paused = false;  // Lab::SetCapture(false): a drop-all filter on it
};

// Server/capture threads (lab_servers.cc). Returns once the sockets exist.
// The servers and the capture live in the world netns; the capture listens on
// `capture_ifname`, the world's link to the node.
absl::Status StartLabServers(Lab::Impl* impl, const std::string& world_netns,
                             const std::string& capture_ifname);
void StopLabServers(Lab::Impl* impl);

}  // namespace egressd::lab
