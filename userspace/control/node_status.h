// What `egressctl status` shows of the node, read from the pinned maps and
// the records: the cgroups and policies in the kernel, the records, their
// consistency, the decision counters, the learned addresses and the
// node-wide learned map.  One builder for both forms: egressctl without a
// daemon calls it itself, the daemon's GET /v1/status carries the same keys
// beside its own, so asking the daemon loses nothing the maps-only form has.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "maps/pinned_maps.h"
#include "userspace/common/node.h"

namespace egressd::control {

// {"loaded", "socket_containment", "pin_root", "cgroups", "policies",
// "records", "consistency", "counters", "learned", ["resolved"]}.
// in_use_window_ns: how long after its last send a learned address counts as
// in use (control/learned_view.h).
absl::StatusOr<nlohmann::json> NodeStatusJson(const Paths& paths, const maps::PinnedMaps& m,
                                              uint64_t in_use_window_ns);

}  // namespace egressd::control
