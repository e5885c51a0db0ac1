// The learned addresses (egr_resolved_v2 and egr_resuse_v1) as operators read
// them: the rules that allowed each, named from the sandboxes' records ("#id"
// for a rule the record no longer has), the expiry (seconds left and the
// wall-clock time), and the flows that use it.  `egressctl status`
// (`learned`) and the daemon's GET /v1/sandboxes/{id} both show this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "maps/pinned_maps.h"
#include "userspace/control/sandbox_record.h"

namespace egressd::control {

struct LearnedQuery {
  std::optional<uint64_t> sandbox;  // only this sandbox's entries
  size_t max = 10000;               // entries shown
  // How long after its last send an address counts as in use (the
  // lifetime's grace: maps::ResolvedTable's window).
  uint64_t in_use_window_ns = 0;
};

// {"total": N, "shown": M, "entries": [{"sandbox", "address", "expires_in_s",
// "expires_at" (RFC 3339, UTC), "keep_s", "rules", "socks", "in_use",
// ["last_used_s_ago"]}]}
absl::StatusOr<nlohmann::json> LearnedJson(const maps::PinnedMaps& m, const std::vector<SandboxRecord>& records,
                                           const LearnedQuery& q);

}  // namespace egressd::control
