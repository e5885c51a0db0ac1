// egr_ifsbox_v1: which host-side interfaces carry a sandbox's traffic, judged
// there by the tc program (bpf/lib/tc_veth.h).  The value is the sandbox's
// egr_cgroups_v1 value, so both hooks judge by one policy.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "maps/egressd_abi.h"
#include "userspace/common/unique_fd.h"
#include "userspace/net/ip.h"

namespace egressd::maps {

// The sandbox id of a sandbox registered by interface alone (no cgroup,
// issue 17): bit 63 set, the host-side ifindex in the low 32 bits.  It keys
// what a cgroup id keys for other sandboxes (its egr_cgroups_v1 entry, which
// holds its policy reference and which no cgroup hook ever looks up; its
// record <id>.json; its DNS endpoint; its learned names; its audit records).
// A kernel cgroup id is a kernfs node id, (generation << 32) | inode number,
// whose generation counts wraps of a 31-bit inode allocator from 0: it never
// reaches bit 63, so the two id spaces never meet.  Stable across restarts
// (the record is named by it; an interface keeps its ifindex while it lives)
// and the same for a registration of the same interface again (a flip).
inline constexpr uint64_t kInterfaceSandboxBit = uint64_t{1} << 63;
constexpr uint64_t InterfaceSandboxId(uint32_t ifindex) { return kInterfaceSandboxBit | ifindex; }
constexpr bool IsInterfaceSandboxId(uint64_t id) { return (id & kInterfaceSandboxBit) != 0; }
constexpr uint32_t IfindexOfInterfaceSandbox(uint64_t id) { return static_cast<uint32_t>(id & 0xffffffffu); }
static_assert(IsInterfaceSandboxId(InterfaceSandboxId(1)) && !IsInterfaceSandboxId(uint64_t{0x7fffffff} << 32));

struct InterfaceEntry {
  uint32_t ifindex;
  egr_cgroup_val value;
};

class IfSandboxTable {
 public:
  static absl::StatusOr<IfSandboxTable> Open(const std::string& pin_root);

  absl::Status Set(uint32_t ifindex, const egr_cgroup_val& value);
  absl::StatusOr<std::optional<egr_cgroup_val>> Get(uint32_t ifindex) const;
  absl::Status Remove(uint32_t ifindex);  // absent is fine
  absl::StatusOr<std::vector<InterfaceEntry>> List() const;

  // The pod's own sources (egr_ifpod_v1, egr_ifaddr_v1), replacing what was
  // there; no addresses: the interface's sources are not checked.
  absl::Status SetPod(uint32_t ifindex, const std::optional<std::array<uint8_t, 6>>& mac,
                      const std::vector<net::IpAddr>& addrs);
  absl::Status RemovePod(uint32_t ifindex);
  // The interface's DNS steering notes (egr_tcdns_v1): a later pod on a
  // reused ifindex starts with none (a stale note matches nothing anyway:
  // it names its sandbox and pod).
  absl::Status RemoveDnsNotes(uint32_t ifindex);

 private:
  UniqueFd fd_, pod_fd_, addr_fd_, dns_fd_;
};

// The tc program's counters (egr_tcstats_v2), summed over CPUs.
absl::StatusOr<std::vector<uint64_t>> ReadTcStats(const std::string& pin_root);

}  // namespace egressd::maps
