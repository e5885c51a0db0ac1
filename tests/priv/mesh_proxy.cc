// egr-mesh-proxy: a service mesh's in-pod proxy for tests/priv/dns_mesh_test.
// The pod's nftables REDIRECTs its outbound TCP to 127.0.0.1:PORT; for each
// connection this reads the original destination (SO_ORIGINAL_DST), connects
// there itself (the connect egressd judges, this process being in the
// sandbox's cgroup) with SO_MARK MARK on its socket (the mark the pod's rules
// exempt from the redirect, as a mesh exempts its own traffic), and relays
// both ways.  One JSON line per connection on stdout:
//   {"orig":"192.0.2.11:80","result":"ok"}
//   {"orig":"10.244.0.1:20000","result":"error","errno":"EPERM"}
// Prints "ready" once listening.  IPv4 only (the test's pod rules are IPv4).
#include <arpa/inet.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

namespace {

std::mutex out_mu;

void Say(const std::string& line) {
  std::lock_guard<std::mutex> l(out_mu);
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

std::string ErrnoName(int e) {
  switch (e) {
    case EPERM:
      return "EPERM";
    case EACCES:
      return "EACCES";
    case ECONNREFUSED:
      return "ECONNREFUSED";
    case ETIMEDOUT:
      return "ETIMEDOUT";
    case ENETUNREACH:
      return "ENETUNREACH";
    case EHOSTUNREACH:
      return "EHOSTUNREACH";
    default:
      return std::to_string(e);
  }
}

// Copies each direction until both have ended.
void Relay(int a, int b) {
  bool a_open = true, b_open = true;
  char buf[16384];
  while (a_open || b_open) {
    pollfd p[2] = {{a, static_cast<short>(a_open ? POLLIN : 0), 0}, {b, static_cast<short>(b_open ? POLLIN : 0), 0}};
    if (poll(p, 2, 30000) <= 0) return;
    for (int i = 0; i < 2; ++i) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const int from = i == 0 ? a : b, to = i == 0 ? b : a;
      ssize_t n = read(from, buf, sizeof(buf));
      if (n <= 0) {
        shutdown(to, SHUT_WR);
        (i == 0 ? a_open : b_open) = false;
        continue;
      }
      if (write(to, buf, n) != n) return;
    }
  }
}

void Serve(int client, int mark) {
  sockaddr_in orig{};
  socklen_t len = sizeof(orig);
  if (getsockopt(client, SOL_IP, SO_ORIGINAL_DST, &orig, &len) != 0) {
    Say(std::string("{\"orig\":null,\"result\":\"error\",\"errno\":\"") + ErrnoName(errno) + "\"}");
    close(client);
    return;
  }
  char addr[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &orig.sin_addr, addr, sizeof(addr));
  const std::string where = std::string(addr) + ":" + std::to_string(ntohs(orig.sin_port));
  int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (up < 0 || setsockopt(up, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) != 0 ||
      connect(up, reinterpret_cast<sockaddr*>(&orig), sizeof(orig)) != 0) {
    Say("{\"orig\":\"" + where + "\",\"result\":\"error\",\"errno\":\"" + ErrnoName(errno) + "\"}");
    if (up >= 0) close(up);
    close(client);
    return;
  }
  Say("{\"orig\":\"" + where + "\",\"result\":\"ok\"}");
  Relay(client, up);
  close(up);
  close(client);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: egr-mesh-proxy PORT MARK\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const int mark = std::atoi(argv[2]);
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (l < 0 || bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || listen(l, 64) != 0) {
    std::fprintf(stderr, "egr-mesh-proxy: listen 127.0.0.1:%d: %s\n", port, std::strerror(errno));
    return 1;
  }
  Say("ready");
  for (;;) {
    int c = accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    std::thread(Serve, c, mark).detach();
  }
}
