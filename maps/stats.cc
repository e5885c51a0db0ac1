#include "maps/stats.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <vector>

namespace egressd::maps {

Counters ReadCounters(const PinnedMaps& maps) {
  int ncpu = libbpf_num_possible_cpus();
  std::vector<uint64_t> per_cpu(ncpu > 0 ? ncpu : 1);
  Counters totals{};
  for (uint32_t i = 0; i < EGR_STAT_MAX; ++i) {
    if (bpf_map_lookup_elem(maps.stats(), &i, per_cpu.data()) != 0) continue;
    for (uint64_t v : per_cpu) totals[i] += v;
  }
  return totals;
}

const char* CounterName(int stat) {
  // Each name is a string literal, so data() is NUL-terminated.
  return stat >= 0 && stat < EGR_STAT_MAX ? kCounterNames.rows[stat].name.data() : "unknown";
}

}  // namespace egressd::maps
