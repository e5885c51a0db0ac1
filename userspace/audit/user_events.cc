#include "userspace/audit/user_events.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <cerrno>
#include <chrono>
#include <vector>

#include <spdlog/spdlog.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "userspace/audit/exporter.h"
#include "userspace/audit/reader_lock.h"
#include "userspace/audit/record.h"
#include "userspace/common/errors.h"

namespace egressd::audit {
namespace {

constexpr const char* kSuffix = ".jsonl";

uint64_t RealtimeNs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A loss record of the channel: `lost` records of `sandbox_id` (0: none
// could be named) that never reached the stream.
nlohmann::json ChannelLoss(const std::string& source, uint64_t sandbox_id, uint64_t lost, const std::string& why) {
  nlohmann::json j = LossJson(sandbox_id, lost, RealtimeNs(), std::nullopt);
  j["source"] = source;
  j["why"] = why;
  return j;
}

}  // namespace

std::string PendingDir(const Paths& paths) { return AuditDir(paths) + "/pending"; }
std::string OverflowPath(const Paths& paths) { return PendingDir(paths) + "/overflow.json"; }

namespace {

// The pending files' sizes, summed.
size_t PendingBytes(const std::string& dir) {
  size_t sum = 0;
  DIR* d = opendir(dir.c_str());
  if (!d) return 0;
  while (const dirent* e = readdir(d)) {
    if (!absl::EndsWith(e->d_name, kSuffix)) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, 0) == 0) sum += static_cast<size_t>(st.st_size);
  }
  closedir(d);
  return sum;
}

// A pending file a gone writer left with room for more, taken over locked:
// `path` and `bytes` say which and how full.  Without this every short-lived
// writer (each `egressctl sandbox add`, each `run`'s proxy and commands)
// left a file of its own behind, and with no reader they piled up into the
// thousands, each one stat()ed by every writer's count of the pending bytes
// (`egressctl run -- true` took 30-50 ms longer at 2,000 of them).  Taken
// only when: the lock is free (its writer and any holder are gone), the path
// still names the inode locked (a holder may have removed it between our
// open and our lock), it ends in a whole line (a dead writer's half line
// stays last, for the holder to count as lost) and it is below
// `max_bytes`.  Files are tried in name order: the same few fill up first.
std::optional<UniqueFd> ReusePendingFile(const std::string& dir, size_t max_bytes, std::string& path,
                                         size_t& bytes) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] != '.' && absl::EndsWith(e->d_name, kSuffix)) names.push_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    int fd = open(candidate.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    UniqueFd f(fd);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) continue;
    struct stat held, named;
    if (fstat(fd, &held) != 0 || stat(candidate.c_str(), &named) != 0 || held.st_ino != named.st_ino ||
        held.st_dev != named.st_dev || held.st_nlink == 0 || !S_ISREG(held.st_mode)) {
      continue;
    }
    const size_t size = static_cast<size_t>(held.st_size);
    if (size >= max_bytes) continue;
    if (size > 0) {
      int rfd = open(candidate.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (rfd < 0) continue;
      UniqueFd r(rfd);
      char last = 0;
      if (pread(rfd, &last, 1, static_cast<off_t>(size - 1)) != 1 || last != '\n') continue;
    }
    path = candidate;
    bytes = size;
    return f;
  }
  return std::nullopt;
}

// A new pending file of this process, locked before it has its name.
absl::StatusOr<UniqueFd> NewPendingFile(const std::string& dir, std::string& path) {
  uint32_t nonce = 0;
  (void)getrandom(&nonce, sizeof(nonce), 0);
  const std::string name = absl::StrCat(getpid(), "-", nonce);
  const std::string tmp = absl::StrCat(dir, "/.", name, ".tmp");
  path = absl::StrCat(dir, "/", name, kSuffix);
  int fd = open(tmp.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("create ", tmp));
  UniqueFd f(fd);
  // Locked before it has its name: the holder never sees the file of a live
  // writer unlocked (that is how it knows a writer is gone).
  if (flock(fd, LOCK_EX) != 0) return ErrnoStatus(errno, absl::StrCat("flock ", tmp));
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus(errno, absl::StrCat("rename to ", path));
  return f;
}

