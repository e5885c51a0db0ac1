// A Kubernetes pod's cgroup from its UID (issue 14): PUT /v1/sandboxes/{id}
// with "pod_uid" instead of "cgroup".  The pod-level cgroup is the sandbox:
// every container of the pod (and its pause/infra container) lives below it,
// whatever the runtime names their scopes.  The layouts are the kubelet's
// (facts from its cgroup managers, docs/api.md):
//
//   cgroupfs driver:  <root>/kubepods/pod<uid>                     guaranteed
//                     <root>/kubepods/{burstable,besteffort}/pod<uid>
//   systemd driver:   <root>/kubepods.slice/kubepods-pod<u_i_d>.slice
//                     <root>/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<u_i_d>.slice
//
// where <u_i_d> is the UID with '-' written '_' (systemd reads '-' in a
// slice name as nesting).  A root that is itself a slice (the kubelet's
// --cgroup-root=/kubelet.slice, as kind runs it) prefixes every slice name
// below it: kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod<u_i_d>.slice.
// Containers below the pod cgroup: containerd `cri-containerd-<id>.scope`,
// CRI-O `crio-<id>.scope` and `crio-conmon-<id>.scope` (systemd driver), a
// bare `<id>` directory (cgroupfs driver); they are judged by the pod's
// entry because egressd's lookup walks a socket's cgroup ancestors.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace egressd::daemon {

// InvalidArgument naming `uid` unless it is a pod UID: a UUID in its
// canonical lowercase 8-4-4-4-12 form, or 32 lowercase hex digits (the
// kubelet's UID of a static pod, a hash of its manifest).
absl::Status CheckPodUid(const std::string& uid);

// Every directory where the kubelet would put the pod `uid`'s cgroup under
// `root` (a cgroup v2 directory: the mount, or the kubelet's --cgroup-root),
// in both drivers' layouts and every QoS class.
std::vector<std::string> PodCgroupCandidates(const std::string& root, const std::string& uid);

// The pod's cgroup directory under any of `roots`: NotFound when none
// exists yet (the PUT is held until it appears), InvalidArgument naming the
// UID and every match when more than one does (two layouts or two QoS
// classes: egressd will not guess which is the pod), or when `uid` is
// malformed.
absl::StatusOr<std::string> FindPodCgroup(const std::vector<std::string>& roots, const std::string& uid);

}  // namespace egressd::daemon
