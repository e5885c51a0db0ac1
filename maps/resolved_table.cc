#include "maps/resolved_table.h"

#include <bpf/bpf.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "maps/map_iter.h"
#include "userspace/common/errors.h"

namespace egressd::maps {

egr_resolved_key ResolvedKeyOf(uint64_t sandbox, const net::IpAddr& addr) {
  egr_resolved_key k{};
  k.sandbox_id = sandbox;
  auto b = addr.ToMapped16();
  std::copy(b.begin(), b.end(), k.addr);
  return k;
}

namespace {

// name_id first, the others after it in their order, the oldest falling off.
bool WithName(egr_resolved_val& v, uint32_t name_id) {
  if (v.name_ids[0] == name_id) return false;
  uint32_t next[EGR_RESOLVED_NAMES] = {name_id};
  size_t n = 1;
  for (uint32_t id : v.name_ids) {
    if (id != 0 && id != name_id && n < EGR_RESOLVED_NAMES) next[n++] = id;
  }
  std::copy(std::begin(next), std::end(next), v.name_ids);
  return true;
}

}  // namespace

absl::Status ResolvedTable::Learn(uint64_t sandbox, const net::IpAddr& addr, uint64_t expires_boot_ns,
                                  uint32_t name_id) {
  egr_resolved_key k = ResolvedKeyOf(sandbox, addr);
  egr_resolved_val v{};
  bool changed = true;
  if (bpf_map_lookup_elem(fd_, &k, &v) == 0) {
    changed = WithName(v, name_id);
    if (expires_boot_ns > v.expires_boot_ns) {
      v.expires_boot_ns = expires_boot_ns;
      changed = true;
    }
  } else {
    v = {};
    v.expires_boot_ns = expires_boot_ns;
    v.name_ids[0] = name_id;
  }
  if (!changed) return absl::OkStatus();
  if (bpf_map_update_elem(fd_, &k, &v, BPF_ANY) != 0) {
    return ErrnoStatus(errno, absl::StrCat("learn ", addr.ToString(), " for sandbox ", sandbox, " in ", EGR_MAP_RESOLVED));
  }
  return absl::OkStatus();
}

absl::Status ResolvedTable::Forget(uint64_t sandbox, const net::IpAddr& addr) {
  egr_resolved_key k = ResolvedKeyOf(sandbox, addr);
  if (bpf_map_delete_elem(fd_, &k) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(addr.ToString(), " for sandbox ", sandbox, " not in ", EGR_MAP_RESOLVED));
    }
    return ErrnoStatus(errno, absl::StrCat("forget ", addr.ToString(), " for sandbox ", sandbox, " in ", EGR_MAP_RESOLVED));
  }
  // The use record goes with it; a flow still holding the address keeps
  // counting into a fresh one.
  if (use_fd_ >= 0 && bpf_map_delete_elem(use_fd_, &k) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("forget ", addr.ToString(), " for sandbox ", sandbox, " in ", EGR_MAP_RESUSE));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ResolvedTable::InUse(uint64_t sandbox, const net::IpAddr& addr) const {
  auto u = Use(sandbox, addr);
  if (!u.ok()) return u.status();
  if (!*u) return false;
  if ((*u)->socks > 0) return true;
  uint64_t now = dns::BootTimeNs();
  return (*u)->last_used_ns != 0 && now < (*u)->last_used_ns + window_ns_;
}

absl::StatusOr<std::optional<egr_resolved_val>> ResolvedTable::Get(uint64_t sandbox, const net::IpAddr& addr) const {
  egr_resolved_key k = ResolvedKeyOf(sandbox, addr);
  egr_resolved_val v{};
  if (bpf_map_lookup_elem(fd_, &k, &v) == 0) return v;
  if (errno == ENOENT) return std::nullopt;
  return ErrnoStatus(errno, absl::StrCat("lookup ", addr.ToString(), " for sandbox ", sandbox, " in ", EGR_MAP_RESOLVED));
}

absl::StatusOr<std::optional<egr_resuse_val>> ResolvedTable::Use(uint64_t sandbox, const net::IpAddr& addr) const {
  if (use_fd_ < 0) return std::nullopt;
  egr_resolved_key k = ResolvedKeyOf(sandbox, addr);
  egr_resuse_val v{};
  if (bpf_map_lookup_elem(use_fd_, &k, &v) == 0) return v;
  if (errno == ENOENT) return std::nullopt;
  return ErrnoStatus(errno, absl::StrCat("lookup ", addr.ToString(), " for sandbox ", sandbox, " in ", EGR_MAP_RESUSE));
}

absl::Status ResolvedTable::RemoveSandbox(uint64_t sandbox) {
  for (int fd : {fd_, use_fd_}) {
    if (fd < 0) continue;
    std::vector<egr_resolved_key> doomed;
    for (const auto& k : AllKeys<egr_resolved_key>(fd)) {
      if (k.sandbox_id == sandbox) doomed.push_back(k);
    }
    for (const auto& k : doomed) {
      if (bpf_map_delete_elem(fd, &k) != 0 && errno != ENOENT) {
        return ErrnoStatus(errno, absl::StrCat("forget sandbox ", sandbox, " in ",
                                               fd == fd_ ? EGR_MAP_RESOLVED : EGR_MAP_RESUSE));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace egressd::maps
