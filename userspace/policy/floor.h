// The operator floor: the ceiling no sandbox declaration can raise.
#ifndef EGRESSD_USERSPACE_POLICY_FLOOR_H_
#define EGRESSD_USERSPACE_POLICY_FLOOR_H_

#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/common/enum_names.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::policy {

enum class Floor { kConnected, kAirgapped, kHosted };

inline constexpr EnumNames<Floor, 3> kFloorNames{{{
    {Floor::kConnected, "connected"},
    {Floor::kAirgapped, "airgapped"},
    {Floor::kHosted, "hosted"},
}}};
static_assert(kFloorNames.Unique());

// A name of kFloorNames, or an error naming the value and the valid ones.
absl::StatusOr<Floor> ParseFloor(std::string_view text);
std::string_view ToString(Floor floor);

// What a sandbox with no declaration gets: airgapped denies, others allow.
Verdict FloorDefault(Floor floor);

// Denied on every sandbox of the floor whatever it declares; each entry's
// source is "floor <name>".  Every floor protects the cloud metadata and
// credential endpoints, because a credential endpoint is never a legitimate
// sandbox destination; hosted adds the private, link-local and loopback
// ranges its network edge blocks.
std::vector<ProtectedCidr> FloorProtected(Floor floor);

// The two halves of that list, for a deployment config that composes them:
// the credential endpoints (every floor) and the hosted edge's ranges.
std::vector<net::Cidr> CredentialEndpoints();
std::vector<net::Cidr> HostedEdgeRanges();

// How an allowed prefix meets the protected entries: inside one (the floor
// denies it) or spanning one (it would allow more than the floor permits).
// Either way it is refused, never narrowed: a sandbox must not run with less
// than it declared.  A v6 prefix over the IPv4-mapped space (::ffff:0:0/96)
// or the NAT64 prefix (64:ff9b::/96) reaches IPv4 destinations, so it is
// judged by the IPv4 addresses it embeds, as the kernel judges it.
struct FloorConflict {
  bool inside;                   // else spans
  const ProtectedCidr* entry;    // into the vector passed in
};
std::optional<FloorConflict> CheckFloor(const net::Cidr& c,
                                        const std::vector<ProtectedCidr>& prot);

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_FLOOR_H_
