// Collecting expired learned addresses (docs/dns.md "Lifetimes").  One
// sweep deletes, in batches, every egr_resolved_v2 entry whose expiry has
// passed and that no flow uses (egr_resuse_v1: no connected socket holds it,
// no send kept it within its keep_s), with its use record, and the use
// records left without an entry; it returns the earliest deadline still
// ahead.  The Asio host sleeps until that deadline (never sooner than
// min_interval after the previous sweep, so entries expiring together go in
// one pass, and never longer than max_interval while sockets hold expired
// entries: a release does not wake it).  No timer per entry.
//
// Hosted by the DNS proxy's process, on the proxy's loop: the proxy's
// read-modify-write of an entry (Learn) and a sweep's read-then-delete never
// interleave, so a sweep cannot delete an entry an answer just extended.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/status/statusor.h"

namespace egressd::maps {

struct SweepResult {
  uint64_t collected = 0;       // expired entries deleted
  uint64_t kept_in_use = 0;     // expired, kept because a flow uses them
  uint64_t use_orphans = 0;     // use records without an entry, deleted
  uint64_t live = 0;            // entries left
  std::optional<uint64_t> next_deadline_ns;  // earliest expiry or keep end ahead (boot ns)
  bool held_expired = false;    // some expired entry is held by a socket only
};

// One pass over the maps at `now_boot_ns` (CLOCK_BOOTTIME).
absl::StatusOr<SweepResult> SweepResolved(int resolved_fd, int use_fd, uint64_t now_boot_ns);

class ResolvedCollector {
 public:
  struct Options {
    uint64_t min_interval_ns = 1'000'000'000ull;
    uint64_t max_interval_ns = 60'000'000'000ull;
  };
  // The fds stay the caller's; `on_sweep` (may be empty) sees every pass.
  ResolvedCollector(boost::asio::io_context& io, int resolved_fd, int use_fd, Options opts,
                    std::function<void(const absl::StatusOr<SweepResult>&)> on_sweep = {});
  ResolvedCollector(const ResolvedCollector&) = delete;
  ResolvedCollector& operator=(const ResolvedCollector&) = delete;
  ~ResolvedCollector();

  // Sweeps now, then whenever the next deadline comes.
  void Start();
  void Stop();
  // An entry was written that expires at `deadline_ns` (boot ns): wakes for
  // it if it comes before the wake already set.  On the loop's thread.
  void Expect(uint64_t deadline_ns);
  uint64_t sweeps() const { return sweeps_; }
  uint64_t collected() const { return collected_; }

 private:
  void SweepAndArm();

  boost::asio::steady_timer timer_;
  int resolved_fd_, use_fd_;
  Options opts_;
  std::function<void(const absl::StatusOr<SweepResult>&)> on_sweep_;
  void Arm(uint64_t wake_boot_ns);

  bool stopped_ = false;
  uint64_t wake_boot_ns_ = 0;  // when the timer fires next (0: not armed)
  uint64_t last_sweep_ns_ = 0;
  uint64_t arms_ = 0;
  uint64_t sweeps_ = 0, collected_ = 0;
};

}  // namespace egressd::maps
