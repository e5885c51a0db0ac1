// The exclusive lock of one egressd instance.  Loading, unloading and every
// policy/sandbox mutation hold it, so two egressctl processes (or egressctl
// and the daemon) never interleave map writes.
//
// It is an flock on a regular file in the instance's runtime directory that
// nothing ever removes: a lock on a path that can be deleted and recreated
// (the pin directory, which unload removes) lets a second process lock the
// new inode while the first still holds the old one.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "userspace/common/node.h"
#include "userspace/common/unique_fd.h"

namespace egressd {

class InstanceLock {
 public:
  // Creates the runtime directory and the lock file if needed, then blocks
  // until the lock is ours.
  static absl::StatusOr<InstanceLock> Acquire(const Paths& paths);
  // Like Acquire, but returns Unavailable at once when another process holds it.
  static absl::StatusOr<InstanceLock> TryAcquire(const Paths& paths);

  const std::string& path() const { return path_; }

 private:
  static absl::StatusOr<InstanceLock> Lock(const Paths& paths, bool wait);

  std::string path_;
  UniqueFd fd_;  // the flock is released when the fd closes
};

// <runtime_dir>/lock
std::string InstanceLockPath(const Paths& paths);

}  // namespace egressd
