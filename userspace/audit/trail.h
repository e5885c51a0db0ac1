// Reading the audit trail with exactly one reader per ring.  The first reader
// takes the reader lock and becomes the holder: it reads the ring and closes
// fold windows, writes every line to the spools, and hands its own lines to
// its sink.  Every other reader tails a spool, and takes the lock (and the
// ring) as soon as the holder is gone, so a holder that exits hands over
// without a gap: the ring keeps what nobody read, the state file the numbers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "userspace/audit/exporter.h"
#include "userspace/common/node.h"

namespace egressd::audit {

struct TrailOptions {
  int window_ms = 1000;  // fold window: summaries come at least this often
  // 0: every sandbox (all.jsonl); else only this sandbox's spool and lines.
  uint64_t sandbox_id = 0;
  // Where a sandbox's lines are read from its spool's start (what an
  // earlier holder spooled of it), every sandbox's lines start at the end of
  // all.jsonl: what is there was for readers before.
};

// Called with each line of the selected sandbox(es), whole, no newline.
using LineFn = std::function<void(const std::string& line)>;

// Reads until `done()` says the caller has what it waits for, then until
// every occurrence up to that moment is written: drains the ring and closes a
// last window (holder), or waits for the holder's progress mark to pass that
// moment (follower).  `done` is asked between polls; it may block briefly.
absl::Status ReadTrail(const Paths& paths, const TrailOptions& options, const LineFn& out,
                       const std::function<bool()>& done);

}  // namespace egressd::audit
