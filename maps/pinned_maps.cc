#include "maps/pinned_maps.h"

#include <bpf/bpf.h>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"
#include "maps/egressd_abi.h"

namespace egressd::maps {
absl::Status OpenPinnedMap(const std::string& root, const char* name, UniqueFd& out) {
  std::string path = absl::StrCat(root, "/", name);
  int fd = bpf_obj_get(path.c_str());
  if (fd < 0) {
    return ErrnoStatus(errno, absl::StrCat("open pinned map ", name, " at ", path,
                                           " (is egressd loaded? run `egressctl load`)"));
  }
  out.reset(fd);
  return absl::OkStatus();
}

absl::StatusOr<PinnedMaps> PinnedMaps::Open(const std::string& pin_root) {
  PinnedMaps m;
  m.pin_root_ = pin_root;
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_CGROUPS, m.cgroups_));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_POLICY, m.policy_));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_ALLOW4, m.allow4_));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_ALLOW6, m.allow6_));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_PROT4, m.prot4_));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_PROT6, m.prot6_));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_RESOLVED, m.resolved_));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_RESUSE, m.resuse_));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_CONFIG, m.config_));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_STATS, m.stats_));
  return m;
}

}  // namespace egressd::maps
