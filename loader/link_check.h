// Whether each pinned cgroup link of an instance is in force, read from the
// kernel (issue 14: "the daemon verifies its links are attached and reports
// it").  A pin proves little: `bpftool link detach` (or anyone holding the
// link) detaches it and the pin stays, pointing at a link that judges
// nothing.  So for each link: its bpf_link info names the cgroup2 root (a
// detached cgroup link names cgroup 0), and the root's attach list for its
// hook (BPF_PROG_QUERY) holds its program.  A detached link cannot be
// re-attached; `egressctl load` (and a daemon's start, which loads when a
// link is not in force) attaches a new one in its pin's place.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/common/node.h"

namespace egressd {

struct LinkState {
  std::string name;     // egr_connect4, ...
  std::string pin;      // <pin_root>/links/<name>
  bool attached = false;
  std::string problem;  // why not, when not
};

// Every cgroup link of the instance under paths.pin_root.  An error only
// when the cgroup2 root cannot be read (a link's own problem is its state).
absl::StatusOr<std::vector<LinkState>> CheckCgroupLinks(const Paths& paths);

// The links not in force, "name: problem" each (empty: all are).
std::vector<std::string> DetachedLinks(const std::vector<LinkState>& links);

}  // namespace egressd
