// egr_resolved_v1: (sandbox, address) -> allowed until expiry, written by the
// DNS proxy for the answers to names the policy allows, read by the
// programs' verdict.  The proxy's LearnedAddressSink.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "maps/egressd_abi.h"
#include "maps/pinned_maps.h"
#include "userspace/dns/learner.h"
#include "userspace/net/ip.h"

namespace egressd::maps {

class ResolvedTable : public dns::LearnedAddressSink {
 public:
  explicit ResolvedTable(const PinnedMaps& maps) : fd_(maps.resolved()) {}
  // A map fd the caller keeps open (tests).
  explicit ResolvedTable(int resolved_fd) : fd_(resolved_fd) {}

  // Writes the entry, keeping a later expiry already held (a later answer
  // never shortens one); the error names the map and errno (E2BIG: full).
  absl::Status Learn(uint64_t sandbox, const net::IpAddr& addr, uint64_t expires_boot_ns,
                     uint32_t name_id) override;
  absl::StatusOr<std::optional<egr_resolved_val>> Get(uint64_t sandbox, const net::IpAddr& addr) const;
  // Every entry of `sandbox` (its cgroup went away).
  absl::Status RemoveSandbox(uint64_t sandbox);

 private:
  int fd_;
};

}  // namespace egressd::maps
