// Start-up probe: what egressd needs from the kernel, checked before loading,
// with a message that names whatever is missing.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "userspace/common/node.h"

namespace egressd {

struct ProbeItem {
  std::string what;
  bool ok;
  std::string detail;  // why not, or where
  // False: egressd loads without it, with less enforcement (reported).
  bool required = true;
};

// Whether the bpf LSM is in the kernel's active LSM list
// (/sys/kernel/security/lsm).  Unknown when securityfs is not mounted.
enum class BpfLsm { kActive, kInactive, kUnknown };
struct BpfLsmState {
  BpfLsm state;
  std::string detail;  // the active list, or why unknown
};
// Reads, never mounts (EGRESSD_FAULT=probe:bpf-lsm reports it inactive).
BpfLsmState ProbeBpfLsm();
// The same after mounting securityfs where it is absent (for `load`).
absl::StatusOr<BpfLsmState> BpfLsmForLoad();

// Every check, in order; none of them changes the system (a missing bpffs is
// reported, and mounted only by `load`).
std::vector<ProbeItem> ProbeKernel(const Paths& paths);

// OK, or FailedPrecondition listing every missing item.
absl::Status RequireKernel(const Paths& paths);

}  // namespace egressd
