// A real DNS server for the lab: dnsmasq in one of the lab's namespaces,
// answering only the records it is given (no upstream, no hosts file, no
// config file), logging every query it receives so a test can count them.
// Used as the world's resolvers (the lab upstream, and 8.8.8.8 that must see
// nothing) and as a stand-in for egressd's DNS proxy on a sandbox's endpoint.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
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
};

class DnsServer {
 public:
  // Starts dnsmasq and returns once it logged that it serves (its sockets are
  // bound before it says so).  The error names dnsmasq's own output.
  static absl::StatusOr<std::unique_ptr<DnsServer>> Start(const DnsServerSpec& spec);
  ~DnsServer();

  // Queries received so far (one "query[TYPE] NAME from ADDR" log line each).
  uint64_t Queries() const;
  // Queries received for `name` (any type).
  uint64_t QueriesFor(const std::string& name) const;
  // Its log, for failure messages.
  std::string Log() const;
  const DnsServerSpec& spec() const { return spec_; }

 private:
  DnsServer(DnsServerSpec spec, Background bg) : spec_(std::move(spec)), bg_(std::move(bg)) {}
  DnsServerSpec spec_;
  Background bg_;
};

}  // namespace egressd::lab
