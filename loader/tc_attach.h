// The tc program on sandboxes' host-side interfaces (issue 17): clsact
// ingress of the veth's node end, the pod's egress; and egr_tc_egress on its
// clsact egress (towards the pod: DNS answers get the source the pod asked).  libbpf 1.1's bpf_tc_*
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

std::string TcProgramPin(const Paths& paths);
std::string TcEgressProgramPin(const Paths& paths);

// Pins the loaded tc program (replacing an older pin) and swaps it into every
// interface registered in egr_ifsbox_v1 (an interface that is gone is left:
// its entry goes with its sandbox).
absl::Status InstallTcProgram(const Paths& paths, int prog_fd);

// The same for the egress program (pinned at TcEgressProgramPin).
absl::Status InstallTcEgressProgram(const Paths& paths, int prog_fd);

// Attaches (or replaces) egressd's filter on ifindex's clsact ingress.
absl::Status AttachTcIngress(const Paths& paths, uint32_t ifindex);
// ... on its clsact egress: attached before the ingress (an answer to a
// steered query is restored from the first query on).
absl::Status AttachTcEgress(const Paths& paths, uint32_t ifindex);
// Remove them; an interface or filter already gone is fine.
absl::Status DetachTcIngress(uint32_t ifindex);
absl::Status DetachTcEgress(uint32_t ifindex);

// Unload: every registered interface's filters and the programs' pins.
absl::Status RemoveTcProgram(const Paths& paths);

}  // namespace egressd
