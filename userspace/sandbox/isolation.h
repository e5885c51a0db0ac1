// How egressd starts a command in its sandbox (`egressctl run` today, the
// daemon later), so that code in the sandbox, even as root, cannot undo its
// own enforcement or reach into the node: it starts in its sandbox cgroup,
// in new cgroup, mount and PID namespaces where the cgroup tree is only its
// own subtree, other processes are invisible, and the node's filesystem is
// read-only apart from its working directory (node_view.h); the
// capabilities that could reach the node's BPF or network configuration are
// gone from the bounding set, and no_new_privs is set.
//
// Who the command is on the node (Identity):
// - kNamespaceRoot (the default): root of a user namespace of its own whose
//   uid and gid 0 are nobody (65534) on the node. Its capabilities are over
//   that namespace only: none over the node's files, sysctls, or the
//   network namespace it shares with the node, where socket(SOCK_RAW)
//   fails with EPERM.
// - kUser (--user): that unprivileged user of the node, no capabilities.
// - kHostRoot (--host-root): uid 0 of the node with what the bounding set
//   leaves (CAP_NET_RAW included: raw sockets are judged by the skb
//   backstop): the hostile client of egressd's datapath tests.
#pragma once

#include <signal.h>

#include <functional>
#include <string>
#include <sys/types.h>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/sandbox/node_view.h"

namespace egressd::sandbox {

enum class Identity { kNamespaceRoot, kUser, kHostRoot };

// The node uid and gid that the default sandbox's root is (nobody).
inline constexpr uid_t kNamespaceRootUid = 65534;
inline constexpr gid_t kNamespaceRootGid = 65534;

struct IsolationSpec {
  std::string cgroup_dir;                 // the sandbox cgroup (absolute)
  NodeView view;                          // cgroup2 mount, hidden and writable dirs
  Identity identity = Identity::kNamespaceRoot;
  uid_t uid = 0;                          // kUser: drop to this uid and gid
  gid_t gid = 0;
  std::string start_dir;                  // the command's working directory
  std::vector<std::string> argv;          // the command
  // The bpf LSM is not in force on this node: the command runs under the
  // seccomp filter and abstract unix scope of no_lsm_fallback.h, and without
  // CAP_NET_RAW unless kHostRoot (whose raw IP sockets the skb backstop
  // judges; its packet sockets the filter refuses).
  bool no_lsm_fallback = false;
  // Called in the caller's process once the sandbox's PID namespace exists
  // and before anything runs in it, with its nsfs device and inode (the
  // child's own stat of /proc/self/ns/pid_for_children: a pid would not
  // name it where the caller's procfs is another namespace's): the audit
  // trail records the namespace.  Not called when the child could not say.
  std::function<void(uint64_t dev, uint64_t inode)> on_pid_namespace;
};

// Keeps SIGINT, SIGTERM, SIGHUP and SIGQUIT pending from before a sandbox is
// registered until RunIsolated forwards them to the command: a signal can
// then never end egressctl between registration and the command's start,
// which would leave a registered cgroup behind.  Restores the mask when
// destroyed (a signal still pending then acts as it would have).
class DeferSignals {
 public:
  DeferSignals();
  ~DeferSignals();
  DeferSignals(const DeferSignals&) = delete;
  DeferSignals& operator=(const DeferSignals&) = delete;

 private:
  sigset_t old_;
};

// Runs the command isolated and returns its exit status (128+signal when it
// was killed by a signal, as shells report it).
absl::StatusOr<int> RunIsolated(const IsolationSpec& spec);

// Capabilities removed from the command's bounding set (and, under the
// fallback, CAP_NET_RAW besides, but for kHostRoot).
const std::vector<int>& DroppedCapabilities();

}  // namespace egressd::sandbox