// overflow.json under its own flock: read, changed by `fn`, written back.
template <typename Fn>
absl::Status WithOverflow(const std::string& path, Fn fn) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", path));
  UniqueFd f(fd);
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) return ErrnoStatus(errno, absl::StrCat("flock ", path));
  }
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = pread(fd, buf, sizeof(buf), static_cast<off_t>(text.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("read ", path));
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) j = nlohmann::json::object();
  EGR_RETURN_IF_ERROR(fn(j));
  const std::string out = j.dump() + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, out.data(), out.size(), 0) != static_cast<ssize_t>(out.size()))
    return ErrnoStatus(errno, absl::StrCat("write ", path));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<UserEventWriter>> UserEventWriter::Open(const Paths& paths, std::string source,
                                                                       UserEventOptions options) {
  const std::string dir = PendingDir(paths);
  EGR_RETURN_IF_ERROR(MakeDirs(dir, 0700));
  std::unique_ptr<UserEventWriter> w(new UserEventWriter());
  w->source_ = std::move(source);
  w->options_ = options;
  w->dir_ = dir;
  w->overflow_path_ = OverflowPath(paths);
  if (auto reused = ReusePendingFile(dir, options.max_file_bytes, w->path_, w->file_bytes_)) {
    w->fd_ = std::move(*reused);
    w->reused_ = true;
  } else {
    EGR_ASSIGN_OR_RETURN(w->fd_, NewPendingFile(dir, w->path_));
  }
  w->pending_bytes_ = PendingBytes(dir);
  w->thread_ = std::thread([raw = w.get()] { raw->Loop(); });
  return w;
}

UserEventWriter::~UserEventWriter() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  // A file nothing was written to holds nothing to read: not left for a
  // holder that may never come.
  struct stat st;
  if (fd_.get() >= 0 && !reused_ && fstat(fd_.get(), &st) == 0 && st.st_size == 0) unlink(path_.c_str());
  if (lost_) spdlog::warn("audit: {} of {}'s records lost (queue full or write failed), each counted in a loss record", lost_, source_);
}

void UserEventWriter::Submit(nlohmann::json record, uint64_t sandbox_id) {
  // Serialised here, in the caller's thread, so the writer thread holds no
  // reference into the caller's objects.
  SubmitLine(Dump(record), sandbox_id);
}

void UserEventWriter::SubmitLine(std::string line, uint64_t sandbox_id) {
  Enqueue(Item{std::move(line), sandbox_id, nullptr, nullptr});
}

void UserEventWriter::Enqueue(Item item) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    ++submitted_;
    auto mine = queued_.find(item.sandbox_id);
    const size_t waiting = mine == queued_.end() ? 0 : mine->second;
    if (waiting >= options_.max_queued_per_sandbox || queue_.size() >= options_.max_queued) {
      ++unreported_[item.sandbox_id];
      ++lost_;
      ++done_;
      return;
    }
    ++queued_[item.sandbox_id];
    queue_.push_back(std::move(item));
    // The writer is woken by the first line after a quiet batch period (or
    // by a full batch), not by each: a wake-up per DNS query (a futex call in
    // the proxy's loop and a thread switched in beside it, 5,000 a second at
    // 5k queries/s) was a share of the proxy's added p99 on a 2-CPU node, and
    // one per batch still put a wake-up call on the loop 200 times a second
    // (docs/dns.md "Speed").
    if (idle_ || queue_.size() == kBatchLines) {
      idle_ = false;
      wake = true;
      ++wakeups_;
    }
  }
  if (wake) wake_.notify_one();
}

void UserEventWriter::Flush() {
  std::unique_lock<std::mutex> l(mu_);
  const uint64_t target = submitted_;
  // One whole pass of the writer after this call: it wrote what was queued
  // and tried to report what was lost.
  const uint64_t pass = passes_ + 1;
  flush_until_ = std::max(flush_until_, pass);
  wake_.notify_one();
  drained_.wait(l, [&] { return done_ >= target && passes_ >= pass; });
}

