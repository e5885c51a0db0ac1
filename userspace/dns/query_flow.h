// One query's way through the proxy, without sockets: decide (answer at once,
// drop, or forward a query built from the question), then finish (filter the
// upstream's answer, write what it teaches, and only then build the client's
// answer).  proxy.cc adds the transport; the unit tests and the fuzzer drive
// this directly.
#ifndef EGRESSD_USERSPACE_DNS_QUERY_FLOW_H_
#define EGRESSD_USERSPACE_DNS_QUERY_FLOW_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/dns/events.h"
#include "userspace/dns/learned_book.h"
#include "userspace/dns/learner.h"
#include "userspace/dns/message.h"
#include "userspace/dns/scope.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::dns {

// What the proxy knows of one sandbox.
struct SandboxScope {
  uint64_t sandbox_id = 0;  // the cgroup id, the key of egr_resolved_v2
  NameScope names;
  std::vector<policy::ProtectedCidr> protected_cidrs;
};

struct Counters {
  std::atomic<uint64_t> queries{0}, dropped{0}, formerr{0}, notimp{0}, denied{0}, forwarded{0},
      answered{0}, servfail{0}, upstream_failed{0}, truncated{0}, learned{0}, learn_failed{0},
      protected_removed{0}, out_of_chain_removed{0},
      // Bounds (learned_book.h): addresses evicted under a name's cap, not
      // learned past the cap or the sandbox's quota, evictions refused.
      evicted{0}, cap_refused{0}, quota_refused{0}, evict_failed{0},
      // System calls that read queries from the endpoints' UDP sockets (each
      // takes up to kUdpBatch, udp_endpoint.h): queries / udp_reads is the
      // batching under load.
      udp_reads{0};
};

struct Decision {
  enum Kind { kDrop, kRespond, kForward } kind = kDrop;
  Bytes response;        // kRespond
  Query query;           // kForward
  ScopeMatch match;      // kForward
  Bytes upstream_query;  // kForward
};

// `event`, when given, is filled with what the audit record says of it.
Decision Decide(const SandboxScope& sandbox, std::span<const uint8_t> wire, Counters& counters,
                QueryEvent* event = nullptr);

// The client's answer to a forwarded query.  `upstream` is the upstream's
// answer or why there is none.  Every learned address is written to `sink`
// before this returns; an address whose write failed is removed, and when
// none is left the answer is SERVFAIL with an extended error.  `book`, when
// given, bounds what is learned (learned_book.h): what it refuses is removed
// from the answer like a failed write, and the extended error is 18
// "Prohibited" saying which bound.  `max_size`:
// the client's UDP size, or kMaxMessage over TCP (an answer that does not fit
// is TC=1 and teaches nothing).
Bytes Finish(const SandboxScope& sandbox, const Decision& forwarded,
             const absl::StatusOr<Bytes>& upstream, size_t max_size, LearnedAddressSink& sink,
             const Lifetime& lifetime, uint64_t now_boot_ns, Counters& counters, QueryEvent* event = nullptr,
             LearnedBook* book = nullptr);

// The size a UDP answer to `q` may take.
size_t UdpLimit(const Query& q);

}  // namespace egressd::dns

#endif  // EGRESSD_USERSPACE_DNS_QUERY_FLOW_H_
