// Sandbox cgroups that vanish, seen the moment they go (issue 14: "when a
// sandbox's cgroup disappears its state is collected").  One inotify fd on
// the daemon's Asio loop watches
//   - the records directory: a record written or removed by anyone (the
//     daemon's PUTs and DELETEs, `egressctl sandbox add|remove`, `egressctl
//     run`) starts or stops the watch on its cgroup;
//   - the parent directory of each recorded sandbox's cgroup for IN_DELETE
//     of directories, which cgroupfs reports at the rmdir (possible only
//     once no process is left in it).  The parent, not the cgroup itself: a
//     cgroup's own IN_DELETE_SELF comes only when its last dentry reference
//     goes, which an open fd on it (or a handle-opened alias) delays.
// An event names a directory; the sandboxes of that name below that parent
// are then checked by id (open_by_handle_at: a path another cgroup took
// since is never mistaken for it).  No polling: the owner is told the id
// and collects it.  A cgroup already gone, or whose path now holds another
// cgroup, when its watch is set is reported too, and so is every watched one
// found gone after an event queue overflow.  A record without a cgroup path
// (one reconcile made for an entry it found) is left to the next start.
#pragma once

#include <sys/inotify.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "absl/status/status.h"
#include "userspace/control/sandbox_record.h"

namespace egressd::daemon {

class CgroupGoneWatch {
 public:
  using Gone = std::function<void(uint64_t cgroup_id)>;
  // `gone` runs on the loop, never inside a call of ours.
  CgroupGoneWatch(boost::asio::io_context& io, const control::SandboxRecords& records, Gone gone);
  ~CgroupGoneWatch();

  // Watches the records directory, then the cgroup of every record in it
  // (watch first, then read: a record written in between is seen twice,
  // never missed).
  absl::Status Start();
  // Idempotent.  A cgroup that no longer exists is reported.
  void Watch(uint64_t cgroup_id, const std::string& cgroup_path);
  void Unwatch(uint64_t cgroup_id);
  size_t watched() const { return by_id_.size(); }

 private:
  void Read();
  // Every record in the directory watched; every watched cgroup without a
  // record or without a cgroup dropped (and the latter reported).
  void Rescan();
  void Report(uint64_t cgroup_id);
  // The sandboxes watched under parent watch `wd` named `name` (all of
  // them when empty) that no longer exist: unwatched and reported.
  void CheckUnder(int wd, const std::string& name);
  // Reads the record's path and watches it.
  void WatchRecord(uint64_t cgroup_id);

  boost::asio::io_context& io_;
  const control::SandboxRecords& records_;
  std::string records_dir_;
  Gone gone_;
  boost::asio::posix::stream_descriptor sd_;
  int records_wd_ = -1;
  struct Watched {
    int wd;             // its parent's watch
    std::string name;   // its directory's name in the parent
  };
  std::map<uint64_t, Watched> by_id_;
  std::map<int, std::string> parents_;  // wd -> parent directory
  alignas(inotify_event) std::array<char, 16 * 1024> buf_;
};

}  // namespace egressd::daemon
