// egr_tcstats_v1 (8 slots, 5 counters used: pass, drop, frame drop, link
// local, spoofed) -> egr_tcstats_v2 (16 slots: DNS steering, flow state and
// onDeny reject appended theirs).  The order of the old counters is kept
// (enum egr_tc_stat), so they are the new map's first entries, per CPU.
// Counts the old program makes between the carry and its swap are not
// carried (counters, never a verdict).
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "loader/migration.h"
#include "maps/egressd_abi.h"
#include "userspace/common/errors.h"

namespace egressd {
namespace {

constexpr uint32_t kV1Slots = 8;
constexpr uint32_t kV1Used = 5;  // EGR_TC_STAT_PASS .. EGR_TC_STAT_SPOOFED

absl::StatusOr<size_t> CarryTcCounters(int from_fd, int to_fd) {
  const int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return LibbpfStatus(cpus, "count possible CPUs");
  std::vector<uint64_t> per_cpu(static_cast<size_t>(cpus));
  for (uint32_t k = 0; k < kV1Used; ++k) {
    if (bpf_map_lookup_elem(from_fd, &k, per_cpu.data()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("read counter ", k, " of egr_tcstats_v1"));
    }
    if (bpf_map_update_elem(to_fd, &k, per_cpu.data(), BPF_ANY) != 0) {
      return ErrnoStatus(errno, absl::StrCat("write counter ", k, " into ", EGR_MAP_TCSTATS));
    }
  }
  return kV1Used;
}

static_assert(EGR_TC_STAT_SPOOFED + 1 == kV1Used, "v1's counters keep their slots in v2");

}  // namespace

const Migration kMigrateTcStatsV1 = {
    "egr_tcstats_v1", EGR_MAP_TCSTATS,
    {"egr_tcstats_v1", BPF_MAP_TYPE_PERCPU_ARRAY, sizeof(uint32_t), sizeof(uint64_t), kV1Slots, 0},
    CarryTcCounters, nullptr, "tc counters"};

}  // namespace egressd
