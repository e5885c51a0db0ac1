// egr_tcflow_v1, egr_flowcnt_v1, egr_flowcfg_v1: the tc program's per-flow
// state (bpf/lib/tc_flow.h).  The programs write the flows and the counts;
// the control plane writes the node's settings and, when a sandbox goes,
// deletes what is left of its flows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "maps/egressd_abi.h"

namespace egressd::maps {

// The deployment config's flows: settings (0: the default of maps/egressd_abi.h).
struct FlowConfig {
  uint32_t quota = 0;
  uint32_t tcp_idle_s = 0;
  uint32_t tcp_transitory_s = 0;
  uint32_t udp_idle_s = 0;
};

absl::Status WriteFlowConfig(const std::string& pin_root, const FlowConfig& config);

// The sandbox's counts (none before its first tracked or refused flow).
absl::StatusOr<std::optional<egr_flowcnt_val>> ReadFlowCount(const std::string& pin_root, uint64_t sandbox_id);

// The sandbox's flows now held (the timer field reads as zeros).
absl::StatusOr<std::vector<std::pair<egr_flow_key, egr_flow_val>>> ListFlows(const std::string& pin_root,
                                                                             uint64_t sandbox_id);

// A sandbox removed: deletes its flows (cancelling their timers) and its
// counts, so a later registration of the same id starts from nothing.  Call
// after the tc programs are detached.  Returns how many flows went.
absl::StatusOr<size_t> ForgetSandboxFlows(const std::string& pin_root, uint64_t sandbox_id);

}  // namespace egressd::maps