uint64_t UserEventWriter::written() const {
  std::lock_guard<std::mutex> l(mu_);
  return written_;
}

bool UserEventWriter::waiting_for_lines() const {
  std::lock_guard<std::mutex> l(mu_);
  return idle_;
}

uint64_t UserEventWriter::wakeups() const {
  std::lock_guard<std::mutex> l(mu_);
  return wakeups_;
}

uint64_t UserEventWriter::lost() const {
  std::lock_guard<std::mutex> l(mu_);
  return lost_;
}

bool UserEventWriter::NeedsRecount(size_t bytes) {
  if (since_count_ >= options_.recount_bytes) return true;
  if (pending_bytes_ + bytes <= options_.max_pending_bytes) return false;
  // Over the bound: counted again only once the directory changed (a
  // holder removed a file: room again).  Re-listing it for every line while
  // no reader ran cost the writer a readdir and a stat per pending file per
  // line, beside the proxy's loop.
  struct stat st;
  if (stat(dir_.c_str(), &st) != 0) return true;
  const int64_t mtime = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  return mtime != counted_dir_mtime_ns_;
}

bool UserEventWriter::Fits(size_t bytes) {
  if (NeedsRecount(bytes)) {
    struct stat st;
    counted_dir_mtime_ns_ =
        stat(dir_.c_str(), &st) == 0 ? int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec : -1;
    pending_bytes_ = PendingBytes(dir_);
    since_count_ = 0;
  }
  return pending_bytes_ + bytes <= options_.max_pending_bytes;
}

absl::Status UserEventWriter::NextFile() {
  std::string path;
  size_t bytes = 0;
  // Our own full file stays locked meanwhile, so it is never the one reused.
  std::optional<UniqueFd> reused = ReusePendingFile(dir_, options_.max_file_bytes, path, bytes);
  UniqueFd fd;
  if (reused) {
    fd = std::move(*reused);
  } else {
    EGR_ASSIGN_OR_RETURN(fd, NewPendingFile(dir_, path));
  }
  // The old one is released (unlocked) only now: the holder reads it to its
  // end and removes it.
  fd_ = std::move(fd);
  path_ = std::move(path);
  file_bytes_ = bytes;
  reused_ = reused.has_value();
  return absl::OkStatus();
}

void UserEventWriter::WriteBatch(const std::deque<Item>& items, std::vector<Wrote>& outcome) {
  outcome.assign(items.size(), Wrote::kFailed);
  std::string text;
  std::vector<size_t> in_text;  // the items whose line is in `text`
  // One write() for the lines gathered (whole lines: the holder reads whole
  // lines or none); a line it did not wholly write is failed, and its bytes
  // are taken off the counts they were added to.
  auto put = [&] {
    if (in_text.empty()) return;
    const size_t wrote = WriteText(text);
    size_t end = 0;
    for (size_t i : in_text) {
      const size_t bytes = items[i].line.size() + 1;
      end += bytes;
      if (end <= wrote) {
        outcome[i] = Wrote::kYes;
      } else {
        file_bytes_ -= bytes;
        pending_bytes_ -= bytes;
        since_count_ -= std::min(since_count_, bytes);
      }
    }
    text.clear();
    in_text.clear();
  };
  for (size_t i = 0; i < items.size(); ++i) {
    const size_t bytes = items[i].line.size() + 1;
    // A recount reads the files: what is gathered goes to its file first.
    if (NeedsRecount(bytes)) put();
    if (!Fits(bytes)) {
      outcome[i] = Wrote::kNoRoom;
      continue;
    }
    if (file_bytes_ > 0 && file_bytes_ + bytes > options_.max_file_bytes) {
      put();
      if (absl::Status s = NextFile(); !s.ok()) {
        spdlog::warn("audit: {}: {}", source_, s.ToString());
        continue;
      }
    }
    text.append(items[i].line);
    text.push_back('\n');
    in_text.push_back(i);
    file_bytes_ += bytes;
    pending_bytes_ += bytes;
    since_count_ += bytes;
  }
  put();
}

