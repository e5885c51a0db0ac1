// egr_dns_v1 and egr_dnsep_v1: the DNS endpoint of each sandbox (where the
// kernel steers its queries, bpf/lib/dns_redirect.h) and the reverse entry
// that guards it (only that sandbox's redirected sockets may reach it).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/common/unique_fd.h"
#include "userspace/net/dns_endpoint.h"
#include "userspace/net/ip.h"

namespace egressd::maps {

// One endpoint (userspace/net/dns_endpoint.h).
using DnsEndpoint = net::DnsEndpoint;

// The owner of the upstream sockets' guards in egr_dnsep_v1.  No cgroup has
// this id (a cgroup id's low 32 bits are its kernfs inode number, never 0),
// so every sandbox is refused there as at id 0; it is kept apart from id 0 so
// that SetOwnGuards, which makes the listeners' set exact at each start,
// never removes the guard of a live upstream socket (this daemon's, or the
// one it takes over from).
inline constexpr uint64_t kUpstreamGuardOwner = uint64_t{1} << 32;

struct DnsEndpointEntry {
  uint64_t sandbox_id;
  DnsEndpoint endpoint;
};

class DnsEndpoints {
 public:
  // Opens both maps pinned under pin_root; NotFound names the missing pin.
  static absl::StatusOr<DnsEndpoints> Open(const std::string& pin_root);

  // Gives sandbox_id this endpoint (replacing any earlier one).  The reverse
  // entries are written first and the stale ones removed last, so there is
  // never a forward entry without its guard.  InvalidArgument for an
  // endpoint without a port or an address, or with an address of the wrong
  // family; AlreadyExists when another sandbox holds one of its addresses
  // at that port.
  absl::Status Set(uint64_t sandbox_id, const DnsEndpoint& ep);
  // Removes the forward entry first (no query is steered there any more),
  // then its reverse entries (a guard outlives its redirect, so an endpoint
  // is never left unguarded).  Absent is fine.
  absl::Status Remove(uint64_t sandbox_id);
  absl::StatusOr<std::optional<DnsEndpoint>> Get(uint64_t sandbox_id) const;
  absl::StatusOr<std::vector<DnsEndpointEntry>> List() const;
  // Reverse entries whose owner has no forward entry naming them (a crash
  // between the two writes of Set or Remove); reconcile removes them.
  // (Guards of egressd's own endpoints, sandbox id 0, are not orphans.)
  absl::Status RemoveOrphanGuards();

  // egressd's own endpoints (the daemon's metrics listener): guards owned by
  // sandbox id 0, which no sandbox has, so the kernel refuses every
  // sandbox's connect, send and packet to them (bpf/lib/dns_redirect.h).
  // Makes exactly `own` guarded: new ones written first, others of id 0
  // removed after.  AlreadyExists when a sandbox's endpoint is there.
  absl::Status SetOwnGuards(const std::vector<std::pair<net::IpAddr, uint16_t>>& own);
  absl::StatusOr<std::vector<std::pair<net::IpAddr, uint16_t>>> OwnGuards() const;

  // The DNS proxy's upstream sockets (userspace/dns/upstream_socket.h): one
  // guard per socket, owned by kUpstreamGuardOwner, written after its bind
  // and before its connect, removed after its close.  AlreadyExists when any
  // entry is at that address and port (BPF_NOEXIST: two sockets never share
  // a guard, so a close never unguards another's port).
  absl::Status AddUpstreamGuard(const net::IpAddr& addr, uint16_t port);
  // Only an upstream guard is removed; absent is fine.
  absl::Status RemoveUpstreamGuard(const net::IpAddr& addr, uint16_t port);
  // Upstream guards no socket holds any more (a proxy killed before its
  // closes): neither a UDP nor a TCP socket can be bound at that address and
  // port without EADDRINUSE.  A live one (another daemon's, during a
  // hand-over) stays.  Returns how many were removed.
  absl::StatusOr<int> RemoveStaleUpstreamGuards();
  absl::StatusOr<std::vector<std::pair<net::IpAddr, uint16_t>>> UpstreamGuards() const;

 private:
  UniqueFd dns_, dnsep_;
};

}  // namespace egressd::maps
