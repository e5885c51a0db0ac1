// egr-dns-load, the speed rows' generator, keeps its promises past 60,000
// queries a second: a rate whose queries outnumber one socket's 16-bit IDs
// within a timeout goes out over several sockets, and every answer is still
// matched to its own query (answered == answers the responder sent, none
// taken for another's).  Its rate search relied on this: above 60,000/s the
// generator used to refuse its flags, and the search read that as the path's
// capacity.  Bad flags exit 2.  Unprivileged: a responder on loopback.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

struct Result {
  int exit_code = -1;
  std::string out;
};

Result RunLoad(const std::string& args) {
  const std::string cmd = std::string(EGR_DNS_LOAD_PATH) + " " + args + " 2>/dev/null";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Answers every query it reads (QR set, the rest echoed) and notes each
// query's source port, until stopped.
class Responder {
 public:
  Responder() {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int buf = 8 << 20;
    (void)setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof(buf));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port_ = ntohs(a.sin_port);
    }
    thread_ = std::thread([this] { Serve(); });
  }
  ~Responder() {
    Stop();
    close(fd_);
  }
  uint16_t port() const { return port_; }
  size_t answers() const { return answers_; }
  const std::set<uint16_t>& ports() const { return ports_; }  // after Stop()
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Serve() {
    uint8_t m[512];
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      sockaddr_in from{};
      socklen_t len = sizeof(from);
      const ssize_t n = recvfrom(fd_, m, sizeof(m), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &len);
      if (n < 12) continue;
      m[2] |= 0x80;
      ports_.insert(ntohs(from.sin_port));
      if (sendto(fd_, m, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), len) == n) ++answers_;
    }
  }
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> answers_{0};
  std::set<uint16_t> ports_;
  std::thread thread_;
};

TEST(DnsLoad, PastOneSocketsIdsEveryAnswerIsMatchedToItsOwnQuery) {
  Responder r;
  ASSERT_NE(r.port(), 0);
  // 90,000 queries in 0.6 s: more than one socket's 65,536 IDs within the
  // 1 s timeout, so three sockets.
  Result res = RunLoad("--server 127.0.0.1 --port " + std::to_string(r.port()) +
                       " --name x.load.test --rate 150000 --seconds 0.6 --timeout-ms 1000");
  r.Stop();
  ASSERT_EQ(res.exit_code, 0) << res.out;
  const nlohmann::json j = nlohmann::json::parse(res.out);
  EXPECT_EQ(j["sent"].get<size_t>(), 90000u);
  EXPECT_EQ(r.ports().size(), 3u);
  ASSERT_GT(r.answers(), 0u);
  // Each answer the responder sent is counted once, for the query it
  // answers: none lost on loopback, none matched twice or to another query.
  EXPECT_EQ(j["answered"].get<size_t>(), r.answers());
  EXPECT_EQ(j["rcodes"]["NOERROR"].get<size_t>(), r.answers());
}

TEST(DnsLoad, OneSocketUpToSixtyThousandASecond) {
  Responder r;
  Result res = RunLoad("--server 127.0.0.1 --port " + std::to_string(r.port()) +
                       " --name x.load.test --rate 2000 --seconds 0.2");
  r.Stop();
  ASSERT_EQ(res.exit_code, 0) << res.out;
  EXPECT_EQ(r.ports().size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(res.out)["answered"].get<size_t>(), r.answers());
}

TEST(DnsLoad, BadFlagsExitTwo) {
  EXPECT_EQ(RunLoad("--server 127.0.0.1 --name x.test --rate 1000001 --seconds 1").exit_code, 2);
  EXPECT_EQ(RunLoad("--server 127.0.0.1 --name x.test --rate 1000000 --seconds 61").exit_code, 2);
  EXPECT_EQ(RunLoad("--server 127.0.0.1 --name x.test --rate 0 --seconds 1").exit_code, 2);
  EXPECT_EQ(RunLoad("--server not-an-ip --name x.test --rate 10 --seconds 1").exit_code, 2);
}

}  // namespace
