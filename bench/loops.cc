#include "loops.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>

namespace egressd::bench {
namespace {

double CpuSeconds() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  auto tv = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return tv(r.ru_utime) + tv(r.ru_stime);
}

// Runs body(ok, failed) in a forked child inside netns and cgroup, timing it
// (wall and the child's CPU); the figures come back over a pipe.
LoopResult InChild(const std::string& netns, const std::string& cgroup,
                   const std::function<void(int& ok, int& failed)>& body) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const int ns = open(netns.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) _exit(3);
    if (!cgroup.empty()) std::ofstream(cgroup + "/cgroup.procs") << getpid();
    const double c0 = CpuSeconds();
    const auto t0 = Clock::now();
    int ok = 0, failed = 0;
    body(ok, failed);
    const double wall = Seconds(Clock::now() - t0);
    const double cpu = CpuSeconds() - c0;
    char buf[128];
    const int len = std::snprintf(buf, sizeof(buf), "%d %d %.9f %.9f\n", ok, failed, wall, cpu);
    if (write(fds[1], buf, len) != len) _exit(4);
    _exit(0);
  }
  close(fds[1]);
  char buf[128] = {};
  const ssize_t got = pid > 0 ? read(fds[0], buf, sizeof(buf) - 1) : -1;
  close(fds[0]);
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  LoopResult r;
  if (got > 0) std::sscanf(buf, "%d %d %lf %lf", &r.ok, &r.failed, &r.wall_s, &r.cpu_s);
  return r;
}

sockaddr_in V4(const char* dst, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  inet_pton(AF_INET, dst, &sa.sin_addr);
  return sa;
}

}  // namespace

LoopResult ConnectLoop(const std::string& netns, const std::string& cgroup, const char* dst, uint16_t port,
                       int n) {
  return InChild(netns, cgroup, [&](int& ok, int& failed) {
    const sockaddr_in sa = V4(dst, port);
    const linger lg{1, 0};
    for (int i = 0; i < n; ++i) {
      const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (connect(s, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) == 0) {
        ++ok;
      } else {
        ++failed;
      }
      setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
      close(s);
    }
  });
}

LoopResult UdpSendLoop(const std::string& netns, const std::string& cgroup, const char* dst, uint16_t port,
                       int n) {
  return InChild(netns, cgroup, [&](int& ok, int& failed) {
    const sockaddr_in sa = V4(dst, port);
    const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    char payload[64] = "egressd bench";
    for (int i = 0; i < n; ++i) {
      if (sendto(s, payload, sizeof(payload), 0, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) ==
          static_cast<ssize_t>(sizeof(payload))) {
        ++ok;
      } else {
        ++failed;
      }
    }
    close(s);
  });
}

IperfResult Iperf3(const std::string& netns, const std::string& cgroup, const char* server, uint16_t port,
                   bool udp, int seconds) {
  std::vector<std::string> argv = {"iperf3", "-J", "-c", server, "-p", std::to_string(port), "-t",
                                   std::to_string(seconds)};
  if (udp) argv.insert(argv.end(), {"-u", "-l", "64", "-b", "0"});
  lab::RunResult r = lab::Run({.argv = argv, .netns = netns, .cgroup = cgroup, .hostile = false,
                               .timeout = std::chrono::seconds(seconds + 30), .env = {}, .stdin_data = ""});
  IperfResult out;
  const json j = json::parse(r.out, nullptr, false);
  if (r.exit_code != 0 || j.is_discarded() || !j.contains("end")) {
    out.error = j.is_discarded() ? r.Describe() : j.value("error", r.Describe());
    return out;
  }
  const json& end = j["end"];
  const double host_cpu = end.value("/cpu_utilization_percent/host_total"_json_pointer, 0.0) / 100.0;
  if (udp) {
    const json& sum = end["sum"];
    const double secs = sum.value("seconds", 0.0);
    const double packets = sum.value("packets", 0.0), lost = sum.value("lost_packets", 0.0);
    out.value = secs > 0 ? (packets - lost) / secs : 0;
    out.lost_percent = sum.value("lost_percent", 0.0);
    out.cpu_per_unit = packets > 0 ? host_cpu * secs / packets * 1e6 : 0;
  } else {
    const json& sum = end["sum_received"];
    const double secs = sum.value("seconds", 0.0), bytes = sum.value("bytes", 0.0);
    out.value = sum.value("bits_per_second", 0.0);
    out.cpu_per_unit = bytes > 0 ? host_cpu * secs / (bytes / 1e9) : 0;
  }
  out.ok = out.value > 0;
  return out;
}

absl::StatusOr<lab::Background> StartIperf3Server(const lab::Lab& lab, const char* server, uint16_t port) {
  auto bg = lab::Start({.argv = {"iperf3", "-s", "-B", server, "-p", std::to_string(port), "--forceflush"},
                        .netns = lab.world_netns(), .cgroup = "", .hostile = false,
                        .timeout = std::chrono::hours(4), .env = {}, .stdin_data = ""});
  if (!bg.ok()) return bg.status();
  // iperf3 prints "Server listening on PORT" once its socket listens.
  for (;;) {
    auto line = bg->ReadOutLine(std::chrono::seconds(10));
    if (!line) return absl::UnavailableError("iperf3 -s never said it listens: " + bg->err());
    if (line->find("Server listening") != std::string::npos) return std::move(*bg);
  }
}

}  // namespace egressd::bench
