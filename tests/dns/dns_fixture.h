// The DNS proxy's own small world for its privileged test: the test process
// moves into a fresh network namespace of its own (gone when it exits, so
// nothing can be left behind), a real dnsmasq upstream in it, and raw
// clients.  tests/lab/lab_dns will replace this at merge.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/dns/dns_wire.h"

namespace egressd::dns::testing {

// unshare(CLONE_NEWNET) for the calling thread (call before any thread
// starts: threads inherit it), lo up, and `addrs` ("192.0.2.53/32",
// "2001:db8::1/128") on lo.
absl::Status EnterPrivateNetns(const std::vector<std::string>& addrs);

// Runs argv, returns its stdout; its exit code in *rc.
std::string Run(const std::vector<std::string>& argv, int* rc = nullptr);

class Dnsmasq {
 public:
  // dnsmasq in the foreground at listen:53, authoritative for what `args`
  // say (--host-record=..., --cname=..., --addn-hosts=...), logging every query
  // to a file.  Returns once it answers a probe query.
  static absl::StatusOr<std::unique_ptr<Dnsmasq>> Start(const std::string& listen, const std::vector<std::string>& args);
  ~Dnsmasq();

  // How many queries for `name` (any case) the upstream has logged.
  int QueriesFor(const std::string& name) const;
  // Waits (bounded) until the log shows a query for `name`: the positive
  // control that the log is current.
  bool WaitForQuery(const std::string& name, std::chrono::milliseconds limit) const;

 private:
  pid_t pid_ = -1;
  std::string dir_, log_;
};

// One UDP exchange (nullopt on timeout).
std::optional<Bytes> UdpExchange(const std::string& addr, uint16_t port, const Bytes& query,
                                 std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));
// Several queries written at once on one TCP connection; the answers in the
// order they arrive (empty on error).
std::vector<Bytes> TcpPipelined(const std::string& addr, uint16_t port, const std::vector<Bytes>& queries,
                                std::chrono::milliseconds timeout = std::chrono::milliseconds(3000));

}  // namespace egressd::dns::testing
