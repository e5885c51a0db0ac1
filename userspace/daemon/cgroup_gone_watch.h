// Sandbox cgroups that vanish, seen the moment they go (issue 14: "when a
// sandbox's cgroup disappears its state is collected").  One inotify fd on
// the daemon's Asio loop watches
//   - the records directory: a record written or removed by anyone (the
//     daemon's PUTs and DELETEs, `egressctl sandbox add|remove`, `egressctl
//     run`) starts or stops the watch on its cgroup;
//   - each recorded sandbox's cgroup directory, opened by its cgroup id
//     (open_by_handle_at: never a path another cgroup could take since) and
//     watched through /proc/self/fd/N for IN_DELETE_SELF, which cgroupfs
//     reports at the rmdir (possible only once no process is left in it).
// No polling: the owner is told the id and collects it.  A cgroup that is
// gone already when its watch is set is reported too, and so is every
// watched one found gone after an event queue overflow.
#pragma once

#include <sys/inotify.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "absl/status/status.h"

namespace egressd::daemon {

class CgroupGoneWatch {
 public:
  using Gone = std::function<void(uint64_t cgroup_id)>;
  // `gone` runs on the loop, never inside a call of ours.
  CgroupGoneWatch(boost::asio::io_context& io, std::string records_dir, Gone gone);
  ~CgroupGoneWatch();

  // Watches the records directory, then the cgroup of every record in it
  // (watch first, then read: a record written in between is seen twice,
  // never missed).
  absl::Status Start();
  // Idempotent.  A cgroup that no longer exists is reported.
  void Watch(uint64_t cgroup_id);
  void Unwatch(uint64_t cgroup_id);
  size_t watched() const { return by_id_.size(); }

 private:
  void Read();
  // Every record in the directory watched; every watched cgroup without a
  // record or without a cgroup dropped (and the latter reported).
  void Rescan();
  void Report(uint64_t cgroup_id);

  boost::asio::io_context& io_;
  std::string records_dir_;
  Gone gone_;
  boost::asio::posix::stream_descriptor sd_;
  int records_wd_ = -1;
  std::map<int, uint64_t> by_wd_;
  std::map<uint64_t, int> by_id_;
  alignas(inotify_event) std::array<char, 16 * 1024> buf_;
};

}  // namespace egressd::daemon
