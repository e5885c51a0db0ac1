// A real DNS server for the lab: dnsmasq in one of the lab's namespaces,
// answering only the records it is given (no upstream, no hosts file, no
// config file), logging every query it receives so a test can count them.
// Used as the world's resolvers (the lab upstream, and 8.8.8.8 that must see
// nothing), as a stand-in for egressd's DNS proxy on a sandbox's endpoint,
// as the proxy's upstream in a test process's private netns
// (tests/dns/dns_proxy_priv_test.cc), and as a pod's own resolver.  Also the
// raw DNS clients those tests share (UdpExchange, TcpPipelined).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lab.h"

namespace egressd::lab {

struct DnsServerSpec {
  std::string netns;               // /var/run/netns/NAME path of the namespace it serves in
  std::vector<std::string> listen; // addresses it binds (each must be local there)
  uint16_t port = 53;
  // name -> addresses (A or AAAA by family), answered authoritatively.
  std::map<std::string, std::vector<std::string>> records;
  // alias -> target (a name of `records`): answered as a CNAME chain.
  std::map<std::string, std::string> cnames;
  // More dnsmasq options, after the rest (--address=/suffix/ADDR,
  // --addn-hosts=FILE, ...).
  std::vector<std::string> extra_args;
  // A cgroup2 directory dnsmasq runs in (a sandbox's, for a pod's own
  // resolver); empty: the caller's.
  std::string cgroup;
};

class DnsServer {
 public:
  // Starts dnsmasq and returns once it logged that it serves (its sockets are
  // bound before it says so).  The error names dnsmasq's own output.
  static absl::StatusOr<std::unique_ptr<DnsServer>> Start(const DnsServerSpec& spec);
  ~DnsServer();

  // Queries received so far (one "query[TYPE] NAME from ADDR" log line each).
  uint64_t Queries() const;
  // Queries received for `name` (any type, any case).
  uint64_t QueriesFor(const std::string& name) const;
  // Waits (bounded) until a query for `name` was logged: the positive control
  // that the log is current before a count of zero means anything.
  bool WaitForQuery(const std::string& name, std::chrono::milliseconds limit) const;
  // Its log, for failure messages.
  std::string Log() const;
  const DnsServerSpec& spec() const { return spec_; }

 private:
  DnsServer(DnsServerSpec spec, Background bg) : spec_(std::move(spec)), bg_(std::move(bg)) {}
  DnsServerSpec spec_;
  Background bg_;
};

// unshare(CLONE_NEWNET) for the calling thread (call it before any thread
// starts: threads and children inherit it), lo up, and `addrs`
// ("192.0.2.53/32", "2001:db8::1/128") on lo.  The namespace is gone when the
// process exits, so nothing can be left behind.
absl::Status EnterPrivateNetns(const std::vector<std::string>& addrs);

// One UDP exchange with addr:port from the caller's netns (nullopt on
// timeout).
std::optional<std::vector<uint8_t>> UdpExchange(const std::string& addr, uint16_t port,
                                                const std::vector<uint8_t>& query,
                                                std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));
// Several queries written at once on one TCP connection; the answers in the
// order they arrive (empty on error).
std::vector<std::vector<uint8_t>> TcpPipelined(const std::string& addr, uint16_t port,
                                               const std::vector<std::vector<uint8_t>>& queries,
                                               std::chrono::milliseconds timeout = std::chrono::milliseconds(3000));

}  // namespace egressd::lab
