// Building the BPF map keys and values of one compiled policy.  Pure
// functions (no kernel), so the exact bytes egressd writes are unit-tested.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "maps/egressd_abi.h"
#include "userspace/net/ip.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::maps {

using PolicyId = uint32_t;

egr_lpm4_key MakeLpm4Key(PolicyId id, const net::Cidr& cidr);
egr_lpm6_key MakeLpm6Key(PolicyId id, const net::Cidr& cidr);

// The value flags of an LPM entry for `cidr`: its own prefix length, for the
// audit record to name the CIDR an LPM lookup matched (egressd_abi.h).
uint32_t LpmPlenFlags(const net::Cidr& cidr);
egr_prot_val MakeProtVal(const net::Cidr& cidr);

struct AllowEntry {
  net::Cidr cidr;
  egr_allow_val value;
};

// One map entry per distinct allowed CIDR.  An LPM lookup returns only the
// longest match, so a port-limited entry inherits the ports of every entry
// that covers it (and becomes all-ports if any of them is).  More than
// EGR_MAX_PORT_RANGES disjoint ranges for one prefix is an error naming it.
absl::StatusOr<std::vector<AllowEntry>> BuildAllowEntries(
    const std::vector<policy::AllowedCidr>& allowed);

// Whether the policy can be written at all (port ranges per prefix, entries
// per trie): checked before anything is changed, so a policy that cannot be
// represented is bad input (InvalidArgument naming the CIDR), never a
// half-applied change.
absl::Status CheckFitsMaps(const policy::CompiledPolicy& p);

egr_policy_val MakePolicyHeader(const policy::CompiledPolicy& p);
// The same with p.ContentHash() already computed.
egr_policy_val MakePolicyHeader(const policy::CompiledPolicy& p, uint64_t content_hash);

}  // namespace egressd::maps
