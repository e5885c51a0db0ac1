// The DNS proxy: one UDP socket and one TCP listener per sandbox endpoint
// (per family), on the caller's Asio loop, so the daemon hosts it beside its
// API in one event loop.  The socket a query arrives on IS the sandbox: the
// kernel steers each sandbox's port-53 traffic to that sandbox's endpoint, and
// the source address a packet claims is never read as identity.
#ifndef EGRESSD_USERSPACE_DNS_PROXY_H_
#define EGRESSD_USERSPACE_DNS_PROXY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "userspace/common/unique_fd.h"
#include "userspace/dns/events.h"
#include "userspace/dns/learned_book.h"
#include "userspace/dns/qname_key.h"
#include "userspace/dns/learner.h"
#include "userspace/dns/query_flow.h"
#include "userspace/dns/upstream.h"
#include "userspace/net/dns_endpoint.h"
#include "userspace/net/ip.h"

namespace egressd::dns {

// Where a sandbox's queries arrive (the record's "dns" field).
using Endpoint = net::DnsEndpoint;

struct ProxyOptions {
  Lifetime lifetime;
  // What each sandbox may learn (learned_book.h; dns.maxAddressesPerSandbox
  // and dns.maxAddressesPerName of the deployment config).
  Bounds bounds;
  size_t max_tcp_connections = 64;   // per endpoint and family
  size_t max_tcp_in_flight = 32;     // queries pipelined on one connection
  int tcp_idle_ms = 10000;           // an idle connection is closed
  // SO_RCVBUF of each endpoint's UDP socket (SO_RCVBUFFORCE when the
  // process may, past net.core.rmem_max), in bytes as setsockopt takes them
  // (the kernel reports twice that, its bookkeeping included).  Sized for a
  // burst, not a rate (docs/dns.md, "Receive buffers"); 0: the kernel's
  // default.
  int udp_receive_buffer = kDefaultUdpReceiveBuffer;
  static constexpr int kDefaultUdpReceiveBuffer = 1 << 20;
  // The node's key for question-name ids (qname_key.h; QnameKey::PathIn
  // the instance's runtime directory).  Null: learned entries carry no
  // question-name id (narrowing keeps nothing by name, restarts adopt nothing).
  std::shared_ptr<const QnameKey> qname_key;
  // Told of every message once answered (the audit trail); must outlive the
  // proxy.  Null: nobody.
  QueryObserver* observer = nullptr;
};

class DnsProxy {
 public:
  DnsProxy(boost::asio::io_context& io, Upstream& upstream, LearnedAddressSink& sink, ProxyOptions opts = {});
  ~DnsProxy();
  DnsProxy(const DnsProxy&) = delete;
  DnsProxy& operator=(const DnsProxy&) = delete;

  // Serves `scope` at `ep` (binds its sockets), or updates the scope of a
  // sandbox already served at the same endpoint.  A sandbox moved to another
  // endpoint is rebound.  Fails naming the endpoint when a bind fails.  The
  // sandbox's book of learned addresses survives both; an update drops from
  // it the names the new scope no longer allows.
  absl::Status Serve(SandboxScope scope, const Endpoint& ep);
  // Stops serving a sandbox: its sockets close and answers still in flight
  // are neither learned nor delivered.
  void Stop(uint64_t sandbox_id);
  bool Serves(uint64_t sandbox_id) const { return sandboxes_.count(sandbox_id) > 0; }
  size_t size() const { return sandboxes_.size(); }
  std::vector<uint64_t> Served() const {
    std::vector<uint64_t> ids;
    for (const auto& [id, s] : sandboxes_) ids.push_back(id);
    return ids;
  }

  const Counters& counters() const { return counters_; }

  // What the kernel's resolved map holds for `sandbox_id` (read once at
  // start): its book starts from these when it is first served (SeedBook).
  void Seed(uint64_t sandbox_id, std::vector<LearnedSeed> seeds) { seeds_[sandbox_id] = std::move(seeds); }
  size_t seeded() const { return seeded_; }

  // Serves the readiness self-test (self_test.h): one UDP socket on `addr`,
  // port chosen by the kernel, with a scope that allows no name, so every
  // query there is answered NXDOMAIN by the proxy itself through the same
  // receive, parse, scope and denial code as a sandbox's.  It is no sandbox:
  // own counters, never audited.  Returns the bound endpoint.
  absl::StatusOr<Endpoint> ServeSelfTest(const net::IpAddr& addr);
  const Counters& self_test_counters() const { return self_test_counters_; }

  struct Sandbox;
  struct Shared;

  // The daemons' hand-over (userspace/daemon/handover.h).  Every endpoint's
  // bound sockets, as the proxy holds them (fds it keeps owning).
  struct ListeningSocket {
    bool tcp = false;
    uint64_t sandbox_id = 0;
    net::IpAddr addr;
    uint16_t port = 0;
    int fd = -1;
  };
  std::vector<ListeningSocket> ListeningSockets() const;
  // A socket the previous daemon handed over: Serve at (addr, port) takes
  // it instead of binding one, so the endpoint is never closed.  From the
  // first Inherit until ReadInherited(), Serve starts no receive and no
  // accept on any socket: the previous daemon still reads them, and a
  // receive started here takes a waiting datagram off the shared socket at
  // once (Asio reads speculatively), lost if this daemon dies before it
  // said it serves.
  void Inherit(bool tcp, const net::IpAddr& addr, uint16_t port, UniqueFd fd);
  // This daemon serves now (it told the previous one): every sandbox's
  // receives and accepts start, and Serve starts them at once from here on.
  void ReadInherited();
  // Reads no more queries and accepts no more connections (the sockets are
  // served by the next daemon); queries read are still answered.
  void Quiesce();
  // Queries waiting on the upstream plus TCP connections still open.
  size_t Busy() const;
  void CloseConnections();

 private:
  static std::string InheritedKey(bool tcp, const net::IpAddr& addr, uint16_t port);
  UniqueFd TakeInherited(bool tcp, const net::IpAddr& addr, uint16_t port);
  boost::asio::io_context& io_;
  std::shared_ptr<Shared> shared_;
  std::map<uint64_t, std::shared_ptr<Sandbox>> sandboxes_;
  Counters counters_;
  std::map<uint64_t, std::vector<LearnedSeed>> seeds_;
  size_t seeded_ = 0;
  std::shared_ptr<Shared> self_test_shared_;
  std::shared_ptr<Sandbox> self_test_;
  Counters self_test_counters_;
  std::map<std::string, UniqueFd> inherited_;
  bool hold_reads_ = false;  // Inherit() .. ReadInherited()
};

}  // namespace egressd::dns

#endif  // EGRESSD_USERSPACE_DNS_PROXY_H_
