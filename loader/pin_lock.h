// An exclusive lock over one egressd instance's pin directory.  Loading,
// unloading and every policy/sandbox mutation hold it, so two egressctl
// processes (or egressctl and the daemon) never interleave map writes.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "loader/unique_fd.h"

namespace egressd {

class PinLock {
 public:
  // Creates the directory if needed, then blocks until the lock is ours.
  static absl::StatusOr<PinLock> Acquire(const std::string& pin_root);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  UniqueFd fd_;  // flock is released when the fd closes
};

}  // namespace egressd
