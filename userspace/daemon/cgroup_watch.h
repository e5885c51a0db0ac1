// Directories appearing in the cgroup tree, on the daemon's Asio loop
// (issue 14: a PUT for a pod whose cgroup does not exist yet is held until
// it does).  One inotify fd as a posix::stream_descriptor; for every path it
// is asked to wait for, it watches the nearest existing ancestor for
// IN_CREATE/IN_MOVED_TO of directories (cgroupfs reports a mkdir as
// IN_CREATE) and, on any event, calls the owner back, which looks again and
// re-arms: the watches then move down to the levels that appeared.  No
// polling.  Arm before looking: a directory made between the look and the
// arm would otherwise be missed.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "absl/status/status.h"

namespace egressd::daemon {

class CgroupWatch {
 public:
  CgroupWatch(boost::asio::io_context& io, std::function<void()> on_change);
  ~CgroupWatch();
  absl::Status Start();

  // Watches the nearest existing ancestor of every path in `wanted` (and
  // drops the watches no longer needed).  A path that exists already needs
  // no watch: the owner sees it when it looks.
  absl::Status Arm(const std::set<std::string>& wanted);
  // The directories watched now.
  std::set<std::string> watched() const;
  // The directories Arm(wanted) would watch as the tree is now.
  static std::set<std::string> DirsFor(const std::set<std::string>& wanted);

 private:
  void Read();

  boost::asio::posix::stream_descriptor stream_;
  std::function<void()> on_change_;
  std::map<std::string, int> watches_;  // directory -> watch descriptor
  char buf_[4096];
};

// The nearest ancestor of `path` (itself included) that is a directory; ""
// when none is (a relative path).
std::string NearestExistingDirectory(const std::string& path);

}  // namespace egressd::daemon
