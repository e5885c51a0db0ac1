// Where a sandbox registered by interface (issue 17) is judged: the node end
// of its pod's veth (or a VM's tap), named directly or found from the pod's
// network namespace.  Bad input is InvalidArgument naming the flag/field and
// the value; a system failure is another code.
#pragma once

#include <cstdint>
#include <string>

#include <array>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/net/ip.h"

namespace egressd::net {

struct HostInterface {
  std::string name;
  uint32_t ifindex = 0;
  // Who the pod is, for anti-spoofing at the veth: its addresses (the node's
  // host routes through the interface: what the node routes back to it; with
  // none, the global addresses on the pod's end of the veth) and the MAC of
  // its end of the veth (a tap: none).  Never empty: an interface whose
  // pod's addresses cannot be found is refused (InvalidArgument).
  std::vector<IpAddr> pod_addrs;
  std::optional<std::array<uint8_t, 6>> pod_mac;
};

// `ifname` in the calling thread's netns (the node's), a veth or a tun/tap.
// `what` names the input in errors ("--interface", "field interface").
absl::StatusOr<HostInterface> ResolveHostInterface(const std::string& ifname, const std::string& what);

// The node end of the one veth in the network namespace at `netns_path`:
// the pod's veth's peer (IFLA_LINK), checked to be a veth of the calling
// thread's netns.  A namespace with no veth, or more than one, is bad input.
absl::StatusOr<HostInterface> HostInterfaceOfNetns(const std::string& netns_path, const std::string& what);

// Whether the calling thread's netns (the node's) has an interface of index
// `ifindex` and, when `name` is not empty, of that name (an index a vanished
// pod's veth had is never taken for it by a new interface of another name).
bool InterfaceExists(uint32_t ifindex, const std::string& name);

}  // namespace egressd::net
