// The audit trail's kernel side, read: records from egr_events_v1 and, at the
// end of each fold window, the counts the programs folded or lost
// (maps/egressd_abi.h says how).  Each ring has exactly one reader; callers
// make sure of that (userspace/audit/reader_lock.h).  Knows nothing of JSON.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "maps/egressd_abi.h"
#include "userspace/common/unique_fd.h"

struct ring_buffer;

namespace egressd::maps {

// The programs submit without waking the reader until the ring holds a
// quarter of its size unread (EGR_EVENT_RING_WAKE_BYTES, bpf/lib/audit.h):
// a reader takes the records on its own clock, at least this often, so a
// record is readable within about this long even when nothing wakes it.
inline constexpr int kRingDrainMs = 50;

// What one fold window folded and lost, taken out of the maps.
struct WindowCounts {
  uint32_t epoch = 0;  // the window closed
  std::vector<std::pair<egr_event_key, egr_fold_val>> folds;  // count > 0 only
  std::vector<egr_loss_key> loss_keys;
  std::vector<uint64_t> lost;  // lost[i] belongs to loss_keys[i]
};

class EventRing {
 public:
  using Handler = std::function<void(const egr_event&)>;

  static absl::StatusOr<EventRing> Open(const std::string& pin_root);
  EventRing(EventRing&&) noexcept;
  EventRing& operator=(EventRing&&) noexcept;
  ~EventRing();

  // Waits up to timeout_ms for a wake-up, then hands every record the ring
  // holds to `handler` (in ring order), woken or not; returns how many.  A
  // caller waits at most kRingDrainMs between two calls.  A record of a size
  // other than struct egr_event is an error naming both sizes.
  absl::StatusOr<int> Poll(int timeout_ms, const Handler& handler);

  // Closes the fold window: moves the programs to the next epoch, waits until
  // no program can still count into the old one (an RCU grace period), then
  // takes the old epochs' counts out of egr_fold_v1 and egr_loss_v1.  Every
  // record of the old epochs is then submitted, and the next Poll(0) takes
  // it (Poll reads the ring whether or not a wake-up came).
  absl::StatusOr<WindowCounts> CloseWindow();

  // An fd that polls readable when the programs woke the reader (the
  // ring's epoll fd: only once the ring holds EGR_EVENT_RING_WAKE_BYTES), for
  // a caller's own event loop (the daemon); Poll(0, ...) then takes them.
  // Records below the threshold do not make it readable: the caller also
  // calls Poll(0, ...) every kRingDrainMs.
  int ReadableFd() const;

  // egr_stats_v3 summed over CPUs (for the loss no sandbox is named for).
  absl::StatusOr<uint64_t> Counter(egr_stat stat) const;

  struct State;  // defined in event_ring.cc only

 private:
  EventRing() = default;
  std::unique_ptr<State> state_;
};

}  // namespace egressd::maps
