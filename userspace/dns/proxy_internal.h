// What DnsProxy's endpoint servers share (proxy.cc's TCP, udp_endpoint.cc's
// UDP): the proxy-wide state, one sandbox's live state, and the one flow a
// message goes through.  Internal to userspace/dns.
#ifndef EGRESSD_USERSPACE_DNS_PROXY_INTERNAL_H_
#define EGRESSD_USERSPACE_DNS_PROXY_INTERNAL_H_

#include <netinet/in.h>
#include <sys/socket.h>

#include <functional>
#include <memory>
#include <span>
#include <string>

#include <boost/system/error_code.hpp>

#include "absl/status/status.h"
#include "userspace/dns/learned_book.h"
#include "userspace/dns/proxy.h"

#ifndef IPV6_FREEBIND
#define IPV6_FREEBIND 78
#endif

namespace egressd::dns {

struct DnsProxy::Shared {
  Upstream& upstream;
  LearnedAddressSink& sink;
  ProxyOptions opts;
  Counters* counters;
  bool alive = true;
  // Queries waiting on the upstream (a hand-over's old daemon exits once
  // this is 0, docs/operations.md "Upgrades").
  size_t forwarded = 0;
};

namespace proxy_internal {

using Shared = DnsProxy::Shared;

// What every socket of one sandbox shares: the scope in force (swapped whole
// by a policy update; a query keeps the scope it was judged by) and whether
// the sandbox is still served.
struct Live {
  std::shared_ptr<const SandboxScope> scope;
  bool stopped = false;
  // What the sandbox learned, by name (learned_book.h); kept across scope
  // updates and endpoint moves.
  std::shared_ptr<LearnedBook> book;
};

using Reply = std::function<void(Bytes)>;

// One message through the flow; `reply` gets the answer, now or once the
// upstream answered and every learned write returned (empty: no answer).
// `msg` is read before this returns, never after.
void Handle(const std::shared_ptr<Shared>& sh, const std::shared_ptr<Live>& live, std::span<const uint8_t> msg,
            bool over_tcp, Reply reply);

absl::Status FromAsio(const boost::system::error_code& ec, const std::string& what);

// Lets an endpoint be bound before its address is configured on an
// interface (the kernel steers to it; the address may come and go).
template <typename Socket>
void FreeBind(Socket& s, bool v6) {
  int one = 1;
  if (v6) {
    setsockopt(s.native_handle(), IPPROTO_IPV6, IPV6_FREEBIND, &one, sizeof(one));
  } else {
    setsockopt(s.native_handle(), IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
  }
}

}  // namespace proxy_internal
}  // namespace egressd::dns

#endif  // EGRESSD_USERSPACE_DNS_PROXY_INTERNAL_H_
