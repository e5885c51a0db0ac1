#!/bin/sh
# Runs inside the test VM (busybox sh), started by busybox init as its
# `sysinit` action (init reaps orphans for us).  Mounts what the tests need,
# loads the kernel modules packed by run.sh, prints the kernel probe, checks
# that the programs load (with the verifier's log if they do not), runs the
# test binaries and prints one result marker per binary and a final one.
# Never exits without powering off: the host reads the markers from the serial
# console; no final marker means the run failed.
set -u
# shellcheck source=/dev/null
. /vmtest/config   # MARK TESTS GTEST_FILTER SUITE_TIMEOUT CGROUP2_MOUNT EGR_TIME_SCALE

export PATH=/opt/egressd/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb GTEST_COLOR=no
export EGR_BIN_DIR=/opt/egressd/bin
# How much slower than a real machine this one is (1 under KVM, about 5 under
# TCG): for tests that assert timings.
export EGR_TIME_SCALE

off() { sync; poweroff -f; }
trap off EXIT

say() { echo "vmtest: $*"; }
fatal() { echo "$MARK DONE rc=99 reason=$*"; exit 1; }
# The host's boot watchdog (run.sh) stops at this line: the kernel is up and
# what follows is ours (insmod under TCG is quiet for a while).
say "init started"

mount -t proc -o nosuid,nodev,noexec proc /proc || fatal "mount /proc"
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys || fatal "mount /sys"
mount -t devtmpfs -o nosuid,mode=0755 devtmpfs /dev || fatal "mount /dev"
mkdir -p /dev/pts /dev/shm
mount -t devpts -o nosuid,noexec devpts /dev/pts
mount -t tmpfs -o nosuid,nodev tmpfs /dev/shm
mount -t tmpfs -o nosuid,nodev,mode=0755 tmpfs /run || fatal "mount /run"
mkdir -p /run/netns /run/lock
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /tmp || fatal "mount /tmp"
# cgroup2 where systemd puts it on a unified-hierarchy node (Debian 12,
# Kubernetes): /sys/fs/cgroup itself.  --cgroup-mount /sys/fs/cgroup/unified
# gives the hybrid layout instead (a tmpfs at /sys/fs/cgroup, cgroup2 below it).
case $CGROUP2_MOUNT in
  /sys/fs/cgroup) ;;
  /sys/fs/cgroup/*) mount -t tmpfs -o nosuid,nodev,noexec,mode=0755 tmpfs /sys/fs/cgroup || fatal "mount tmpfs on /sys/fs/cgroup" ;;
esac
mkdir -p "$CGROUP2_MOUNT"
mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate cgroup2 "$CGROUP2_MOUNT" || fatal "mount cgroup2 at $CGROUP2_MOUNT"
mount -t bpf -o mode=0700 bpf /sys/fs/bpf || fatal "mount bpffs"
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || true
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null || true
hostname egressd-vm
ip link set lo up || fatal "lo up"

rel=$(uname -r)
while read -r m opts; do
  [ -n "$m" ] || continue
  # shellcheck disable=SC2086  # module options are words
  out=$(insmod "/lib/modules/$rel/$m" $opts 2>&1) || case $out in
    *"File exists"*) ;;
    *) say "warning: insmod $m: $out" ;;
  esac
done < /vmtest/modules.order

# Kernel warnings and worse still reach the console; notices (links coming up)
# would only interleave with the tests' output.  The full dmesg is printed at
# the end of a failed run.
echo 5 > /proc/sys/kernel/printk

say "kernel $(uname -r) ($(cat /proc/version))"
say "cmdline $(cat /proc/cmdline)"
say "cpus $(nproc), $(grep MemTotal /proc/meminfo)"
say "modules loaded: $(cut -d' ' -f1 /proc/modules | tr '\n' ' ')"

echo "$MARK PROBE BEGIN"
egressctl probe
probe_rc=$?
echo "$MARK PROBE END rc=$probe_rc"

# The test binaries load egressd themselves; this load is only there to
# capture the verifier's log in the console when a program is rejected.
pins=/sys/fs/bpf/egr-vmtest-preflight
overall=0
if egressctl --pin-root "$pins" -v load; then
  echo "$MARK LOAD ok"
  # What each program became on this kernel (translated and JITed sizes).
  bpftool prog show | grep -A3 ' name egr_'
  egressctl --pin-root "$pins" unload --force
else
  overall=1
  echo "$MARK LOAD FAILED: verifier log (egressctl -vv load) follows"
  egressctl --pin-root "$pins" -vv load
  egressctl --pin-root "$pins" unload --force
  echo "$MARK LOAD LOG END"
fi

# The guest's CPU time from /proc/stat: "busy idle" in clock ticks, summed
# over its CPUs.  A binary's busy share says whether its time is emulated
# work or waiting (timeouts, sleeps): what overlapping the guest with other
# work can win (vmtests/run.sh --guests, .ci/run).
cpu_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8, $5 + $6; exit }' /proc/stat; }
for t in $TESTS; do
  say "running $t (filter: ${GTEST_FILTER:-*}, timeout ${SUITE_TIMEOUT}s)"
  start=$(date +%s)
  set -- $(cpu_ticks); busy0=$1 idle0=$2
  REQUIRE_BPF=1 EGR_REQUIRE_LSM=1 timeout -s KILL "$SUITE_TIMEOUT" "/opt/egressd/bin/$t" \
    "--gtest_filter=${GTEST_FILTER:-*}" --gtest_color=no --gtest_brief=0
  rc=$?
  end=$(date +%s)
  set -- $(cpu_ticks); busy=$(($1 - busy0)) all=$(($1 - busy0 + $2 - idle0))
  [ "$rc" -eq 0 ] || overall=1
  echo "$MARK RESULT $t rc=$rc secs=$((end - start)) cpu=$((all > 0 ? 100 * busy / all : 0))%"
done

# Anything the tests left behind is a finding too.
left=""
for f in /sys/fs/bpf/egr* /run/netns/egl-* "$CGROUP2_MOUNT"/egl-*; do
  [ -e "$f" ] && left="$left $f"
done
say "left behind after the tests (bpffs, netns, cgroups): ${left:-nothing}"
if [ "$overall" -ne 0 ]; then
  echo "$MARK DMESG BEGIN"; dmesg; echo "$MARK DMESG END"
fi
echo "$MARK DONE rc=$overall"