UserEventWriter::Wrote UserEventWriter::Write(const std::string& line) {
  const size_t bytes = line.size() + 1;
  if (!Fits(bytes)) return Wrote::kNoRoom;
  if (file_bytes_ > 0 && file_bytes_ + bytes > options_.max_file_bytes) {
    if (absl::Status s = NextFile(); !s.ok()) {
      spdlog::warn("audit: {}: {}", source_, s.ToString());
      return Wrote::kFailed;
    }
  }
  if (!WriteLine(line)) return Wrote::kFailed;
  file_bytes_ += bytes;
  pending_bytes_ += bytes;
  since_count_ += bytes;
  return Wrote::kYes;
}

// What found no room, into overflow.json (one locked read-modify-write per
// writer pass that had any).
bool UserEventWriter::ReportOverflow() {
  absl::Status s = WithOverflow(overflow_path_, [&](nlohmann::json& j) -> absl::Status {
    nlohmann::json& mine = j[source_];
    if (!mine.is_object()) mine = nlohmann::json::object();
    for (const auto& [id, n] : overflow_) {
      const std::string key = std::to_string(id);
      mine[key] = mine.value(key, uint64_t{0}) + n;
    }
    return absl::OkStatus();
  });
  if (!s.ok()) {
    spdlog::warn("audit: {}: {}", source_, s.ToString());
    return false;
  }
  overflow_.clear();
  return true;
}

bool UserEventWriter::WriteLine(const std::string& line) {
  const std::string text = line + "\n";
  return WriteText(text) == text.size();
}

size_t UserEventWriter::WriteText(const std::string& text) {
  // One write() of whole lines on an O_APPEND file: the holder reads whole
  // lines or none (a short write is retried from where it stopped; only a
  // writer killed in between leaves half a line, which the holder counts).
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = write(fd_.get(), text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (off > 0 && text[off - 1] != '\n') {
        // Half a line is worse than none: end it so the next one parses.
        (void)!write(fd_.get(), "\n", 1);
      }
      return off;
    }
    off += static_cast<size_t>(n);
  }
  return off;
}

