// Giving freed memory back after sandboxes go.  Each DNS endpoint the proxy
// serves holds a receive buffer per socket (~170 KiB a sandbox at 1,000), in
// chunks below glibc's mmap threshold: freed, they stay in the heap among
// live chunks, and the daemon's RSS stayed at its peak (192 MiB after all
// 1,000 sandboxes of the daemon-apply bench were deleted).  malloc_trim
// returns every whole free page to the kernel (madvise), not only the top.
#include <malloc.h>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "userspace/daemon/daemon.h"

namespace egressd::daemon {

namespace {
// A trim walks the whole heap (about a millisecond at 200 MiB): once per
// this many endpoints stopped, and whenever the last one went.
constexpr size_t kStopsPerTrim = 32;
}  // namespace

void Daemon::TrimAfterStop() {
  ++stopped_since_trim_;
  const bool none_left = !proxy_ || proxy_->size() == 0;
  if (trim_posted_ || (stopped_since_trim_ < kStopsPerTrim && !none_left)) return;
  trim_posted_ = true;
  // Posted: a stopped endpoint's buffers are freed when its cancelled
  // receive completes, which the loop runs before this.
  boost::asio::post(io_, [this] {
    trim_posted_ = false;
    stopped_since_trim_ = 0;
    const bool released = malloc_trim(0) != 0;
    spdlog::debug("malloc_trim after stopped DNS endpoints: {}", released ? "memory released" : "nothing to release");
  });
}

}  // namespace egressd::daemon
