// What a sandbox sees of the node's filesystem: all of it read-only, apart
// from the directories it was given to write (its working directory first),
// and private tmpfs on /tmp, /run and /dev/shm. /proc is its own PID
// namespace's, with /proc/sys and the other kernel knobs under /proc
// read-only; /sys is read-only; the cgroup tree is only its own subtree;
// bpffs, egressd's pin root and runtime directory are empty.
//
// Read-only is a property of the sandbox's copies of the node's mounts, made
// in a mount namespace owned by the initial user namespace: the command
// (without CAP_SYS_ADMIN there) cannot remount them, and in a user namespace
// of its own the kernel locks what it copies (MNT_LOCK_READONLY).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace egressd::sandbox {

struct NodeView {
  std::string cgroup2_mount;              // where cgroup2 is mounted on the node
  std::vector<std::string> hide_dirs;     // bpffs, pin root, runtime dir: empty tmpfs over each
  std::vector<std::string> writable;      // canonical directories that stay writable
  // Canonical directories carried in read-only, even where a private tmpfs
  // (/tmp, /run, /dev/shm) would hide the node's (--readable: e.g. a build
  // tree under /tmp whose binaries the command runs).
  std::vector<std::string> readable;
  uid_t run_owner = 0;                    // owner of the private /run (the command's node uid)
  gid_t run_group = 0;
};

// A --workdir or --writable value as the sandbox will get it: an existing
// directory, canonical, and none of "/", /proc, /sys, /dev, or a directory
// that holds or lies inside one of `hidden` (which would show what is
// hidden). InvalidArgument naming `given` otherwise.
absl::StatusOr<std::string> CheckWritableDir(const std::string& given, const std::vector<std::string>& hidden);

// Sets the view up in the calling process's new, private mount namespace
// (needs real root). Any failure leaves the namespace half-made: the caller
// must not run the command.
absl::Status SetUpNodeView(const NodeView& view);

}  // namespace egressd::sandbox