void UserEventWriter::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  bool report_failed = false;
  bool wrote = false;  // the last pass had lines
  std::vector<Wrote> outcome;
  for (;;) {
    // Cuts a batch's gathering short.
    auto urgent = [&] { return stop_ || passes_ < flush_until_ || queue_.size() >= kBatchLines; };
    auto ready = [&] { return urgent() || !queue_.empty() || (!unreported_.empty() && !report_failed); };
    if (!urgent()) {
      // Lines kept coming: the next batch is gathered on our own timer,
      // and lines submitted meanwhile wake nobody.
      if (wrote) wake_.wait_for(l, kBatchGather, urgent);
      if (!ready()) {
        // Quiet for a whole batch period: the next line wakes us (a loss
        // record that could not be written is tried again a second later,
        // or with the next line, not in a busy loop).
        idle_ = true;
        if (report_failed) {
          wake_.wait_for(l, std::chrono::seconds(1), ready);
        } else {
          wake_.wait(l, ready);
        }
        idle_ = false;
        // A batch's first line woke us: the lines that follow it for a
        // moment go in the same write() (a Flush() or a full batch cuts it
        // short).
        if (!queue_.empty()) wake_.wait_for(l, kBatchGather, urgent);
      }
    }
    report_failed = false;
    wrote = !queue_.empty();
    while (!queue_.empty()) {
      std::deque<Item> batch;
      batch.swap(queue_);
      l.unlock();
      size_t encoded = 0;
      for (Item& item : batch) {
        if (!item.encode) continue;
        item.line = item.encode(item.deferred.get());
        item.deferred.reset();
        // A long batch is encoded in slices with the CPU offered between
        // them: the scheduler lets a running thread finish its slice (about
        // a millisecond) before one woken beside it runs, and the proxy's
        // loop, woken by a query on our CPU, should wait for a slice of
        // lines at most.
        if (++encoded % kEncodeSlice == 0) sched_yield();
      }
      WriteBatch(batch, outcome);
      l.lock();
      for (size_t i = 0; i < batch.size(); ++i) {
        const uint64_t sandbox = batch[i].sandbox_id;
        if (auto q = queued_.find(sandbox); q != queued_.end() && --q->second == 0) queued_.erase(q);
        if (outcome[i] == Wrote::kYes) {
          ++written_;
        } else if (outcome[i] == Wrote::kNoRoom) {
          ++lost_;
          ++overflow_[sandbox];
        } else {
          ++lost_;
          ++unreported_[sandbox];
        }
        ++done_;
      }
    }
    // What could not be queued or written, as loss records, once writing
    // works again.
    for (auto it = unreported_.begin(); it != unreported_.end();) {
      // Submit() may count more for this sandbox while the lock is down:
      // only what this record reports is taken off.
      const uint64_t reported = it->second;
      const std::string line = Dump(ChannelLoss(source_, it->first, reported, "queue full or write failed"));
      l.unlock();
      const Wrote w = Write(line);
      l.lock();
      if (w == Wrote::kFailed) {
        report_failed = true;
        break;
      }
      // No room for the loss record either: the count goes to overflow.json.
      if (w == Wrote::kNoRoom) overflow_[it->first] += reported;
      it->second -= reported;
      it = it->second == 0 ? unreported_.erase(it) : std::next(it);
    }
    if (!overflow_.empty()) {
      l.unlock();
      const bool ok = ReportOverflow();
      l.lock();
      if (!ok) report_failed = true;
    }
    ++passes_;
    drained_.notify_all();
    if (stop_ && queue_.empty()) {
      if (!unreported_.empty() || !overflow_.empty()) {
        uint64_t n = 0;
        for (const auto& [id, c] : unreported_) n += c;
        for (const auto& [id, c] : overflow_) n += c;
        spdlog::error("audit: {} of {}'s records lost and not reported in the stream: {} unwritable", n, source_,
                      path_);
      }
      return;
    }
  }
}

void AddSandboxLabels(nlohmann::json& j, const std::optional<SandboxInfo>& sb) {
  if (!sb) return;
  j["sandbox"]["labels"] = sb->labels;
  auto put = [&](const char* label, nlohmann::json& at) {
    auto it = sb->labels.find(label);
    if (it != sb->labels.end()) at = it->second;
  };
  if (sb->labels.count("pod")) put("pod", j["pod"]["name"]);
  if (sb->labels.count("namespace")) put("namespace", j["pod"]["namespace"]);
  if (sb->labels.count("task")) put("task", j["task"]);
  if (sb->labels.count("run")) put("run", j["run"]);
}

void WriteOneUserEvent(const Paths& paths, nlohmann::json record, uint64_t sandbox_id) {
  if (access(paths.runtime_dir.c_str(), F_OK) != 0) return;
  auto w = UserEventWriter::Open(paths, "egressctl");
  if (!w.ok()) {
    spdlog::warn("audit: {} not recorded: {}", record.value("type", "event"), w.status().ToString());
    return;
  }
  (*w)->Submit(std::move(record), sandbox_id);
  (*w)->Flush();
}

