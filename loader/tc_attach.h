// The tc programs on sandboxes' host-side interfaces (issue 17): clsact
// ingress of the veth's node end (egr_tc_ingress: the pod's egress, judged)
// and its egress (egr_tc_egress: what goes into the pod, never refused; it
// records the flows a peer opened, bpf/lib/tc_flow.h).  libbpf 1.1's bpf_tc_*
// (netlink tc filters; no tcx on the oldest supported kernel).  The load pins
// the program under <pin_root>/progs so a registration can attach it later;
// one filter of egressd's own handle and priority per interface, replaced in
// place when a load brings new programs.  Callers hold the pin lock.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "userspace/common/node.h"

namespace egressd {

inline constexpr uint32_t kTcHandle = 0xe9d;  // egressd's filter on every interface
inline constexpr uint32_t kTcPriority = 1;    // before any other filter

std::string TcProgramPin(const Paths& paths);        // egr_tc_ingress
std::string TcEgressProgramPin(const Paths& paths);  // egr_tc_egress

// Pins the loaded tc programs (replacing older pins) and swaps them into
// every interface registered in egr_ifsbox_v1 (an interface that is gone is
// left: its entry goes with its sandbox).
absl::Status InstallTcProgram(const Paths& paths, int ingress_fd, int egress_fd);

// Both filters of an interface: ingress first (enforcement), then egress.
absl::Status AttachTcPrograms(const Paths& paths, uint32_t ifindex);
absl::Status DetachTcPrograms(uint32_t ifindex);

// Attaches (or replaces) egressd's filter on ifindex's clsact ingress.
absl::Status AttachTcIngress(const Paths& paths, uint32_t ifindex);
// Removes it; an interface or filter already gone is fine.
absl::Status DetachTcIngress(uint32_t ifindex);
// The same for egr_tc_egress on the clsact egress.
absl::Status AttachTcEgress(const Paths& paths, uint32_t ifindex);
absl::Status DetachTcEgress(uint32_t ifindex);

// Unload: every registered interface's filter and the program's pin.
absl::Status RemoveTcProgram(const Paths& paths);

}  // namespace egressd
