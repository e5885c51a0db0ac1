#include "userspace/common/instance_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"

namespace egressd {

std::string InstanceLockPath(const Paths& paths) { return paths.runtime_dir + "/lock"; }

absl::StatusOr<InstanceLock> InstanceLock::Lock(const Paths& paths, bool wait) {
  EGR_RETURN_IF_ERROR(MakeDirs(paths.runtime_dir, 0700));
  InstanceLock l;
  l.path_ = InstanceLockPath(paths);
  // O_NOFOLLOW: a symlink planted in the runtime directory must not make us
  // create or lock some other file.
  l.fd_.reset(open(l.path_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!l.fd_.valid()) return ErrnoStatus(errno, absl::StrCat("open lock file ", l.path_));
  struct stat st {};
  if (fstat(l.fd_.get(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat ", l.path_));
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("lock file ", l.path_, " is not a regular file"));
  }
  int op = LOCK_EX | (wait ? 0 : LOCK_NB);
  while (flock(l.fd_.get(), op) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK && !wait) {
      return absl::UnavailableError(absl::StrCat("another process holds ", l.path_));
    }
    return ErrnoStatus(errno, absl::StrCat("flock ", l.path_));
  }
  return l;
}

absl::StatusOr<InstanceLock> InstanceLock::Acquire(const Paths& paths) { return Lock(paths, true); }
absl::StatusOr<InstanceLock> InstanceLock::TryAcquire(const Paths& paths) { return Lock(paths, false); }

}  // namespace egressd
