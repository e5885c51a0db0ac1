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
  static const char* const kNames[EGR_STAT_MAX] = {"connect_allow", "connect_deny", "sendmsg_allow",
                                                   "sendmsg_deny",  "skb_pass",     "skb_drop",
                                                   "contained_deny"};
  return stat >= 0 && stat < EGR_STAT_MAX ? kNames[stat] : "unknown";
}

}  // namespace egressd::maps
