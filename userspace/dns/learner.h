// Where learned addresses go, and how long they live.  The proxy releases an
// answer only after every write for it has returned (map first): a client can
// never hold an address the kernel does not yet allow.  maps/resolved_table.h
// writes egr_resolved_v2; tests use a fake.
#ifndef EGRESSD_USERSPACE_DNS_LEARNER_H_
#define EGRESSD_USERSPACE_DNS_LEARNER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "userspace/net/ip.h"
#include "userspace/policy/deployment_config.h"

namespace egressd::dns {

class LearnedAddressSink {
 public:
  virtual ~LearnedAddressSink() = default;
  // Allows `addr` for `sandbox` until `expires_boot_ns` (CLOCK_BOOTTIME).
  // Never shortens a later expiry already held.  Returns once the kernel
  // holds it, or the reason it does not (map full, ENOMEM).
  virtual absl::Status Learn(uint64_t sandbox, const net::IpAddr& addr, uint64_t expires_boot_ns,
                             uint32_t name_id) = 0;
  // The same, noting also the question name whose answer carried it
  // (its keyed QnameId, qname_key.h; `rule_id` is the rule's): a proxy restarted books
  // the address under that name (learned_book.h SeedBook).  By default the
  // name is not kept.
  virtual absl::Status LearnAnswer(uint64_t sandbox, const net::IpAddr& addr, uint64_t expires_boot_ns,
                                   uint32_t rule_id, uint32_t /*qname_id*/) {
    return Learn(sandbox, addr, expires_boot_ns, rule_id);
  }
  // Evicted by the proxy: the kernel no longer allows new flows to it.
  // NotFound is OK (it was never learned, or already collected).
  virtual absl::Status Forget(uint64_t sandbox, const net::IpAddr& addr) = 0;
  // A flow holds it: a connected socket, or sends within the grace.
  virtual absl::StatusOr<bool> InUse(uint64_t sandbox, const net::IpAddr& addr) const = 0;
};

// expiry = now + max(TTL, min_ttl) + grace.  The minimum covers clients that
// keep an address for minutes whatever its TTL (gRPC channels, .NET, JVM
// caches); the grace covers a connect that follows the answer's expiry by a
// moment.  Issue 12 makes both configurable.
struct Lifetime {
  uint32_t min_ttl_s = 300;
  uint32_t grace_s = 120;

  uint64_t ExpiryNs(uint64_t now_boot_ns, uint32_t ttl_s) const {
    uint64_t s = static_cast<uint64_t>(ttl_s < min_ttl_s ? min_ttl_s : ttl_s) + grace_s;
    return now_boot_ns + s * 1'000'000'000ull;
  }
};

// The lifetime the deployment config's dns: block sets (these defaults where
// it sets none).
Lifetime LifetimeOf(const policy::DnsSettings& d);

// CLOCK_BOOTTIME now, the clock bpf_ktime_get_boot_ns() reads.
uint64_t BootTimeNs();

}  // namespace egressd::dns

#endif  // EGRESSD_USERSPACE_DNS_LEARNER_H_
