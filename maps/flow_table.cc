#include "maps/flow_table.h"

#include <bpf/bpf.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "maps/pinned_maps.h"
#include "userspace/common/errors.h"
#include "userspace/common/unique_fd.h"

namespace egressd::maps {

absl::Status WriteFlowConfig(const std::string& pin_root, const FlowConfig& config) {
  UniqueFd fd;
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_FLOWCFG, fd));
  const uint32_t zero = 0;
  egr_flowcfg_val v{.quota = config.quota,
                    .tcp_idle_s = config.tcp_idle_s,
                    .tcp_transitory_s = config.tcp_transitory_s,
                    .udp_idle_s = config.udp_idle_s};
  if (bpf_map_update_elem(fd.get(), &zero, &v, BPF_ANY) != 0) {
    return ErrnoStatus(errno, absl::StrCat("write the flow settings to ", EGR_MAP_FLOWCFG));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<egr_flowcnt_val>> ReadFlowCount(const std::string& pin_root, uint64_t sandbox_id) {
  UniqueFd fd;
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_FLOWCNT, fd));
  egr_flowcnt_val v{};
  if (bpf_map_lookup_elem(fd.get(), &sandbox_id, &v) == 0) return std::optional(v);
  if (errno == ENOENT) return std::optional<egr_flowcnt_val>();
  return ErrnoStatus(errno, absl::StrCat("look up sandbox ", sandbox_id, " in ", EGR_MAP_FLOWCNT));
}

namespace {

// Keys of the sandbox's flows.  A flow deleted while we walk ends the walk
// early at worst (get_next_key from a gone key restarts at the first): the
// caller walks again until nothing of the sandbox is left.
absl::StatusOr<std::vector<egr_flow_key>> KeysOf(int fd, uint64_t sandbox_id) {
  std::vector<egr_flow_key> out;
  egr_flow_key key{}, next{};
  egr_flow_key* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    if (next.sandbox_id == sandbox_id) out.push_back(next);
    key = next;
    prev = &key;
  }
  if (errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("iterate ", EGR_MAP_TCFLOW));
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::pair<egr_flow_key, egr_flow_val>>> ListFlows(const std::string& pin_root,
                                                                             uint64_t sandbox_id) {
  UniqueFd fd;
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_TCFLOW, fd));
  EGR_ASSIGN_OR_RETURN(auto keys, KeysOf(fd.get(), sandbox_id));
  std::vector<std::pair<egr_flow_key, egr_flow_val>> out;
  for (const auto& k : keys) {
    egr_flow_val v{};
    if (bpf_map_lookup_elem(fd.get(), &k, &v) == 0) out.emplace_back(k, v);
  }
  return out;
}

absl::StatusOr<size_t> ForgetSandboxFlows(const std::string& pin_root, uint64_t sandbox_id) {
  UniqueFd fd, cnt;
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_TCFLOW, fd));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_FLOWCNT, cnt));
  size_t gone = 0;
  for (;;) {
    EGR_ASSIGN_OR_RETURN(auto keys, KeysOf(fd.get(), sandbox_id));
    if (keys.empty()) break;
    for (const auto& k : keys) {
      if (bpf_map_delete_elem(fd.get(), &k) == 0) {
        ++gone;
      } else if (errno != ENOENT) {
        return ErrnoStatus(errno, absl::StrCat("delete a flow of sandbox ", sandbox_id, " from ", EGR_MAP_TCFLOW));
      }
    }
  }
  if (bpf_map_delete_elem(cnt.get(), &sandbox_id) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("delete sandbox ", sandbox_id, " from ", EGR_MAP_FLOWCNT));
  }
  return gone;
}

}  // namespace egressd::maps
