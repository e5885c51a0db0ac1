#include "userspace/daemon/cgroup_gone_watch.h"

#include <dirent.h>
#include <errno.h>
#include <unistd.h>

#include <set>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "maps/if_sandbox_table.h"
#include "userspace/common/cgroup_tree.h"
#include "userspace/common/errors.h"
#include "userspace/common/node.h"

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

CgroupGoneWatch::CgroupGoneWatch(asio::io_context& io, const control::SandboxRecords& records, Gone gone)
    : io_(io), records_(records), records_dir_(records.dir()), gone_(std::move(gone)), sd_(io) {}

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

void CgroupGoneWatch::WatchRecord(uint64_t cgroup_id) {
  if (by_id_.count(cgroup_id)) return;
  auto r = records_.Load(cgroup_id);
  if (!r.ok()) {
    spdlog::warn("cgroup removals: record {}: {}", cgroup_id, r.status().ToString());
    return;
  }
  if (*r) Watch(cgroup_id, (*r)->cgroup_path);
}

void CgroupGoneWatch::Watch(uint64_t cgroup_id, const std::string& cgroup_path) {
  if (by_id_.count(cgroup_id)) return;
  // A sandbox registered by interface alone has no cgroup to lose: its id
  // is no cgroup's (it would be found "gone").  Its interface's removal is
  // collected by the next start's reconcile.
  if (maps::IsInterfaceSandboxId(cgroup_id)) return;
  const auto slash = cgroup_path.find_last_of('/');
  if (cgroup_path.empty() || slash == std::string::npos || slash == 0) {
    auto e = CgroupExists(cgroup_id);
    if (e.ok() && !*e) return Report(cgroup_id);
    spdlog::debug("cgroup {}: no path in its record: its removal is seen at the next start", cgroup_id);
    return;
  }
  const std::string parent = cgroup_path.substr(0, slash);
  int wd = inotify_add_watch(sd_.native_handle(), parent.c_str(), IN_DELETE | IN_DELETE_SELF | IN_ONLYDIR);
  if (wd < 0) {
    // The parent went, so did the cgroup (or it was never where the record says).
    if (auto e = CgroupExists(cgroup_id); e.ok() && !*e) return Report(cgroup_id);
    spdlog::warn("cgroup {}: inotify_add_watch {}: {}: its removal is seen at the next start", cgroup_id, parent,
                 std::strerror(errno));
    return;
  }
  parents_[wd] = parent;
  by_id_[cgroup_id] = Watched{wd, cgroup_path.substr(slash + 1)};
  // Watched from here on; gone already, or its path holds another cgroup
  // (cgroup2 has no rename: ours went): reported now.
  auto id = CgroupIdOf(cgroup_path);
  if (!id.ok() || *id != cgroup_id) {
    if (auto e = CgroupExists(cgroup_id); e.ok() && !*e) {
      Unwatch(cgroup_id);
      Report(cgroup_id);
    }
  }
}

void CgroupGoneWatch::Unwatch(uint64_t cgroup_id) {
  auto it = by_id_.find(cgroup_id);
  if (it == by_id_.end()) return;
  const int wd = it->second.wd;
  by_id_.erase(it);
  for (const auto& [id, w] : by_id_) {
    if (w.wd == wd) return;  // the parent still holds others
  }
  inotify_rm_watch(sd_.native_handle(), wd);  // EINVAL once the directory went: dropped already
  parents_.erase(wd);
}

void CgroupGoneWatch::Report(uint64_t cgroup_id) {
  asio::post(io_, [this, cgroup_id] { gone_(cgroup_id); });
}

void CgroupGoneWatch::CheckUnder(int wd, const std::string& name) {
  std::vector<uint64_t> gone;
  for (const auto& [id, w] : by_id_) {
    if (w.wd != wd || (!name.empty() && w.name != name)) continue;
    if (auto e = CgroupExists(id); e.ok() && !*e) gone.push_back(id);
  }
  for (uint64_t id : gone) {
    Unwatch(id);
    Report(id);
  }
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
  for (const auto& [id, w] : by_id_) {
    if (!recorded.count(id)) drop.push_back(id);
  }
  for (uint64_t id : drop) Unwatch(id);
  // A watched cgroup that went while events were lost.
  std::set<int> wds;
  for (const auto& [id, w] : by_id_) wds.insert(w.wd);
  for (int wd : wds) CheckUnder(wd, "");
  for (uint64_t id : recorded) WatchRecord(id);
}

void CgroupGoneWatch::Read() {
  sd_.async_read_some(asio::buffer(buf_), [this](const boost::system::error_code& ec, size_t n) {
    if (ec) {
      if (ec != asio::error::operation_aborted) spdlog::error("cgroup removals: inotify: {}", ec.message());
      return;
    }
    bool overflow = false;
    std::set<uint64_t> written, removed;
    std::vector<std::pair<int, std::string>> deleted;  // parent watch, name ("" : the parent itself)
    for (size_t off = 0; off + sizeof(inotify_event) <= n;) {
      auto* ev = reinterpret_cast<const inotify_event*>(buf_.data() + off);
      off += sizeof(inotify_event) + ev->len;
      if (ev->mask & IN_Q_OVERFLOW) {
        overflow = true;
        continue;
      }
      const std::string name = ev->len ? std::string(ev->name) : std::string();
      if (ev->wd == records_wd_) {
        uint64_t id = 0;
        if (!RecordIdOf(name, id)) continue;
        if (ev->mask & (IN_DELETE | IN_MOVED_FROM)) {
          removed.insert(id);
          written.erase(id);
        } else {
          written.insert(id);
          removed.erase(id);
        }
        continue;
      }
      if (ev->mask & (IN_DELETE_SELF | IN_IGNORED)) {
        deleted.emplace_back(ev->wd, "");
      } else if ((ev->mask & IN_DELETE) && (ev->mask & IN_ISDIR)) {
        deleted.emplace_back(ev->wd, name);
      }
    }
    for (const auto& [wd, name] : deleted) CheckUnder(wd, name);
    for (uint64_t id : removed) Unwatch(id);
    for (uint64_t id : written) WatchRecord(id);
    if (overflow) Rescan();
    Read();
  });
}

}  // namespace egressd::daemon
