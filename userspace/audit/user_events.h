// The channel by which user-space sources (the DNS proxy, egressctl's
// lifecycle commands) put records into the one numbered audit stream the
// reader-lock holder writes (exporter.h).
//
// Each writing process appends whole JSON lines to a pending file of its own,
// <runtime_dir>/audit/pending/<pid>-<nonce>.jsonl, which it holds an flock on
// for as long as it may write.  The holder ingests every pending file from
// the offset it persisted in its state (so across holders nothing is read
// twice or skipped), gives each line the stream's next `seq` and the
// sandbox's labels, and removes a file once its writer is gone (the lock is
// free) and all of it is read.
//
// Nothing is lost silently: a line that could not be queued (the bounded
// queue of a sandbox is full) or written (the file system refused it) is
// counted per sandbox and becomes a `loss` record (`source` names the
// channel) as soon as a write succeeds again; a dead writer's half-written
// last line becomes a loss record of the holder.  The source never waits on
// audit: Submit() takes a mutex for a push and returns.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "userspace/audit/record.h"
#include "userspace/common/node.h"
#include "userspace/common/unique_fd.h"

namespace egressd::audit {

class Exporter;

// <runtime_dir>/audit/pending
std::string PendingDir(const Paths& paths);

struct UserEventOptions {
  size_t max_queued_per_sandbox = 4096;  // lines one sandbox may have waiting
  size_t max_queued = 65536;             // lines of all sandboxes waiting
  // A writer goes on in a new pending file once its own reaches this (the
  // holder removes the old one once it has read it).
  size_t max_file_bytes = 1u << 20;
  // The pending files of the node together: a line that would take them
  // past this is not written but counted (pending/overflow.json) and
  // reported as a loss by the next holder.  The sum is read again every
  // `recount_bytes` a writer writes (and before it refuses a line), so with
  // no reader the files stay within max_pending_bytes plus recount_bytes
  // per writer alive at once.
  size_t max_pending_bytes = 64u << 20;
  size_t recount_bytes = 64u << 10;
};

// <runtime_dir>/audit/pending/overflow.json: {source: {sandbox id: lines}}
// that did not fit, not yet reported.
std::string OverflowPath(const Paths& paths);

// One process's writer: a bounded queue drained by a thread of its own into
// the process's pending file.
class UserEventWriter {
 public:
  // `source`: what the loss records of this writer call it ("dns-proxy",
  // "egressctl").
  static absl::StatusOr<std::unique_ptr<UserEventWriter>> Open(const Paths& paths, std::string source,
                                                               UserEventOptions options = {});
  ~UserEventWriter();  // writes what is queued, then releases the file
  UserEventWriter(const UserEventWriter&) = delete;
  UserEventWriter& operator=(const UserEventWriter&) = delete;

  // Queues `record` (schema and time already set; sandbox 0: none).  Never
  // blocks on I/O; a record that does not fit is counted as lost.
  void Submit(nlohmann::json record, uint64_t sandbox_id);
  // The same, for a record already encoded as one line of JSON (no newline).
  void SubmitLine(std::string line, uint64_t sandbox_id);
  // The same, for a record encoded by the writer's thread: `Encode(*what)`
  // is one line of JSON (no newline).  The DNS proxy hands its query events
  // over this way, so its loop never formats a line (a query's record was a
  // fifth of the loop's instructions, bench/results/2026-12-03-dns-notes.md
  // section 7).  The caller must not change `*what` after the call.
  template <auto Encode, typename T>
  void SubmitDeferred(std::shared_ptr<const T> what, uint64_t sandbox_id) {
    Enqueue(Item{{}, sandbox_id, std::move(what), [](const void* p) { return Encode(*static_cast<const T*>(p)); }});
  }
  // Returns once everything submitted before the call is written (or
  // counted as lost): egressctl run calls it before its audit reader's last
  // window, so its sandbox's lines are all in that window.
  void Flush();

  uint64_t written() const;
  uint64_t lost() const;
  // How many times a submitter woke the writer (a futex call in its thread).
  uint64_t wakeups() const;
  // The writer sleeps until a line comes (the next line wakes it).
  bool waiting_for_lines() const;
  const std::string& path() const { return path_; }

