// --upstream-dns values.
#include <gtest/gtest.h>

#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <vector>

#include "userspace/dns/upstream.h"
#include "userspace/dns/upstream_socket.h"

namespace egressd::dns {
namespace {

TEST(DnsUpstreamServer, Parses) {
  auto a = ParseUpstreamServer("192.0.2.53");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->ToString(), "192.0.2.53:53");
  auto b = ParseUpstreamServer("192.0.2.53:5353");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->port, 5353);
  auto c = ParseUpstreamServer("[2001:db8::53]:54");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->ToString(), "[2001:db8::53]:54");
  auto d = ParseUpstreamServer("2001:db8::53");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->port, 53);
}

TEST(DnsUpstreamServer, RejectsNamingTheValue) {
  for (const char* bad : {"", "dns.google", "192.0.2.1:0", "192.0.2.1:65536", "192.0.2.1:", "[2001:db8::1",
                          "[2001:db8::1]x", "300.1.1.1"}) {
    auto r = ParseUpstreamServer(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("\"") + bad), std::string::npos) << r.status();
  }
}

// The upstream socket is bound to the interface its upstream is routed over
// (a local address: lo), so packets arriving on any other interface (a pod's
// veth) never reach it.
TEST(DnsUpstreamSocket, IsBoundToTheRoutesInterfaceBeforeItConnects) {
  const int lo = static_cast<int>(if_nametoindex("lo"));
  ASSERT_GT(lo, 0);
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  v4.sin_port = htons(53);
  v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  auto i4 = RouteOutputInterface(reinterpret_cast<sockaddr*>(&v4), sizeof(v4));
  ASSERT_TRUE(i4.ok()) << i4.status();
  EXPECT_EQ(*i4, lo);
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_port = htons(53);
  v6.sin6_addr = in6addr_loopback;
  auto i6 = RouteOutputInterface(reinterpret_cast<sockaddr*>(&v6), sizeof(v6));
  if (i6.ok()) {  // (a host without IPv6 has no route to ::1)
    EXPECT_EQ(*i6, lo);
  }

  const ares_socket_functions* f = InterfaceBoundSocketFunctions();
  ares_socket_t fd = f->asocket(AF_INET, SOCK_DGRAM, 0, nullptr);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(f->aconnect(fd, reinterpret_cast<sockaddr*>(&v4), sizeof(v4), nullptr), 0) << strerror(errno);
  int bound = 0;
  socklen_t len = sizeof(bound);
  ASSERT_EQ(getsockopt(fd, SOL_SOCKET, SO_BINDTOIFINDEX, &bound, &len), 0) << strerror(errno);
  EXPECT_EQ(bound, lo);
  EXPECT_EQ(f->aclose(fd, nullptr), 0);
}

TEST(DnsUpstreamSocket, AnAddressOfNoIpFamilyHasNoRoute) {
  sockaddr_in v4{};
  v4.sin_family = AF_UNIX;  // no family a route lookup knows
  auto r = RouteOutputInterface(reinterpret_cast<sockaddr*>(&v4), sizeof(v4));
  EXPECT_FALSE(r.ok());
}


// The guarded functions: bound to the route's source address before the
// guard is written, the guard written before connect() with the address and
// port the socket really has, removed after close; a guard that cannot be
// written leaves the socket unconnected.
class FakeGuard : public UpstreamGuard {
 public:
  absl::Status Add(const net::IpAddr& addr, uint16_t port) override {
    if (refuse) return absl::AlreadyExistsError("guarded already");
    added.emplace_back(addr, port);
    return absl::OkStatus();
  }
  void Remove(const net::IpAddr& addr, uint16_t port) override { removed.emplace_back(addr, port); }
  bool refuse = false;
  std::vector<std::pair<net::IpAddr, uint16_t>> added, removed;
};

TEST(DnsUpstreamSocket, GuardedSocketsAreBoundGuardedBeforeConnectAndUnguardedAfterClose) {
  sockaddr_in up{};
  up.sin_family = AF_INET;
  up.sin_port = htons(53);
  up.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  FakeGuard guard;
  GuardedSockets g{.guard = &guard};
  const ares_socket_functions* f = GuardedSocketFunctions();
  for (int type : {SOCK_DGRAM, SOCK_STREAM}) {
    guard.added.clear();
    guard.removed.clear();
    ares_socket_t fd = f->asocket(AF_INET, type | SOCK_NONBLOCK, 0, &g);
    ASSERT_GE(fd, 0);
    const int rc = f->aconnect(fd, reinterpret_cast<sockaddr*>(&up), sizeof(up), &g);
    // TCP: in progress (or refused at once: nothing listens on 127.0.0.1:53).
    ASSERT_TRUE(rc == 0 || errno == EINPROGRESS || errno == ECONNREFUSED) << strerror(errno);
    sockaddr_in name{};
    socklen_t len = sizeof(name);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&name), &len), 0);
    ASSERT_EQ(guard.added.size(), 1u);
    EXPECT_EQ(guard.added[0].first.ToString(), "127.0.0.1") << "bound to the route's source address";
    EXPECT_EQ(guard.added[0].second, ntohs(name.sin_port));
    EXPECT_NE(guard.added[0].second, 0);
    EXPECT_TRUE(guard.removed.empty());
    EXPECT_EQ(f->aclose(fd, &g), 0);
    EXPECT_EQ(guard.removed, guard.added) << "the guard goes with the socket";
    EXPECT_TRUE(g.held.empty());
  }
  // A guard that cannot be written: not connected, and nothing to remove.
  guard.refuse = true;
  guard.added.clear();
  guard.removed.clear();
  ares_socket_t fd = f->asocket(AF_INET, SOCK_DGRAM, 0, &g);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(f->aconnect(fd, reinterpret_cast<sockaddr*>(&up), sizeof(up), &g), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  sockaddr_in peer{};
  socklen_t plen = sizeof(peer);
  EXPECT_NE(getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen), 0) << "connected without its guard";
  EXPECT_EQ(f->aclose(fd, &g), 0);
  EXPECT_TRUE(guard.removed.empty());
}

}  // namespace
}  // namespace egressd::dns
