#!/usr/bin/env bash
# podman, as the image's test and docs/operations.md run it, with what a host
# like the CI's needs before Debian 12's crun (1.8) can start a container.
# Every argument is podman's; nothing on the machine changes.
#
#  1. Resource limits.  For a root caller, podman asks crun for
#     RLIMIT_NOFILE 1048576 and RLIMIT_NPROC 1048576 unless told otherwise,
#     and podman itself lowers its own RLIMIT_NPROC to 32768 (hard) at start.
#     Raising a hard limit needs CAP_SYS_RESOURCE: where the caller lacks it
#     (a container or a CI sandbox: hard nofile 20000 here), crun's
#     setrlimit fails with "setrlimit RLIMIT_NOFILE: Operation not
#     permitted" and no container starts.  So run/create get --ulimit at the
#     caller's hard limits (no higher than podman's own).
#  2. A hybrid cgroup host (v1 controllers, cgroup2 at /sys/fs/cgroup/unified)
#     whose cgroup2 holds a controller (hugetlb here): crun refuses it
#     outright ("cgroups in hybrid mode not supported, drop all controllers
#     from cgroupv2"), whatever the cgroup manager.  Rather than move a
#     controller on the host, podman runs in a private mount namespace whose
#     /sys/fs/cgroup holds the v1 hierarchies only (crun and podman see a
#     legacy host and make the container's cgroups there).  Not the cgroup2
#     view: crun's cgroup2 device filter is a BPF program, for which it raises
#     RLIMIT_MEMLOCK (CAP_SYS_RESOURCE again), and without cgroups podman
#     refuses --pid host, which the DaemonSet has.  The container's cgroup2
#     cgroup is then its caller's (crun moves nothing there).  A volume whose
#     source is /sys/fs/cgroup gets the host's real tree (bound aside first),
#     so the container sees the host's cgroup paths, cgroup2 included.
#  Usage: deploy/image/podman.sh run|create|exec|... ARGS
set -euo pipefail

hybrid_with_v2_controllers() {
  [[ $(stat -f -c %T /sys/fs/cgroup 2>/dev/null) == tmpfs ]] || return 1
  [[ $(stat -f -c %T /sys/fs/cgroup/unified 2>/dev/null) == cgroup2fs ]] || return 1
  [[ -n $(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null) ]]
}

aside=/run/egressd-podman/host-cgroup
if [[ ${EGRESSD_PODMAN_NS:-} != 1 ]] && hybrid_with_v2_controllers; then
  mkdir -p "$aside"
  EGRESSD_PODMAN_NS=1 exec unshare --mount --propagation private -- "$0" "$@"
fi

args=("$@")
if [[ ${EGRESSD_PODMAN_NS:-} == 1 ]]; then
  mountpoint -q "$aside" || mount --rbind /sys/fs/cgroup "$aside"
  mount -t tmpfs -o mode=0755 egressd-podman /sys/fs/cgroup
  for d in "$aside"/*; do
    [[ $(stat -f -c %T "$d") == cgroupfs ]] || continue
    mkdir "/sys/fs/cgroup/${d##*/}"
    mount --bind "$d" "/sys/fs/cgroup/${d##*/}"
  done
  for i in "${!args[@]}"; do
    case ${args[$i]} in
      /sys/fs/cgroup:*) args[$i]=$aside:${args[$i]#/sys/fs/cgroup:} ;;
      --volume=/sys/fs/cgroup:* | -v=/sys/fs/cgroup:*) args[$i]=--volume=$aside:${args[$i]#*=/sys/fs/cgroup:} ;;
    esac
  done
fi

case ${args[0]:-} in
  run | create)
    min() { if [[ $1 == unlimited ]] || (($1 > $2)); then echo "$2"; else echo "$1"; fi; }
    nofile=$(min "$(ulimit -Hn)" 1048576)
    nproc=$(min "$(ulimit -Hu)" 32768)
    extra=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
    args=("${args[0]}" "${extra[@]}" "${args[@]:1}")
    ;;
esac
exec podman "${args[@]}"