  // A batch: the writer gathers lines for this long (or until this many are
  // queued) before it writes them in one write().  While lines keep coming
  // it gathers the next batch on its own timer; only a first line after a
  // quiet batch period (or a full batch) wakes it, so a steady submitter
  // (the DNS proxy's loop) makes no wake-up call at all.  50 ms, not 5: each
  // pass costs the node tens of µs beyond its lines, and the holder reads
  // once a second anyway (bench/results/2026-12-03-dns-notes.md section 8).
  static constexpr size_t kBatchLines = 256;
  static constexpr std::chrono::milliseconds kBatchGather{50};
  // Deferred lines are encoded this many at a time, the CPU offered between.
  static constexpr size_t kEncodeSlice = 32;

 private:
  UserEventWriter() = default;
  void Loop();
  bool WriteLine(const std::string& line);
  size_t WriteText(const std::string& text);  // bytes written
  enum class Wrote { kYes, kFailed, kNoRoom };
  Wrote Write(const std::string& line);
  struct Item {
    std::string line;
    uint64_t sandbox_id;
    // Set: `line` is encode(deferred.get()), made by the writer thread.
    std::shared_ptr<const void> deferred;
    std::string (*encode)(const void*) = nullptr;
  };
  void Enqueue(Item item);
  // The lines of one pass, in as few write()s as the bound and the file's
  // rotation allow; outcome[i] is items[i]'s.
  void WriteBatch(const std::deque<Item>& items, std::vector<Wrote>& outcome);
  bool NeedsRecount(size_t bytes);
  bool Fits(size_t bytes);
  absl::Status NextFile();
  bool ReportOverflow();

  std::string source_, path_, dir_, overflow_path_;
  size_t file_bytes_ = 0;        // of the current pending file
  bool reused_ = false;          // it is a gone writer's, taken over (never removed by us)
  size_t pending_bytes_ = 0;     // of all pending files, as last counted
  size_t since_count_ = 0;       // written since
  int64_t counted_dir_mtime_ns_ = -1;  // the directory's mtime at that count
  std::map<uint64_t, uint64_t> overflow_;  // no room: not yet in overflow.json
  UserEventOptions options_;
  UniqueFd fd_;
  mutable std::mutex mu_;
  std::condition_variable wake_, drained_;
  std::deque<Item> queue_;
  absl::flat_hash_map<uint64_t, size_t> queued_;  // per sandbox
  // The writer waits for lines (untimed, or the 1 s retry of a failed loss
  // record) or is starting: the next line must wake it.
  bool idle_ = true;
  std::map<uint64_t, uint64_t> unreported_;  // lost, not yet in a loss record
  uint64_t submitted_ = 0, done_ = 0, written_ = 0, lost_ = 0, wakeups_ = 0;
  uint64_t passes_ = 0, flush_until_ = 0;  // writer passes done, and asked for
  bool stop_ = false;
  std::thread thread_;
};

// For short-lived commands (load, sandbox add): one record written at once
// through a writer opened for it.  Failures are logged, never fatal: the
// command's own outcome does not depend on audit.  Nothing is written where
// the runtime directory does not exist (egressd never ran on this node: a
// refused command leaves it as it was).
void WriteOneUserEvent(const Paths& paths, nlohmann::json record, uint64_t sandbox_id);

// The sandbox's labels as kernel records carry them (`sandbox.labels`,
// `pod.name`, `pod.namespace`, `task`, `run`), added at ingestion.
void AddSandboxLabels(nlohmann::json& record, const std::optional<SandboxInfo>& sandbox);

// The holder's side: reads every pending file from its persisted offset and
// hands each line to the exporter; the offsets ({file name: offset}) live in
// the exporter's state, saved with its `seq` at the end of each window.
// `between`, when given, runs after every slice of lines read and of records
// handed on (kIngestSlice): the holder reads the ring there, so a window's
// many DNS records of one sandbox never hold another sandbox's kernel records
// back (tests/priv/audit_test.cc OneSandboxsFloodCostsAnotherNothing: 100,000
// names in a few seconds made connect records 4 s late before).
inline constexpr size_t kIngestSlice = 256;
absl::Status IngestPending(const Paths& paths, Exporter& exporter,
                           const std::function<absl::Status()>& between = {});

}  // namespace egressd::audit
