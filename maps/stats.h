// egr_stats_v1: the programs' decision counters, summed over CPUs.
#pragma once

#include <array>
#include <cstdint>

#include "maps/egressd_abi.h"
#include "maps/pinned_maps.h"

namespace egressd::maps {

using Counters = std::array<uint64_t, EGR_STAT_MAX>;

Counters ReadCounters(const PinnedMaps& maps);

// Stable names for enum egr_stat (status output, later metrics).
const char* CounterName(int stat);

}  // namespace egressd::maps
