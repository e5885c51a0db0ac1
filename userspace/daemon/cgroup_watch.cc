#include "userspace/daemon/cgroup_watch.h"

#include <errno.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"

namespace egressd::daemon {

std::string NearestExistingDirectory(const std::string& path) {
  std::string p = path;
  while (!p.empty()) {
    struct stat st {};
    if (stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return p;
    auto slash = p.find_last_of('/');
    if (slash == std::string::npos) return "";
    p = slash == 0 ? (p == "/" ? "" : "/") : p.substr(0, slash);
  }
  return "";
}

CgroupWatch::CgroupWatch(boost::asio::io_context& io, std::function<void()> on_change)
    : stream_(io), on_change_(std::move(on_change)) {}

CgroupWatch::~CgroupWatch() {
  boost::system::error_code ec;
  stream_.close(ec);  // closing the inotify fd drops every watch
}

absl::Status CgroupWatch::Start() {
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "inotify_init1 (watching the cgroup tree for pods' cgroups)");
  stream_.assign(fd);
  Read();
  return absl::OkStatus();
}

std::set<std::string> CgroupWatch::DirsFor(const std::set<std::string>& wanted) {
  std::set<std::string> dirs;
  for (const auto& path : wanted) {
    std::string d = NearestExistingDirectory(path);
    if (!d.empty() && d != path) dirs.insert(d);
  }
  return dirs;
}

absl::Status CgroupWatch::Arm(const std::set<std::string>& wanted) {
  const std::set<std::string> dirs = DirsFor(wanted);
  for (auto it = watches_.begin(); it != watches_.end();) {
    if (dirs.count(it->first)) {
      ++it;
      continue;
    }
    inotify_rm_watch(stream_.native_handle(), it->second);  // EINVAL if the directory went: already dropped
    it = watches_.erase(it);
  }
  for (const auto& d : dirs) {
    if (watches_.count(d)) continue;
    int wd = inotify_add_watch(stream_.native_handle(), d.c_str(), IN_CREATE | IN_MOVED_TO | IN_ONLYDIR);
    if (wd < 0) {
      // Gone between the stat and the watch: its parent is watched next time.
      if (errno == ENOENT || errno == ENOTDIR) continue;
      return ErrnoStatus(errno, absl::StrCat("inotify_add_watch ", d));
    }
    watches_[d] = wd;
  }
  return absl::OkStatus();
}

std::set<std::string> CgroupWatch::watched() const {
  std::set<std::string> out;
  for (const auto& [d, wd] : watches_) out.insert(d);
  return out;
}

void CgroupWatch::Read() {
  stream_.async_read_some(boost::asio::buffer(buf_), [this](const boost::system::error_code& ec, size_t) {
    if (ec == boost::asio::error::operation_aborted) return;
    if (ec) {
      spdlog::error("inotify read on the cgroup tree: {}: held pod registrations wait for the next event",
                    ec.message());
    }
    // Which directory appeared does not matter: the owner looks at every
    // held pod again (an IN_Q_OVERFLOW is handled the same way).
    on_change_();
    Read();
  });
}

}  // namespace egressd::daemon
