#include "maps/if_sandbox_table.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "maps/pinned_maps.h"
#include "userspace/common/errors.h"

namespace egressd::maps {

absl::StatusOr<IfSandboxTable> IfSandboxTable::Open(const std::string& pin_root) {
  IfSandboxTable t;
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_IFSANDBOX, t.fd_));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_IFPOD, t.pod_fd_));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_IFADDR, t.addr_fd_));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_TCDNS, t.dns_fd_));
  return t;
}

absl::Status IfSandboxTable::Set(uint32_t ifindex, const egr_cgroup_val& value) {
  if (bpf_map_update_elem(fd_.get(), &ifindex, &value, BPF_ANY) != 0) {
    return ErrnoStatus(errno, absl::StrCat("update interface ", ifindex, " in ", EGR_MAP_IFSANDBOX));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<egr_cgroup_val>> IfSandboxTable::Get(uint32_t ifindex) const {
  egr_cgroup_val v{};
  if (bpf_map_lookup_elem(fd_.get(), &ifindex, &v) == 0) return std::optional(v);
  if (errno == ENOENT) return std::optional<egr_cgroup_val>();
  return ErrnoStatus(errno, absl::StrCat("look up interface ", ifindex, " in ", EGR_MAP_IFSANDBOX));
}

absl::Status IfSandboxTable::Remove(uint32_t ifindex) {
  if (bpf_map_delete_elem(fd_.get(), &ifindex) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("delete interface ", ifindex, " from ", EGR_MAP_IFSANDBOX));
  }
  return absl::OkStatus();
}

absl::Status IfSandboxTable::RemoveDnsNotes(uint32_t ifindex) {
  for (uint32_t slot = 0; slot < EGR_TCDNS_SLOTS; slot++) {
    egr_tcdns_key k{.ifindex = ifindex, .slot = slot};
    if (bpf_map_delete_elem(dns_fd_.get(), &k) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, absl::StrCat("delete slot ", slot, " of interface ", ifindex, " from ", EGR_MAP_TCDNS));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<InterfaceEntry>> IfSandboxTable::List() const {
  std::vector<InterfaceEntry> out;
  uint32_t key = 0, next = 0;
  uint32_t* prev = nullptr;
  while (bpf_map_get_next_key(fd_.get(), prev, &next) == 0) {
    egr_cgroup_val v{};
    if (bpf_map_lookup_elem(fd_.get(), &next, &v) == 0) out.push_back({next, v});
    key = next;
    prev = &key;
  }
  if (errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("iterate ", EGR_MAP_IFSANDBOX));
  return out;
}

absl::Status IfSandboxTable::SetPod(uint32_t ifindex, const std::optional<std::array<uint8_t, 6>>& mac,
                                    const std::vector<net::IpAddr>& addrs) {
  EGR_RETURN_IF_ERROR(RemovePod(ifindex));
  if (addrs.empty()) return absl::OkStatus();
  // Addresses first: from the moment the pod entry exists, sources are checked.
  for (const auto& a : addrs) {
    egr_ifaddr_key k{.ifindex = ifindex};
    if (a.is_v4()) {
      k.addr[10] = k.addr[11] = 0xff;
      std::memcpy(&k.addr[12], a.bytes().data(), 4);
    } else {
      std::memcpy(k.addr, a.bytes().data(), 16);
    }
    egr_ifaddr_val v{};
    if (bpf_map_update_elem(addr_fd_.get(), &k, &v, BPF_ANY) != 0) {
      return ErrnoStatus(errno, absl::StrCat("add ", a.ToString(), " of interface ", ifindex, " to ", EGR_MAP_IFADDR));
    }
  }
  egr_ifpod_val pod{};
  if (mac) {
    std::memcpy(pod.mac, mac->data(), 6);
    pod.flags = EGR_IFPOD_MAC;
  }
  if (bpf_map_update_elem(pod_fd_.get(), &ifindex, &pod, BPF_ANY) != 0) {
    return ErrnoStatus(errno, absl::StrCat("update interface ", ifindex, " in ", EGR_MAP_IFPOD));
  }
  return absl::OkStatus();
}

absl::Status IfSandboxTable::RemovePod(uint32_t ifindex) {
  if (bpf_map_delete_elem(pod_fd_.get(), &ifindex) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("delete interface ", ifindex, " from ", EGR_MAP_IFPOD));
  }
  std::vector<egr_ifaddr_key> doomed;
  egr_ifaddr_key key{}, next{};
  egr_ifaddr_key* prev = nullptr;
  while (bpf_map_get_next_key(addr_fd_.get(), prev, &next) == 0) {
    if (next.ifindex == ifindex) doomed.push_back(next);
    key = next;
    prev = &key;
  }
  for (const auto& k : doomed) {
    if (bpf_map_delete_elem(addr_fd_.get(), &k) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, absl::StrCat("delete an address of interface ", ifindex, " from ", EGR_MAP_IFADDR));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> ReadTcStats(const std::string& pin_root) {
  UniqueFd fd;
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_TCSTATS, fd));
  const int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return ErrnoStatus(-ncpu, "count possible CPUs");
  std::vector<uint64_t> sums(EGR_TC_STAT_MAX), per(ncpu);
  for (uint32_t i = 0; i < EGR_TC_STAT_MAX; i++) {
    if (bpf_map_lookup_elem(fd.get(), &i, per.data()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("read counter ", i, " of ", EGR_MAP_TCSTATS));
    }
    for (uint64_t v : per) sums[i] += v;
  }
  return sums;
}

}  // namespace egressd::maps
