// The configured upstream resolvers, asked through c-ares (transport,
// timeouts, retries, several servers) driven from the proxy's Asio loop by
// its socket fds.  Only the servers given here are ever asked: never one a
// sandbox chose.
#ifndef EGRESSD_USERSPACE_DNS_UPSTREAM_H_
#define EGRESSD_USERSPACE_DNS_UPSTREAM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "absl/status/statusor.h"
#include "userspace/dns/message.h"
#include "userspace/net/ip.h"

namespace egressd::dns {

struct UpstreamServer {
  net::IpAddr addr;
  uint16_t port = 53;
  // "192.0.2.1:53", "[2001:db8::1]:53"
  std::string ToString() const;
};

// "IP", "IP:PORT", "[IPv6]" or "[IPv6]:PORT"; InvalidArgument names the text.
absl::StatusOr<UpstreamServer> ParseUpstreamServer(std::string_view text);

class UpstreamGuard;  // upstream_socket.h

struct UpstreamOptions {
  std::vector<UpstreamServer> servers;
  int timeout_ms = 2000;  // per try; c-ares doubles it per round
  int tries = 2;          // rounds over the server list
  // SO_MARK on every upstream socket (0: none).  For a forwarder whose own
  // queries a packet filter exempts by mark (bench/'s nftables incumbent);
  // egressd's proxy needs none: its cgroup is no sandbox.
  uint32_t socket_mark = 0;
  // Where each upstream socket can be reached, written before it connects
  // and removed after it closes (upstream_socket.h: the daemon's kernel
  // guard).  Null: the sockets are only bound to their route's interface
  // (the benchmarks' forwarders, which run beside no sandbox).
  std::shared_ptr<UpstreamGuard> guard;
};

class Upstream {
 public:
  using Callback = std::function<void(absl::StatusOr<Bytes>)>;

  // InvalidArgument without a server.
  static absl::StatusOr<std::unique_ptr<Upstream>> Create(boost::asio::io_context& io, const UpstreamOptions& opts);
  ~Upstream();
  Upstream(const Upstream&) = delete;
  Upstream& operator=(const Upstream&) = delete;

  // Sends `query` (c-ares gives it a fresh random ID) over TCP or UDP; `done`
  // runs in the loop with the answer, or why there is none.  A truncated UDP
  // answer is returned as it is (TC set), not retried over TCP: one upstream
  // query per client query, and the client retries over TCP itself.
  void Send(std::span<const uint8_t> query, bool tcp, Callback done);

  // The UDP sockets c-ares was given so far: prepared ahead (one guarded
  // server: upstream_socket.h GuardedSockets) or made for the query at hand.
  struct UdpSockets {
    uint64_t prepared = 0, made_for_query = 0;
    uint64_t route_lookups = 0;  // for the prepared ones
  };
  UdpSockets udp_sockets() const;

  struct Channel;

 private:
  Upstream() = default;
  std::shared_ptr<Channel> udp_, tcp_;
};

}  // namespace egressd::dns

#endif  // EGRESSD_USERSPACE_DNS_UPSTREAM_H_
