// What `egressctl run` puts in place of the BPF LSM hooks (bpf/lib/lsm_*.h)
// on a node where they are not in force (no `bpf` in the kernel's LSM list,
// or a kernel that refuses LSM programs, as under lockdown): the command's
// own process, just before exec, installs
//
// - a seccomp filter: socket() and socketpair() of a family other than
//   AF_INET, AF_INET6, AF_UNIX and AF_NETLINK fail with EPERM (an allowlist:
//   every other value of the argument, future families included), and so
//   does socket(AF_INET, SOCK_PACKET), which the kernel turns into a packet
//   socket; io_uring_setup/enter/register fail with EPERM, because
//   IORING_OP_SOCKET creates sockets without the socket syscall. Another
//   architecture's syscalls (i386 int 0x80, whose socketcall hides the
//   family in memory; x32) kill the process;
// - where the kernel has Landlock ABI 6 or later, the abstract unix socket
//   scope: an abstract socket is reachable only when the sandbox created it,
//   as the LSM's unix hooks allow.
//
// Unlike the LSM, seccomp cannot tell the netns a socket is made in nor
// refuse a send on one socket family only, so a pod-style receive-only
// packet socket is not offered: AF_PACKET is refused everywhere. A socket
// the command inherits or receives over SCM_RIGHTS is not judged.
#pragma once

#include "absl/status/status.h"

namespace egressd::sandbox {

// Installs the seccomp filter above on the calling thread (and what it
// execs). Needs no_new_privs (or CAP_SYS_ADMIN).
absl::Status InstallSocketFamilyFilter();

// Whether this kernel offers Landlock's abstract unix socket scope.
bool AbstractUnixScopeAvailable();

// Restricts the caller to abstract unix sockets of its own Landlock domain
// (what it and its descendants create from now on). Needs no_new_privs.
absl::Status ScopeAbstractUnixSockets();

}  // namespace egressd::sandbox
