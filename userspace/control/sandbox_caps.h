// The per-sandbox caps of the deployment config (limits:, issue 14) and the
// node-wide use of the maps every sandbox shares.  One check for every
// registration path (the daemon's PUT, `egressctl sandbox add`): a policy
// past a cap is bad input naming the cap, its value and the count, checked
// before anything is changed, so no declaration can fill a shared map.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "userspace/common/node.h"
#include "userspace/control/sandbox_record.h"
#include "userspace/policy/compiled_policy.h"
#include "userspace/policy/deployment_config.h"

namespace egressd::control {

// What a compiled policy takes of each capped resource.  CIDR entries are
// counted as the kernel holds them: one per distinct prefix after the port
// folding (maps::BuildAllowEntries), per family.
struct CapUse {
  uint64_t cidr4_entries = 0;
  uint64_t cidr6_entries = 0;
  uint64_t names = 0;  // exact names + wildcard rules
};
// InvalidArgument when the policy cannot be represented at all (the port
// ranges of a prefix: maps::BuildAllowEntries' message).
absl::StatusOr<CapUse> CountCapUse(const policy::CompiledPolicy& p);

struct CapExceeded {
  std::string cap;  // the config key: "limits.maxCidrEntriesPerSandbox", ...
  uint64_t limit = 0;
  uint64_t count = 0;
  std::string message;  // one line naming all three
};
// Every cap `use` is past, in the order of the limits: block.
std::vector<CapExceeded> ExceededCaps(const CapUse& use, const policy::SandboxLimits& limits);
// InvalidArgument with one line per cap exceeded (and "nothing was
// changed"), else OK.
absl::Status CheckSandboxCaps(const policy::CompiledPolicy& p, const policy::SandboxLimits& limits);

// {"cidr4_entries": {"count", "limit"}, "cidr6_entries", "names",
//  "learned_addresses": {"limit"[, "count"]}}: what a sandbox takes of its caps.
nlohmann::json CapsJson(const CapUse& use, const policy::SandboxLimits& limits, uint32_t learned_limit,
                        std::optional<uint64_t> learned_count);

// One map every sandbox shares: its capacity and how many entries it holds.
struct SharedMapUse {
  std::string what;  // allow4, allow6, prot4, prot6, resolved, cgroups, policies, dns_endpoints
  std::string map;   // the pin's name
  uint64_t capacity = 0;
  uint64_t entries = 0;
};
// Walks every shared map of the instance (maps::CountPinnedMaps).
absl::StatusOr<std::vector<SharedMapUse>> SharedMapsUse(const Paths& paths);
// Names the records declare, all sandboxes together (names are served by
// the DNS proxy from the records; no kernel map holds them).
uint64_t DeclaredNames(const std::vector<SandboxRecord>& records);

}  // namespace egressd::control
