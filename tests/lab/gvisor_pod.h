// A real gVisor pod for the lab (issue 17, real runtimes): Debian's runsc
// (--platform=ptrace, no KVM needed) runs one command in an OCI bundle whose
// network namespace is a lab pod's, with --network=sandbox: gVisor's own
// network stack takes over the pod's interface (runsc copies its addresses
// and routes into the sandbox and removes them from the kernel's side) and
// sends raw frames on it from a packet socket.  The workload's sockets are
// gVisor's, so no cgroup socket hook of the node ever sees them; only the
// pod's veth carries its traffic.
//
// The bundle's root is read-only: /usr and /etc of the host (merged /usr:
// bin, lib, lib64, sbin link into it) plus the directories the caller names
// (the build tree holding egressd-probe), bound read-only at their own paths,
// and the files it names over paths inside (a resolv.conf: the host's names
// a resolver outside the lab, which no test may send to).
// The process runs as uid 0 with only CAP_NET_RAW, as the lab's hostile
// sandboxes do.  Everything (the container, its runsc state, the bundle) is
// removed when the call returns, whatever happened.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lab.h"

namespace egressd::lab {

struct GvisorSpec {
  std::string netns;                  // the pod's, /var/run/netns/NAME
  std::string cgroup;                 // the runtime's (and so the sandbox's) cgroup, or empty
  std::vector<std::string> argv;      // absolute argv[0]
  std::vector<std::string> readable;  // host dirs bound read-only at the same path
  // Host files bound read-only over a path inside the bundle (a pod's own
  // resolv.conf, as a kubelet mounts one): {host file, path inside}.
  std::vector<std::pair<std::string, std::string>> files;
  std::chrono::milliseconds timeout{120000};
};

// Why a gVisor pod cannot run here, or OK: runsc missing (scripts/install-deps.sh
// installs it), or the vmtests guest (no runsc packed; gVisor's ptrace platform
// under TCG would trace every syscall of the sandbox in software emulation).
absl::Status GvisorUsable();

// Runs spec.argv in a fresh gVisor sandbox in spec.netns and returns its exit
// status and output (stdout: the workload's; stderr: runsc's and the
// workload's).  An error only when the sandbox could not be prepared.
absl::StatusOr<RunResult> RunInGvisor(const GvisorSpec& spec);

}  // namespace egressd::lab
