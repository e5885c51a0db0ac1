// Pinned state is never adopted by path alone: before a load reuses a pinned
// map, its kernel-reported shape (type, key and value size, capacity, flags)
// must be the one the programs were compiled against, read from the BPF
// object's own map definitions (never a hand-written copy), and the pinned
// schema entry (egr_config_val.pad0, kPinSchema) must not be newer than this binary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct bpf_object;

namespace egressd {

// The version of the whole set of pinned layouts (every map's name, type,
// key, value, capacity and flags) this build pins, kept in
// egr_config_val.pad0 (maps/egressd_abi.h: a field of the config map, which
// every layout since the first has, rather than a map of its own; 0 is state
// pinned before the entry existed, recognised by its maps' names).  Written
// once a load committed; a greater one pinned is a newer egressd's state,
// refused.  Bump it with any _vN rename, beside the migration from the old
// name (loader/migrations/).
inline constexpr uint32_t kPinSchema = 1;

// What the kernel reports of a map and a definition declares.
struct MapShape {
  std::string name;
  uint32_t type = 0;  // enum bpf_map_type
  uint32_t key_size = 0;
  uint32_t value_size = 0;
  uint32_t max_entries = 0;
  uint32_t flags = 0;  // map_flags
};

// A refusal because of what is pinned on the node (not the caller's input,
// not a kernel failure): the command's own exit code (kExitPinnedState).
// FailedPrecondition carrying a payload, so IsPinnedStateError tells it from
// other preconditions.
absl::Status PinnedStateError(const std::string& message);
bool IsPinnedStateError(const absl::Status& s);

// Every field of `found` (pinned at `pin`) against `want`; the error names
// the map, the pin, each differing field, expected and found.
absl::Status CompareShape(const MapShape& want, const MapShape& found, const std::string& pin);

// The shapes of the object's pinned maps (pinning set), as opened.
std::vector<MapShape> DeclaredPinnedShapes(const bpf_object* obj);

// The shape of the map pinned at `pin`; NotFound when nothing is pinned there.
absl::StatusOr<MapShape> PinnedShape(const std::string& pin);

// A map name's base and version: "egr_stats_v3" -> ("egr_stats", 3);
// nullopt when the name has no _vN suffix.
std::optional<std::pair<std::string, int>> SplitVersion(const std::string& name);

// Downgrade refusals, from names alone: a pin under pin_root of the same base
// as one of `declared` with a greater version, and a pinned schema greater
// than kPinSchema.  `pinned_names` is what pin_root holds.
absl::Status CheckNotNewer(const std::vector<std::string>& pinned_names, const std::vector<MapShape>& declared,
                           std::optional<uint32_t> pinned_schema, const std::string& pin_root);

}  // namespace egressd
