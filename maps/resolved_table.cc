#include "maps/resolved_table.h"

#include <bpf/bpf.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "maps/map_iter.h"
#include "userspace/common/errors.h"

namespace egressd::maps {
namespace {

egr_resolved_key KeyOf(uint64_t sandbox, const net::IpAddr& addr) {
  egr_resolved_key k{};
  k.sandbox_id = sandbox;
  auto b = addr.ToMapped16();
  std::copy(b.begin(), b.end(), k.addr);
  return k;
}

}  // namespace

absl::Status ResolvedTable::Learn(uint64_t sandbox, const net::IpAddr& addr, uint64_t expires_boot_ns,
                                  uint32_t name_id) {
  egr_resolved_key k = KeyOf(sandbox, addr);
  egr_resolved_val v{};
  if (bpf_map_lookup_elem(fd_, &k, &v) == 0 && v.expires_boot_ns >= expires_boot_ns) return absl::OkStatus();
  v = {};
  v.expires_boot_ns = expires_boot_ns;
  v.name_id = name_id;
  if (bpf_map_update_elem(fd_, &k, &v, BPF_ANY) != 0) {
    return ErrnoStatus(errno, absl::StrCat("learn ", addr.ToString(), " for sandbox ", sandbox, " in ", EGR_MAP_RESOLVED));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<egr_resolved_val>> ResolvedTable::Get(uint64_t sandbox, const net::IpAddr& addr) const {
  egr_resolved_key k = KeyOf(sandbox, addr);
  egr_resolved_val v{};
  if (bpf_map_lookup_elem(fd_, &k, &v) == 0) return v;
  if (errno == ENOENT) return std::nullopt;
  return ErrnoStatus(errno, absl::StrCat("lookup ", addr.ToString(), " for sandbox ", sandbox, " in ", EGR_MAP_RESOLVED));
}

absl::Status ResolvedTable::RemoveSandbox(uint64_t sandbox) {
  std::vector<egr_resolved_key> doomed;
  for (const auto& [k, v] : AllEntries<egr_resolved_key, egr_resolved_val>(fd_)) {
    if (k.sandbox_id == sandbox) doomed.push_back(k);
  }
  for (const auto& k : doomed) {
    if (bpf_map_delete_elem(fd_, &k) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, absl::StrCat("forget sandbox ", sandbox, " in ", EGR_MAP_RESOLVED));
    }
  }
  return absl::OkStatus();
}

}  // namespace egressd::maps
