// Every map pinned under an instance's pin root, with its capacity and how
// many entries it holds now (the metrics' egressd_map_entries/_capacity).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace egressd::maps {

struct MapCensus {
  std::string name;      // the pin's name: egr_allow4_v1, ...
  std::string type;      // libbpf's name of the map type: hash, lpm_trie, ringbuf, ...
  uint32_t max_entries;  // for a ring buffer: its size in bytes
  // Keys counted (BPF_MAP_LOOKUP_BATCH, else BPF_MAP_GET_NEXT_KEY; an array:
  // every index); absent for maps that cannot be walked (ring buffer, socket
  // storage).
  std::optional<uint64_t> entries;
};

// Maps only (links live in <pin_root>/links); sorted by name.
absl::StatusOr<std::vector<MapCensus>> CountPinnedMaps(const std::string& pin_root);

}  // namespace egressd::maps
