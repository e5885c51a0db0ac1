// egr_stats_v1 (7 counters, retired by fe2353d "ABI v2") and egr_stats_v2
// (14, retired by a12e73f) -> egr_stats_v3.  Each version appended counters
// and kept the order of the ones before (enum egr_stat), so the old counters
// are the new map's first entries, per CPU.  Counts the old programs make
// between the carry and their swap are not carried (counters, never a
// verdict).
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

absl::StatusOr<size_t> CarryCounters(int from_fd, int to_fd, uint32_t old_count) {
  const int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return LibbpfStatus(cpus, "count possible CPUs");
  std::vector<uint64_t> per_cpu(static_cast<size_t>(cpus));
  for (uint32_t k = 0; k < old_count && k < EGR_STAT_MAX; ++k) {
    if (bpf_map_lookup_elem(from_fd, &k, per_cpu.data()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("read counter ", k, " of the old stats map"));
    }
    if (bpf_map_update_elem(to_fd, &k, per_cpu.data(), BPF_ANY) != 0) {
      return ErrnoStatus(errno, absl::StrCat("write counter ", k, " into ", EGR_MAP_STATS));
    }
  }
  return old_count;
}

absl::StatusOr<size_t> CarryV1(int from_fd, int to_fd) { return CarryCounters(from_fd, to_fd, 7); }
absl::StatusOr<size_t> CarryV2(int from_fd, int to_fd) { return CarryCounters(from_fd, to_fd, 14); }

}  // namespace

const Migration kMigrateStatsV2 = {
    "egr_stats_v2", EGR_MAP_STATS,
    {"egr_stats_v2", BPF_MAP_TYPE_PERCPU_ARRAY, sizeof(uint32_t), sizeof(uint64_t), 14, 0},
    CarryV2, nullptr, "decision counters"};

const Migration kMigrateStatsV1 = {
    "egr_stats_v1", EGR_MAP_STATS,
    {"egr_stats_v1", BPF_MAP_TYPE_PERCPU_ARRAY, sizeof(uint32_t), sizeof(uint64_t), 7, 0},
    CarryV1, nullptr, "decision counters"};

}  // namespace egressd
