#include "loader/pin_lock.h"

#include <fcntl.h>
#include <sys/file.h>

#include "absl/strings/str_cat.h"
#include "loader/environment.h"
#include "loader/errors.h"

namespace egressd {

absl::StatusOr<PinLock> PinLock::Acquire(const std::string& pin_root) {
  EGR_RETURN_IF_ERROR(MakeDirs(pin_root, 0700));
  PinLock l;
  l.path_ = pin_root;
  // bpffs holds no regular files, so the lock is taken on the directory.
  l.fd_.reset(open(pin_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!l.fd_.valid()) return ErrnoStatus(errno, absl::StrCat("open pin dir ", pin_root));
  if (flock(l.fd_.get(), LOCK_EX) != 0) return ErrnoStatus(errno, absl::StrCat("flock ", pin_root));
  return l;
}

}  // namespace egressd
