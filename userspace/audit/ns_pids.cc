#include "userspace/audit/ns_pids.h"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "userspace/common/node.h"
#include "userspace/common/unique_fd.h"

namespace egressd::audit {
namespace {

// A pid namespace is at most 32 levels deep.
constexpr int kMaxPidnsDepth = 32;
constexpr size_t kMaxCached = 65536;

bool ReadAt(int dirfd, const char* name, std::string& out) {
  int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  UniqueFd f(fd);
  out.clear();
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out.append(buf, static_cast<size_t>(n));
  }
}

// Field 22 of /proc/PID/stat (after the comm, which may hold spaces and
// parentheses): clock ticks since boot.
std::optional<uint64_t> StartTicks(const std::string& stat) {
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::vector<absl::string_view> f = absl::StrSplit(absl::string_view(stat).substr(close + 1), ' ', absl::SkipEmpty());
  // f[0] is field 3 (state): field 22 is f[19].
  uint64_t v;
  if (f.size() < 20 || !absl::SimpleAtoi(f[19], &v)) return std::nullopt;
  return v;
}

// "NSpid:\t77\t1\n": the ids from the procfs's namespace down to the task's.
std::vector<uint32_t> StatusIds(const std::string& status, std::string_view field) {
  std::vector<uint32_t> ids;
  size_t at = 0;
  while (at < status.size()) {
    size_t nl = status.find('\n', at);
    if (nl == std::string::npos) nl = status.size();
    std::string_view line(status.data() + at, nl - at);
    at = nl + 1;
    if (line.size() <= field.size() || line.substr(0, field.size()) != field || line[field.size()] != ':') continue;
    for (absl::string_view w : absl::StrSplit(absl::string_view(line.data() + field.size() + 1, line.size() - field.size() - 1),
                                              absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      uint32_t v;
      if (!absl::SimpleAtoi(w, &v)) return {};
      ids.push_back(v);
    }
    return ids;
  }
  return ids;
}

// How many levels above the task's own pid namespace `ns` is (0: its own);
// nullopt: not on its chain.
std::optional<int> LevelsUp(int dirfd, const PidNamespace& ns) {
  int fd = openat(dirfd, "ns/pid", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  UniqueFd cur(fd);
  for (int k = 0; k < kMaxPidnsDepth; ++k) {
    struct stat st;
    if (fstat(cur.get(), &st) != 0) return std::nullopt;
    if (st.st_ino == ns.inode && st.st_dev == ns.dev) return k;
    // EPERM: the parent is outside our own namespace, the top we can see.
    int parent = ioctl(cur.get(), NS_GET_PARENT);
    if (parent < 0) return std::nullopt;
    cur.reset(parent);
  }
  return std::nullopt;
}

}  // namespace

NsPids::NsPids(std::string proc, std::string cgroup2)
    : proc_(std::move(proc)), cgroup2_(std::move(cgroup2)), ticks_per_s_(sysconf(_SC_CLK_TCK)) {
  if (ticks_per_s_ <= 0) ticks_per_s_ = 100;
}

NsIds NsPids::Lookup(uint32_t tgid, uint32_t tid, uint64_t cgroup_id, uint64_t event_boot_ns,
                     const PidNamespace& ns) {
  if (ns.inode == 0 || tgid == 0) return {};
  const Key key{tgid, tid, cgroup_id, ns.inode};
  if (auto it = cache_.find(key); it != cache_.end()) {
    // An event from before the task started is another task's.
    if (event_boot_ns >= it->second.started_ns) return it->second.ids;
    return {};
  }
  if (cache_.size() >= kMaxCached) cache_.clear();
  NsIds ids = Find(tgid, tid, cgroup_id, event_boot_ns, ns);
  return ids;
}

NsIds NsPids::Find(uint32_t tgid, uint32_t tid, uint64_t cgroup_id, uint64_t event_boot_ns,
                   const PidNamespace& ns) {
  const Key key{tgid, tid, cgroup_id, ns.inode};
  auto remember = [&](NsIds ids, uint64_t started) {
    cache_[key] = Found{ids, started};
    return ids;
  };
  int fd = open(absl::StrCat(proc_, "/", tgid, "/task/", tid).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  // Gone: nothing to say for the rest of the window (a flood of one dead
  // task's records asks once).
  if (fd < 0) return remember({}, 0);
  UniqueFd dir(fd);
  std::string text;
  if (!ReadAt(dir.get(), "stat", text)) return remember({}, 0);
  std::optional<uint64_t> ticks = StartTicks(text);
  if (!ticks) return remember({}, 0);
  const uint64_t started = *ticks * (1000000000ull / static_cast<uint64_t>(ticks_per_s_));
  // Started after the event (starttime is rounded down to a tick): a reused pid.
  if (started > event_boot_ns) return {};
  if (cgroup2_.empty()) {
    auto m = FindCgroup2Mount();
    if (!m.ok()) return remember({}, started);
    cgroup2_ = *m;
  }
  if (!ReadAt(dir.get(), "cgroup", text)) return remember({}, started);
  const size_t v2 = text.find("0::");
  if (v2 == std::string::npos || (v2 != 0 && text[v2 - 1] != '\n')) return remember({}, started);
  const size_t end = text.find('\n', v2);
  const std::string path = cgroup2_ + text.substr(v2 + 3, end == std::string::npos ? std::string::npos : end - v2 - 3);
  struct stat cg;
  if (stat(path.c_str(), &cg) != 0 || cg.st_ino != cgroup_id) return remember({}, started);
  std::optional<int> up = LevelsUp(dir.get(), ns);
  if (!up) return remember({}, started);
  if (!ReadAt(dir.get(), "status", text)) return remember({}, started);
  const std::vector<uint32_t> tgids = StatusIds(text, "NStgid"), pids = StatusIds(text, "NSpid");
  // The first entry is the node's (our procfs's) id: the same task.
  if (tgids.size() != pids.size() || static_cast<int>(pids.size()) <= *up || tgids.empty() || tgids[0] != tgid ||
      pids[0] != tid) {
    return remember({}, started);
  }
  const size_t at = pids.size() - 1 - static_cast<size_t>(*up);
  return remember(NsIds{tgids[at], pids[at]}, started);
}

}  // namespace egressd::audit
