// The audit trail's one reader, on the daemon's Asio loop: while the daemon
// holds <runtime_dir>/audit/reader.lock it reads the ring as records come
// (the ring's fd, which the programs make readable only once the ring fills
// past its wake-up threshold) and every maps::kRingDrainMs whatever woke it
// (below the threshold nothing does), closes a fold window every window_ms,
// ingests the user-space sources' pending files and writes the spools, so every
// `egressctl audit` reader is served from it (trail.h's follower path).  The
// same steps as trail.cc's holder, driven by the loop instead of a blocking
// poll.  When another process holds the lock (an `egressctl audit` started
// before the daemon), the daemon asks again every window until it gets it.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/status/status.h"
#include "maps/event_ring.h"
#include "userspace/audit/exporter.h"
#include "userspace/audit/reader_lock.h"
#include "userspace/common/node.h"

namespace egressd::daemon {

class AuditHost {
 public:
  AuditHost(boost::asio::io_context& io, Paths paths, int window_ms = 1000);
  ~AuditHost();
  // Starts trying for the lock; never fails (an error is logged and tried
  // again at the next window).
  void Start();
  bool holding() const { return exporter_ != nullptr; }
  const absl::Status& last_error() const { return last_error_; }
  // The exporter while holding (its per-sandbox counts); null otherwise.
  const audit::Exporter* exporter() const { return exporter_.get(); }
  // Runs after each drain of the ring and each window (lines may have been
  // written to the spools; GET /v1/audit's followers read them), also while
  // another process holds the lock and writes them.
  void OnWritten(std::function<void()> f) { on_written_ = std::move(f); }
  // The hand-over (handover.h).  Release: the last window (what the ring
  // holds is exported, the state file has the last seq and every pending
  // file's offset), then the lock goes and no more is read; returns the
  // last seq.  TryNow: tries for the lock at once (the old daemon released
  // it), not at the next window.
  absl::StatusOr<uint64_t> Release();
  void TryNow();
  bool released() const { return released_; }

 private:
  void Tick();
  absl::Status TryHold();
  void WaitReadable();
  void DrainSoon();
  // How many records it took.
  absl::StatusOr<int> Drain();
  absl::Status CloseWindow();
  void Drop(const absl::Status& why);

  boost::asio::io_context& io_;
  Paths paths_;
  int window_ms_;
  boost::asio::steady_timer timer_;
  boost::asio::steady_timer drain_timer_;  // every maps::kRingDrainMs while holding
  std::optional<audit::ReaderLock> lock_;
  std::optional<maps::EventRing> ring_;
  std::unique_ptr<audit::Exporter> exporter_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> readable_;
  absl::Status failed_, last_error_;
  std::function<void()> on_written_;
  bool released_ = false;
};

}  // namespace egressd::daemon