absl::Status IngestPending(const Paths& paths, Exporter& exporter, const std::function<absl::Status()>& between) {
  size_t sliced = 0;
  auto slice = [&]() -> absl::Status {
    if (!between || ++sliced % kIngestSlice != 0) return absl::OkStatus();
    return between();
  };
  const std::string dir = PendingDir(paths);
  DIR* d = opendir(dir.c_str());
  if (!d) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, absl::StrCat("open ", dir));
  }
  std::vector<std::string> names;
  while (const dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n[0] != '.' && absl::EndsWith(n, kSuffix)) names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  nlohmann::json& offsets = exporter.pending_offsets();
  // Files gone since (removed by an earlier holder) no longer need an offset.
  for (auto it = offsets.begin(); it != offsets.end();) {
    if (!std::binary_search(names.begin(), names.end(), it.key())) {
      it = offsets.erase(it);
    } else {
      ++it;
    }
  }
  // Every file's new lines first, then emitted in the order of their `time`
  // (several processes write at once; within one window their records come
  // out as they happened), then the offsets moved and finished files removed.
  struct Pending {
    std::string time;
    nlohmann::json record;
  };
  std::vector<Pending> ready;
  struct Done {
    std::string name, path;
    uint64_t offset;
    bool remove;
    UniqueFd lock;  // held until removed
  };
  std::vector<Done> done;
  for (const std::string& name : names) {
    const std::string path = absl::StrCat(dir, "/", name);
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) continue;
      return ErrnoStatus(errno, absl::StrCat("open ", path));
    }
    UniqueFd f(fd);
    // Taken before reading: once it is ours, the writer is gone and the file
    // will not grow, so what is read now is all of it.
    const bool writer_gone = flock(fd, LOCK_EX | LOCK_NB) == 0;
    uint64_t offset = offsets.value(name, uint64_t{0});
    if (lseek(fd, static_cast<off_t>(offset), SEEK_SET) < 0) return ErrnoStatus(errno, absl::StrCat("seek ", path));
    std::string buf;
    char chunk[65536];
    for (;;) {
      ssize_t n = read(fd, chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus(errno, absl::StrCat("read ", path));
      if (n == 0) break;
      buf.append(chunk, n);
    }
    size_t start = 0, nl;
    while ((nl = buf.find('\n', start)) != std::string::npos) {
      std::string_view line(buf.data() + start, nl - start);
      start = nl + 1;
      if (line.empty()) continue;
      nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
      if (r.is_discarded() || !r.is_object()) r = ChannelLoss("pending " + name, 0, 1, "a line that is not JSON");
      std::string time = r.contains("time") && r["time"].is_string() ? r["time"].get<std::string>() : "";
      ready.push_back(Pending{std::move(time), std::move(r)});
      EGR_RETURN_IF_ERROR(slice());
    }
    // A writer killed mid-line: that record is lost, and says so.
    if (writer_gone && start < buf.size()) {
      nlohmann::json loss = ChannelLoss("pending " + name, 0, 1, "its writer died writing it");
      std::string time = loss["time"];
      ready.push_back(Pending{std::move(time), std::move(loss)});
    }
    // A file to remove stays locked until it is gone: a writer taking over
    // a gone writer's file (ReusePendingFile) must not append to it between
    // this read and the unlink.
    done.push_back(Done{name, path, offset + start, writer_gone, writer_gone ? std::move(f) : UniqueFd()});
  }
  // What writers found no room for (overflow.json): one loss record per
  // source and sandbox, and the file emptied, under its lock.
  if (access(OverflowPath(paths).c_str(), F_OK) == 0) {
    EGR_RETURN_IF_ERROR(WithOverflow(OverflowPath(paths), [&](nlohmann::json& j) -> absl::Status {
      for (const auto& [source, per] : j.items()) {
        if (!per.is_object()) continue;
        for (const auto& [id, n] : per.items()) {
          uint64_t sandbox = 0;
          if (!n.is_number_unsigned() || n.get<uint64_t>() == 0) continue;
          (void)absl::SimpleAtoi(id, &sandbox);
          nlohmann::json loss = ChannelLoss(source, sandbox, n.get<uint64_t>(), "pending files full (no reader)");
          std::string time = loss["time"];
          ready.push_back(Pending{std::move(time), std::move(loss)});
        }
      }
      j = nlohmann::json::object();
      return absl::OkStatus();
    }));
  }
  std::stable_sort(ready.begin(), ready.end(), [](const Pending& a, const Pending& b) { return a.time < b.time; });
  for (Pending& p : ready) {
    EGR_RETURN_IF_ERROR(exporter.OnUserRecord(std::move(p.record)));
    EGR_RETURN_IF_ERROR(slice());
  }
  for (const Done& d : done) {
    if (d.remove) {
      if (unlink(d.path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("remove ", d.path));
      offsets.erase(d.name);
    } else {
      offsets[d.name] = d.offset;
    }
  }
  return absl::OkStatus();
}

}  // namespace egressd::audit
