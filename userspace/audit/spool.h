// The spools the reader-lock holder writes and every other reader tails
// (<runtime_dir>/audit/spool/all.jsonl and <sandbox id>.jsonl), rotated by
// size: FILE, FILE.1 ... FILE.<files-1>, the oldest removed.  A rotation
// renames under an exclusive flock of spool/rotate.lock; a tail that reaches
// the end of a file that is no longer FILE finds, under a shared flock, the
// file that came after its own (by inode) and goes on there, so it reads
// every line exactly once across any number of rotations.  Only a tail that
// falls more than `files` files behind loses lines, and it says so.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "userspace/common/unique_fd.h"

namespace egressd::audit {

// Per spool: the size one file may reach before the next batch goes to a
// new one, and how many files are kept.  A runtime dir is often tmpfs.
inline constexpr size_t kSpoolRotateBytes = 16u << 20;
inline constexpr size_t kSpoolFiles = 4;

struct SpoolLimits {
  size_t max_bytes = kSpoolRotateBytes;
  size_t files = kSpoolFiles;  // at least 2
};

// Appends whole lines to one spool, rotating between batches.
class SpoolWriter {
 public:
  SpoolWriter(std::string path, SpoolLimits limits) : path_(std::move(path)), limits_(limits) {}
  // `lines`: whole lines, each ending in '\n'; one write() (rotation first
  // when the file already holds something and would pass max_bytes).
  absl::Status Append(std::string_view lines);
  const std::string& path() const { return path_; }

 private:
  absl::Status OpenFile();
  absl::Status Rotate();
  std::string path_;
  SpoolLimits limits_;
  UniqueFd fd_;
  size_t size_ = 0;
};

// Whole lines of a growing, rotating spool; keeps a partial last line.
// From its first Open() on, a tail holds a shared flock of <path>.readers:
// a spool is removed only when no tail holds it (RemoveSpool).
class SpoolTail {
 public:
  using LineFn = std::function<void(const std::string& line)>;
  explicit SpoolTail(std::string path) : path_(std::move(path)) {}
  // Opens FILE if it exists (not yet: OK, tried again by Read's caller).
  absl::Status Open(bool from_end);
  absl::Status Read(const LineFn& out);
  bool is_open() const { return fd_.get() >= 0; }
  // Times the spool rotated past this tail (its lines in between are gone).
  uint64_t overrun() const { return overrun_; }

 private:
  absl::Status Drain(const LineFn& out);
  absl::Status HoldReadersLock();
  // When our file is no longer FILE: the rest of it, then the file after it
  // is opened.  false: ours is still FILE (or the spool is gone).
  absl::StatusOr<bool> Advance(const LineFn& out);
  std::string path_;
  UniqueFd fd_;
  std::string partial_;
  uint64_t overrun_ = 0;
  UniqueFd readers_lock_;
};

// <dir of path>/rotate.lock, shared by a spool directory's files.
std::string RotateLockPath(const std::string& spool_path);
// <path>.readers: every SpoolTail of the spool holds it shared.
std::string ReadersLockPath(const std::string& spool_path);

// Removes FILE, FILE.1 ... FILE.<files-1> and its readers lock, unless a
// tail holds the lock: false then (nothing removed; try again later).  A
// tail that opens the spool afterwards finds none (not written yet).
absl::StatusOr<bool> RemoveSpool(const std::string& path, size_t files);

}  // namespace egressd::audit
