#include "userspace/audit/spool.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"

namespace egressd::audit {
namespace {

// Holds spool/rotate.lock (shared or exclusive) while it lives.
class RotateLock {
 public:
  static absl::StatusOr<RotateLock> Take(const std::string& spool_path, int how) {
    const std::string path = RotateLockPath(spool_path);
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", path));
    RotateLock l;
    l.fd_.reset(fd);
    while (flock(fd, how) != 0) {
      if (errno != EINTR) return ErrnoStatus(errno, absl::StrCat("flock ", path));
    }
    return l;
  }

 private:
  UniqueFd fd_;  // closing it releases the flock
};

std::string Numbered(const std::string& path, size_t i) { return i ? absl::StrCat(path, ".", i) : path; }

}  // namespace

std::string ReadersLockPath(const std::string& spool_path) { return spool_path + ".readers"; }

absl::StatusOr<bool> RemoveSpool(const std::string& path, size_t files) {
  const std::string lock = ReadersLockPath(path);
  int fd = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", lock));
  UniqueFd f(fd);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return false;  // a reader has it
    return ErrnoStatus(errno, absl::StrCat("flock ", lock));
  }
  // No rotation half done while the chain goes.
  EGR_ASSIGN_OR_RETURN(RotateLock rotating, RotateLock::Take(path, LOCK_EX));
  for (size_t i = files < 2 ? 2 : files; i-- > 0;) {
    if (unlink(Numbered(path, i).c_str()) != 0 && errno != ENOENT)
      return ErrnoStatus(errno, absl::StrCat("remove ", Numbered(path, i)));
  }
  // A tail waiting for this lock finds it unlinked once it gets it, and
  // takes the new one (HoldReadersLock).
  if (unlink(lock.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("remove ", lock));
  return true;
}

absl::Status SpoolTail::HoldReadersLock() {
  const std::string lock = ReadersLockPath(path_);
  for (;;) {
    int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", lock));
    UniqueFd f(fd);
    while (flock(fd, LOCK_SH) != 0) {
      if (errno != EINTR) return ErrnoStatus(errno, absl::StrCat("flock ", lock));
    }
    struct stat held, now;
    if (fstat(fd, &held) != 0) return ErrnoStatus(errno, absl::StrCat("stat ", lock));
    if (stat(lock.c_str(), &now) == 0 && now.st_ino == held.st_ino && now.st_dev == held.st_dev) {
      readers_lock_ = std::move(f);
      return absl::OkStatus();
    }
  }
}

std::string RotateLockPath(const std::string& spool_path) {
  const size_t slash = spool_path.rfind('/');
  return (slash == std::string::npos ? std::string(".") : spool_path.substr(0, slash)) + "/rotate.lock";
}

absl::Status SpoolWriter::OpenFile() {
  int fd = open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open spool ", path_));
  fd_.reset(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoStatus(errno, absl::StrCat("stat spool ", path_));
  size_ = static_cast<size_t>(st.st_size);
  return absl::OkStatus();
}

absl::Status SpoolWriter::Rotate() {
  EGR_ASSIGN_OR_RETURN(RotateLock lock, RotateLock::Take(path_, LOCK_EX));
  const size_t files = limits_.files < 2 ? 2 : limits_.files;
  if (unlink(Numbered(path_, files - 1).c_str()) != 0 && errno != ENOENT)
    return ErrnoStatus(errno, absl::StrCat("remove ", Numbered(path_, files - 1)));
  for (size_t i = files - 1; i-- > 0;) {
    if (rename(Numbered(path_, i).c_str(), Numbered(path_, i + 1).c_str()) != 0 && errno != ENOENT)
      return ErrnoStatus(errno, absl::StrCat("rotate ", Numbered(path_, i)));
  }
  return OpenFile();
}

absl::Status SpoolWriter::Append(std::string_view lines) {
  if (fd_.get() < 0) EGR_RETURN_IF_ERROR(OpenFile());
  if (size_ > 0 && size_ + lines.size() > limits_.max_bytes) EGR_RETURN_IF_ERROR(Rotate());
  const char* p = lines.data();
  size_t left = lines.size();
  while (left > 0) {
    ssize_t n = write(fd_.get(), p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus(errno, absl::StrCat("write spool ", path_));
    p += n;
    left -= static_cast<size_t>(n);
  }
  size_ += lines.size();
  return absl::OkStatus();
}

absl::Status SpoolTail::Open(bool from_end) {
  if (readers_lock_.get() < 0) EGR_RETURN_IF_ERROR(HoldReadersLock());
  if (fd_.get() >= 0) return absl::OkStatus();
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::OkStatus();  // not written yet
    return ErrnoStatus(errno, absl::StrCat("open spool ", path_));
  }
  fd_.reset(fd);
  if (from_end && lseek(fd, 0, SEEK_END) < 0) return ErrnoStatus(errno, absl::StrCat("seek ", path_));
  return absl::OkStatus();
}

absl::Status SpoolTail::Drain(const LineFn& out) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd_.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("read spool ", path_));
    }
    if (n == 0) return absl::OkStatus();
    partial_.append(buf, n);
    size_t start = 0, nl;
    while ((nl = partial_.find('\n', start)) != std::string::npos) {
      out(partial_.substr(start, nl - start));
      start = nl + 1;
    }
    partial_.erase(0, start);
  }
}

absl::StatusOr<bool> SpoolTail::Advance(const LineFn& out) {
  struct stat ours;
  if (fstat(fd_.get(), &ours) != 0) return ErrnoStatus(errno, absl::StrCat("stat spool ", path_));
  struct stat cur;
  if (stat(path_.c_str(), &cur) == 0 && cur.st_ino == ours.st_ino && cur.st_dev == ours.st_dev) return false;
  // Under the shared lock no rename is half done: FILE, FILE.1, ... is the
  // chain from newest to oldest without a hole.
  EGR_ASSIGN_OR_RETURN(RotateLock lock, RotateLock::Take(path_, LOCK_SH));
  std::vector<std::string> chain;
  int found = -1;
  for (size_t i = 0;; ++i) {
    struct stat st;
    const std::string name = Numbered(path_, i);
    if (stat(name.c_str(), &st) != 0) break;
    if (st.st_ino == ours.st_ino && st.st_dev == ours.st_dev) found = static_cast<int>(i);
    chain.push_back(name);
  }
  if (found == 0 || chain.empty()) return false;  // still FILE, or the spool was removed
  // Everything the writer put in our file was written before the rename we
  // now see: read it to its end, then go on in the next file, from its start.
  EGR_RETURN_IF_ERROR(Drain(out));
  std::string next;
  if (found > 0) {
    next = chain[found - 1];
  } else {
    // Ours was rotated out before we finished it: what came between is gone.
    ++overrun_;
    spdlog::warn("audit spool {}: rotated past this reader; lines between are lost, continuing at {}", path_,
                 chain.back());
    next = chain.back();
  }
  int fd = ::open(next.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open spool ", next));
  fd_.reset(fd);
  partial_.clear();  // a writer only ever writes whole lines
  return true;
}

absl::Status SpoolTail::Read(const LineFn& out) {
  if (fd_.get() < 0) return absl::OkStatus();
  for (;;) {
    EGR_RETURN_IF_ERROR(Drain(out));
    EGR_ASSIGN_OR_RETURN(bool moved, Advance(out));
    if (!moved) return absl::OkStatus();
  }
}

}  // namespace egressd::audit
