// One reader per ring: whoever holds <runtime_dir>/audit/reader.lock reads
// egr_events_v1 and the fold counts, and serves everyone else through the
// spools under <runtime_dir>/audit/spool/ (exporter.h).  An flock on a file
// nothing removes, as userspace/common/instance_lock.h explains.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "userspace/common/node.h"
#include "userspace/common/unique_fd.h"

namespace egressd::audit {

// <runtime_dir>/audit
std::string AuditDir(const Paths& paths);
// <runtime_dir>/audit/spool
std::string SpoolDir(const Paths& paths);
// <runtime_dir>/audit/spool/<sandbox id>.jsonl, or all.jsonl for 0.
std::string SpoolPath(const Paths& paths, uint64_t sandbox_id);

class ReaderLock {
 public:
  // Unavailable at once when another process reads the ring.
  static absl::StatusOr<ReaderLock> TryAcquire(const Paths& paths);

 private:
  UniqueFd fd_;
};

}  // namespace egressd::audit
