// What the proxy tells an observer about each message a sandbox sent it:
// the question, the verdict of the sandbox's scope, the answer given (rcode,
// records, CNAMEs), what was learned into the kernel's map and what was
// refused (protected, or the write failed), and the upstream's latency.
// userspace/audit/dns_events.h turns it into an audit record; the proxy
// itself knows nothing of audit.
#ifndef EGRESSD_USERSPACE_DNS_EVENTS_H_
#define EGRESSD_USERSPACE_DNS_EVENTS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "userspace/net/ip.h"

namespace egressd::dns {

struct QueryEvent {
  uint64_t sandbox_id = 0;
  bool over_tcp = false;
  uint64_t realtime_ns = 0;  // when the message arrived (CLOCK_REALTIME)

  bool parsed = false;  // a question could be read (qname, qtype set)
  std::string qname;    // lower case, no trailing dot
  uint16_t qtype = 0;

  bool allowed = false;  // in the sandbox's scope, forwarded upstream
  // name-in-scope, name-not-in-scope, formerr, notimp, not-a-query
  std::string reason;
  std::string rule;  // the scope's rule that matched ("*.example.com")

  std::optional<uint8_t> rcode;  // of the answer sent (none: dropped)
  bool truncated = false;        // sent as TC=1 (nothing learned)
  struct Answer {
    std::string name;  // owner, lower case, no trailing dot
    uint16_t type = 0;
    uint32_t ttl = 0;
    std::string data;  // the address or the CNAME target; empty for others
  };
  std::vector<Answer> answers;  // the answer section as sent
  struct Learned {
    net::IpAddr addr;
    uint32_t ttl = 0;  // the smallest TTL on the chain down to it
  };
  std::vector<Learned> learned;  // written into the map before the answer
  struct Refused {
    net::IpAddr addr;
    std::string why;  // "protected", "name-cap", "sandbox-quota", or "map write failed: ..."
  };
  std::vector<Refused> refused;  // removed from the answer
  // Forgotten from the kernel's map to make room under the name's cap
  // (learned_book.h): least recently answered, used by no flow.
  std::vector<net::IpAddr> evicted;
  // What the sandbox holds after this answer, when the proxy keeps a book:
  // the question name's addresses and the sandbox's.
  struct Held {
    size_t name = 0;
    size_t sandbox = 0;
  };
  std::optional<Held> held;

  std::optional<uint64_t> upstream_ns;  // from asking to the answer
  // From the upstream's answer in the proxy's hands (c-ares' callback) to
  // the last map write for it returned: how long the answer waited on the
  // kernel learning its addresses (none: nothing was learned).
  std::optional<uint64_t> learn_ns;
  std::string upstream_error;           // no answer: why
};

// Called in the proxy's loop thread once a message is answered (or
// dropped).  Must not block: the proxy waits for nothing of it.  The event is
// the observer's to keep: the proxy never touches it again (the audit encodes
// it later, on its writer's thread).
class QueryObserver {
 public:
  virtual ~QueryObserver() = default;
  virtual void OnQuery(std::shared_ptr<const QueryEvent> e) = 0;
};

}  // namespace egressd::dns

#endif  // EGRESSD_USERSPACE_DNS_EVENTS_H_
