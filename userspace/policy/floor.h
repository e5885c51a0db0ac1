// The operator floor: the ceiling no sandbox declaration can raise.
#ifndef EGRESSD_USERSPACE_POLICY_FLOOR_H_
#define EGRESSD_USERSPACE_POLICY_FLOOR_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::policy {

enum class Floor { kConnected, kAirgapped, kHosted };

// "connected" | "airgapped" | "hosted".
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

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_FLOOR_H_
