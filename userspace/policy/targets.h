// One egress target as written on any surface: an FQDN, a "*.suffix"
// wildcard, an IPv4/IPv6 address or a CIDR.
#ifndef EGRESSD_USERSPACE_POLICY_TARGETS_H_
#define EGRESSD_USERSPACE_POLICY_TARGETS_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "userspace/net/ip.h"

namespace egressd::policy {

enum class TargetKind { kName, kWildcard, kCidr };

struct Target {
  TargetKind kind = TargetKind::kCidr;
  // kName: the canonical name; kWildcard: the canonical suffix
  // ("example.com" for "*.example.com").
  std::string name;
  net::Cidr cidr;  // kCidr: an address is its host prefix
};

// What `text` denotes, or why it is not a target (the message does not
// repeat the text: the caller quotes it with where it came from).  Rejected:
// empty text, whitespace or control bytes, a bare "*", a URL, a port, a
// wildcard anywhere but the whole leftmost label, a wildcard over a single
// label ("*.com"), and anything CIDR or name parsing refuses.  A single-label
// name is returned: whether it is an error depends on the surface.
absl::StatusOr<Target> ParseTarget(std::string_view text);

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_TARGETS_H_
