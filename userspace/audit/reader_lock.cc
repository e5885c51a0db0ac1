#include "userspace/audit/reader_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"

namespace egressd::audit {

std::string AuditDir(const Paths& paths) { return absl::StrCat(paths.runtime_dir, "/audit"); }
std::string SpoolDir(const Paths& paths) { return absl::StrCat(AuditDir(paths), "/spool"); }
std::string SpoolPath(const Paths& paths, uint64_t sandbox_id) {
  return sandbox_id ? absl::StrCat(SpoolDir(paths), "/", sandbox_id, ".jsonl")
                    : absl::StrCat(SpoolDir(paths), "/all.jsonl");
}

absl::StatusOr<ReaderLock> ReaderLock::TryAcquire(const Paths& paths) {
  EGR_RETURN_IF_ERROR(MakeDirs(SpoolDir(paths), 0700));
  const std::string path = absl::StrCat(AuditDir(paths), "/reader.lock");
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", path));
  ReaderLock l;
  l.fd_.reset(fd);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return absl::UnavailableError(absl::StrCat(path, " is held by another reader"));
    return ErrnoStatus(errno, absl::StrCat("flock ", path));
  }
  return l;
}

}  // namespace egressd::audit
