// How egressd starts a command in its sandbox (`egressctl run` today, the
// daemon later), so that code in the sandbox, even as root, cannot undo its
// own enforcement: it starts in its sandbox cgroup, in new cgroup, mount and
// PID namespaces where the cgroup tree is only its own subtree, bpffs and
// egressd's runtime directory are empty tmpfs, other processes are
// invisible, and the capabilities that could reach the node's BPF or network
// configuration are gone from the bounding set (CAP_NET_RAW stays: raw
// sockets are judged by the skb backstop).
#pragma once

#include <signal.h>

#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

#include "absl/status/statusor.h"

namespace egressd::sandbox {

struct IsolationSpec {
  std::string cgroup_dir;                 // the sandbox cgroup (absolute)
  std::string cgroup2_mount;              // where cgroup2 is mounted on the node
  std::vector<std::string> hide_dirs;     // bpffs, pin root, runtime dir: tmpfs over each
  std::optional<uid_t> uid;               // --user: drop to this uid (and its gid)
  std::optional<gid_t> gid;
  std::vector<std::string> argv;          // the command
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

// Capabilities removed from the command's bounding set.
const std::vector<int>& DroppedCapabilities();

}  // namespace egressd::sandbox
