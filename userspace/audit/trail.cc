#include "userspace/audit/trail.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <optional>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "maps/event_ring.h"
#include "userspace/audit/reader_lock.h"
#include "userspace/audit/user_events.h"
#include "userspace/audit/spool.h"
#include "userspace/common/errors.h"

namespace egressd::audit {
namespace {

// The ring is read at least this often (records below its wake-up threshold
// wake no one: maps/event_ring.h); the follower polls its file as often.
constexpr int kPollMs = maps::kRingDrainMs;

using Tail = SpoolTail;

// The holder's loop: the ring, the windows, the spools.
absl::Status Hold(const Paths& paths, const TrailOptions& o, const LineFn& out,
                  const std::function<bool()>& done, Tail& own_spool) {
  // What the previous holder spooled of ours and we have not read yet.
  EGR_RETURN_IF_ERROR(own_spool.Read(out));
  EGR_ASSIGN_OR_RETURN(auto ring, maps::EventRing::Open(paths.pin_root));
  ExporterOptions xo;
  xo.state_path = AuditDir(paths) + "/state.json";
  xo.spool_dir = SpoolDir(paths);
  auto sink = [&](const LineMeta& meta, const std::string& line) {
    if (o.sandbox_id == 0 || meta.sandbox_id == o.sandbox_id || meta.every_sandbox) out(line);
  };
  EGR_ASSIGN_OR_RETURN(auto exporter, Exporter::Create(paths, xo, sink));
  // From here our own spool only grows with what we write and hand to
  // `out` ourselves: it is not read again (reading it back cost a copy of
  // every line).
  absl::Status failed;
  auto on_event = [&](const egr_event& e) {
    if (failed.ok()) failed = exporter->OnEvent(e);
  };
  auto close_window = [&]() -> absl::Status {
    const uint64_t closing = BootNowNs();
    EGR_ASSIGN_OR_RETURN(auto counts, ring.CloseWindow());
    // Records put on the ring before the epoch moved are all there now.
    for (;;) {
      EGR_ASSIGN_OR_RETURN(int n, ring.Poll(0, on_event));
      EGR_RETURN_IF_ERROR(failed);
      EGR_RETURN_IF_ERROR(exporter->Flush());
      if (n == 0) break;
    }
    // User-space sources' lines (user_events.h) written before `closing`,
    // the ring read between slices of them.
    EGR_RETURN_IF_ERROR(IngestPending(paths, *exporter, [&]() -> absl::Status {
      EGR_RETURN_IF_ERROR(ring.Poll(0, on_event).status());
      EGR_RETURN_IF_ERROR(failed);
      return exporter->Flush();
    }));
    return exporter->OnWindow(counts, closing);
  };
  auto last_window = std::chrono::steady_clock::now();
  bool finishing = false;
  for (;;) {
    if (!finishing && done()) finishing = true;
    EGR_ASSIGN_OR_RETURN(int n, ring.Poll(finishing ? 0 : kPollMs, on_event));
    EGR_RETURN_IF_ERROR(failed);
    EGR_RETURN_IF_ERROR(exporter->Flush());
    if (finishing && n == 0) return close_window();
    if (std::chrono::steady_clock::now() - last_window >= std::chrono::milliseconds(o.window_ms)) {
      EGR_RETURN_IF_ERROR(close_window());
      last_window = std::chrono::steady_clock::now();
    }
  }
}

}  // namespace

absl::Status ReadTrail(const Paths& paths, const TrailOptions& o, const LineFn& out,
                       const std::function<bool()>& done) {
  EGR_RETURN_IF_ERROR(MakeDirs(SpoolDir(paths), 0700));
  Tail spool(SpoolPath(paths, o.sandbox_id));
  EGR_RETURN_IF_ERROR(spool.Open(o.sandbox_id == 0));
  std::optional<uint64_t> until;  // boot time done() said yes
  for (;;) {
    auto lock = ReaderLock::TryAcquire(paths);
    if (lock.ok()) {
      EGR_RETURN_IF_ERROR(spool.Open(o.sandbox_id == 0));
      return Hold(paths, o, out, until ? [] { return true; } : done, spool);
    }
    if (!absl::IsUnavailable(lock.status())) return lock.status();
    EGR_RETURN_IF_ERROR(spool.Open(o.sandbox_id == 0));
    EGR_RETURN_IF_ERROR(spool.Read(out));
    if (!until && done()) until = BootNowNs();
    if (until && ReadProgress(paths) >= *until) return spool.Read(out);
    // The holder writes; nothing to wait on but the file and its lock.
    poll(nullptr, 0, kPollMs);
  }
}

}  // namespace egressd::audit
