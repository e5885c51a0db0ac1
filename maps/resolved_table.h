// egr_resolved_v2: (sandbox, address) -> allowed until expiry, by which
// rules, written by the DNS proxy for the answers to names the policy allows,
// read by the programs' verdict; egr_resuse_v1 beside it: how flows use each
// address, written by the programs.  The proxy's LearnedAddressSink.
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
  // in_use_window_ns: how long after its last send an address counts as in
  // use (the lifetime's grace).
  explicit ResolvedTable(const PinnedMaps& maps, uint64_t in_use_window_ns = DefaultWindowNs())
      : fd_(maps.resolved()), use_fd_(maps.resuse()), window_ns_(in_use_window_ns) {}
  // Map fds the caller keeps open (tests); use_fd -1: no flow is ever in use.
  explicit ResolvedTable(int resolved_fd, int use_fd = -1, uint64_t in_use_window_ns = DefaultWindowNs())
      : fd_(resolved_fd), use_fd_(use_fd), window_ns_(in_use_window_ns) {}

  // Writes the entry, keeping a later expiry already held (a later answer
  // never shortens one) and adding name_id to the rules that allowed it;
  // the error names the map and errno (E2BIG: full).
  absl::Status Learn(uint64_t sandbox, const net::IpAddr& addr, uint64_t expires_boot_ns,
                     uint32_t name_id) override;
  // Deletes the entry (and its use record); NotFound when there was none.
  absl::Status Forget(uint64_t sandbox, const net::IpAddr& addr) override;
  // A connected socket holds it, or a send used it within the window.
  absl::StatusOr<bool> InUse(uint64_t sandbox, const net::IpAddr& addr) const override;

  absl::StatusOr<std::optional<egr_resolved_val>> Get(uint64_t sandbox, const net::IpAddr& addr) const;
  absl::StatusOr<std::optional<egr_resuse_val>> Use(uint64_t sandbox, const net::IpAddr& addr) const;
  // Every entry of `sandbox` (its cgroup went away).
  absl::Status RemoveSandbox(uint64_t sandbox);

  static uint64_t DefaultWindowNs() { return uint64_t{dns::Lifetime{}.grace_s} * 1'000'000'000ull; }

 private:
  int fd_;
  int use_fd_;
  uint64_t window_ns_;
};

// The key both maps use.
egr_resolved_key ResolvedKeyOf(uint64_t sandbox, const net::IpAddr& addr);

}  // namespace egressd::maps
