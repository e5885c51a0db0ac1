// The maps of one loaded egressd instance, opened from their bpffs pins.
// Everything above maps/ talks to PolicyStore and SandboxTable, never to fds.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "userspace/common/unique_fd.h"

namespace egressd::maps {

// Opens the map pinned as `name` under `root` into `out`; the error names the
// map, the path and the errno (and says to run `egressctl load`).
absl::Status OpenPinnedMap(const std::string& root, const char* name, UniqueFd& out);

class PinnedMaps {
 public:
  // Opens every map pinned under pin_root; NotFound names the missing pin.
  static absl::StatusOr<PinnedMaps> Open(const std::string& pin_root);

  int cgroups() const { return cgroups_.get(); }
  int policy() const { return policy_.get(); }
  int allow4() const { return allow4_.get(); }
  int allow6() const { return allow6_.get(); }
  int prot4() const { return prot4_.get(); }
  int prot6() const { return prot6_.get(); }
  int resolved() const { return resolved_.get(); }
  int resuse() const { return resuse_.get(); }
  int config() const { return config_.get(); }
  int stats() const { return stats_.get(); }
  const std::string& pin_root() const { return pin_root_; }

 private:
  std::string pin_root_;
  UniqueFd cgroups_, policy_, allow4_, allow6_, prot4_, prot6_, resolved_, resuse_, config_, stats_;
};

}  // namespace egressd::maps
