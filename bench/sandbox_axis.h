// The sandbox axis: N sandboxes (1, 100, 1,000) with one 100-CIDR + 50-name
// policy, egressd (N registered cgroups) against the incumbent (N pod network
// namespaces, each with the nftables ruleset loaded).  Apply time per sandbox
// (p50/p99) and the node's kernel memory, measured the same way for both.
#pragma once

#include <string>
#include <vector>

#include "bench_stats.h"
#include "egressd_env.h"

namespace egressd::bench {

// stages: the cumulative sandbox counts (ascending).  Registrations and
// namespaces stay until the lab and instance are torn down (the namespaces
// are deleted here, at the end).  all_ran turns false when a cell could not
// run (its reason is in the JSON).
json SandboxAxis(test::Egressd& e, const std::vector<int>& stages, const std::string& dir, const char* server,
                 bool& all_ran);

// The axis policy: 100 CIDRs (scale_inputs.h's first, both families) and 50 names.
std::string AxisTaskYaml();

}  // namespace egressd::bench
