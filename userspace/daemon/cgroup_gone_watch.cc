#include "userspace/daemon/cgroup_gone_watch.h"

#include <dirent.h>
#include <errno.h>
#include <unistd.h>

#include <set>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "userspace/common/cgroup_tree.h"
#include "userspace/common/errors.h"

namespace egressd::daemon {

namespace asio = boost::asio;

namespace {

// "<id>.json" -> id; temp files of a write in progress and quarantined
// records are not records.
bool RecordIdOf(const std::string& name, uint64_t& id) {
  constexpr size_t kExt = 5;  // ".json"
  if (name.size() <= kExt || name.compare(name.size() - kExt, kExt, ".json") != 0) return false;
  return absl::SimpleAtoi(name.substr(0, name.size() - kExt), &id);
}

}  // namespace

CgroupGoneWatch::CgroupGoneWatch(asio::io_context& io, std::string records_dir, Gone gone)
    : io_(io), records_dir_(std::move(records_dir)), gone_(std::move(gone)), sd_(io) {}

CgroupGoneWatch::~CgroupGoneWatch() {
  boost::system::error_code ec;
  sd_.close(ec);  // closing the inotify fd drops every watch
}

absl::Status CgroupGoneWatch::Start() {
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "inotify_init1 (watching sandbox cgroups for their removal)");
  sd_.assign(fd);
  records_wd_ = inotify_add_watch(fd, records_dir_.c_str(), IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE);
  if (records_wd_ < 0) return ErrnoStatus(errno, absl::StrCat("inotify_add_watch ", records_dir_));
  Rescan();
  Read();
  return absl::OkStatus();
}

void CgroupGoneWatch::Watch(uint64_t cgroup_id) {
  if (by_id_.count(cgroup_id)) return;
  auto cg = OpenCgroupById(cgroup_id);
  if (absl::IsNotFound(cg.status())) return Report(cgroup_id);
  if (!cg.ok()) {
    spdlog::warn("cgroup {}: {}: its removal is seen at the next start only", cgroup_id, cg.status().ToString());
    return;
  }
  // The magic link resolves to the directory the handle opened.
  const std::string via = absl::StrCat("/proc/self/fd/", cg->get());
  int wd = inotify_add_watch(sd_.native_handle(), via.c_str(), IN_DELETE_SELF | IN_ONLYDIR);
  if (wd < 0) {
    spdlog::warn("cgroup {}: inotify_add_watch: {}: its removal is seen at the next start only", cgroup_id,
                 std::strerror(errno));
    return;
  }
  by_wd_[wd] = cgroup_id;
  by_id_[cgroup_id] = wd;
  cg->reset();
  // Removed between the open and the watch: the event may have gone to the
  // fd we held, not to the watch.
  if (auto again = CgroupExists(cgroup_id); again.ok() && !*again) {
    Unwatch(cgroup_id);
    Report(cgroup_id);
  }
}

void CgroupGoneWatch::Unwatch(uint64_t cgroup_id) {
  auto it = by_id_.find(cgroup_id);
  if (it == by_id_.end()) return;
  inotify_rm_watch(sd_.native_handle(), it->second);  // EINVAL once the directory went: dropped already
  by_wd_.erase(it->second);
  by_id_.erase(it);
}

void CgroupGoneWatch::Report(uint64_t cgroup_id) {
  asio::post(io_, [this, cgroup_id] { gone_(cgroup_id); });
}

void CgroupGoneWatch::Rescan() {
  std::set<uint64_t> recorded;
  if (DIR* d = opendir(records_dir_.c_str())) {
    while (dirent* e = readdir(d)) {
      uint64_t id = 0;
      if (RecordIdOf(e->d_name, id)) recorded.insert(id);
    }
    closedir(d);
  } else {
    spdlog::error("cgroup removals: opendir {}: {}", records_dir_, std::strerror(errno));
    return;
  }
  std::vector<uint64_t> drop;
  for (const auto& [id, wd] : by_id_) {
    if (!recorded.count(id)) drop.push_back(id);
  }
  for (uint64_t id : drop) Unwatch(id);
  // A watched cgroup that went while events were lost.
  std::vector<uint64_t> gone;
  for (const auto& [id, wd] : by_id_) {
    if (auto e = CgroupExists(id); e.ok() && !*e) gone.push_back(id);
  }
  for (uint64_t id : gone) {
    Unwatch(id);
    Report(id);
  }
  for (uint64_t id : recorded) Watch(id);
}

void CgroupGoneWatch::Read() {
  sd_.async_read_some(asio::buffer(buf_), [this](const boost::system::error_code& ec, size_t n) {
    if (ec) {
      if (ec != asio::error::operation_aborted) spdlog::error("cgroup removals: inotify: {}", ec.message());
      return;
    }
    bool overflow = false;
    std::set<uint64_t> written, removed;
    for (size_t off = 0; off + sizeof(inotify_event) <= n;) {
      auto* ev = reinterpret_cast<const inotify_event*>(buf_.data() + off);
      off += sizeof(inotify_event) + ev->len;
      if (ev->mask & IN_Q_OVERFLOW) {
        overflow = true;
        continue;
      }
      if (ev->wd == records_wd_) {
        uint64_t id = 0;
        if (!ev->len || !RecordIdOf(ev->name, id)) continue;
        if (ev->mask & (IN_DELETE | IN_MOVED_FROM)) {
          removed.insert(id);
          written.erase(id);
        } else {
          written.insert(id);
          removed.erase(id);
        }
        continue;
      }
      if (!(ev->mask & (IN_DELETE_SELF | IN_IGNORED))) continue;
      auto it = by_wd_.find(ev->wd);
      if (it == by_wd_.end()) continue;  // a watch we dropped ourselves
      const uint64_t id = it->second;
      by_id_.erase(id);
      by_wd_.erase(it);
      Report(id);
    }
    for (uint64_t id : removed) Unwatch(id);
    for (uint64_t id : written) Watch(id);
    if (overflow) Rescan();
    Read();
  });
}

}  // namespace egressd::daemon
