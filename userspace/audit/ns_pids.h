// A task's ids in its sandbox's own pid namespace (`process.ns_pid`,
// `ns_tid`), found in user space when a record is encoded: the kernel's
// bpf_get_ns_current_pid_tgid is allowed in cgroup_sock_addr programs only
// from Linux 6.10 (before, only tracing programs may call it), and egressd
// runs on 6.1.
//
// The kernel gives the node's tgid and tid.  /proc/<tgid>/task/<tid> is then
// asked, through one directory fd (which stays bound to that task even if
// the pid is reused meanwhile), and believed only when:
//   - the task started no later than the record's event (stat's starttime,
//     boot-based): a pid reused after the event names another task;
//   - it is still in the event's cgroup (its cgroup path's inode is the
//     record's cgroup id);
//   - the sandbox's pid namespace (dev, inode from its record) is its own
//     or an ancestor of its own (NS_GET_PARENT), k levels up;
// and the ids are the entries k from the end of NStgid and NSpid.  A task
// gone by then, moved, or outside the namespace gets none (absent, not 0).
// What was found is kept for the rest of the fold window, then asked again:
// node pids are handed out cyclically, so a pid is not reused within one
// window unless pid_max is cycled through in that time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

namespace egressd::audit {

struct PidNamespace {
  uint64_t dev = 0, inode = 0;
};

struct NsIds {
  std::optional<uint32_t> pid, tid;
};

class NsPids {
 public:
  // `proc`: procfs of the node's pid namespace; `cgroup2`: the cgroup2 mount
  // (empty: found in /proc/mounts when first needed).
  explicit NsPids(std::string proc = "/proc", std::string cgroup2 = "");

  NsIds Lookup(uint32_t tgid, uint32_t tid, uint64_t cgroup_id, uint64_t event_boot_ns, const PidNamespace& ns);
  // The next fold window: what was found is asked again.
  void NewWindow() { cache_.clear(); }

 private:
  NsIds Find(uint32_t tgid, uint32_t tid, uint64_t cgroup_id, uint64_t event_boot_ns, const PidNamespace& ns);
  struct Key {
    uint32_t tgid, tid;
    uint64_t cgroup_id, ns_inode;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>()((uint64_t{k.tgid} << 32 | k.tid) ^ (k.cgroup_id * 0x9e3779b97f4a7c15ull) ^ k.ns_inode);
    }
  };
  struct Found {
    NsIds ids;
    uint64_t started_ns;  // the task's start; an earlier event is another task's
  };
  std::string proc_, cgroup2_;
  long ticks_per_s_;
  std::unordered_map<Key, Found, KeyHash> cache_;
};

}  // namespace egressd::audit
