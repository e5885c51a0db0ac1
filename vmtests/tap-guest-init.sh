#!/bin/sh
# /init of the guest behind a pod's tap (tests/priv/guest_tap_test.cc, packed
# by vmtests/tap-guest.sh): busybox sh as pid 1.  Loads virtio_net, gives the
# NIC (whose MAC qemu set to the pod veth's) the pod's addresses and its
# default routes to the node, says READY on the console, then runs the
# commands the test writes to the console, one a line ("ID COMMAND..."), and
# prints each command's output and status between markers:
#   MARK OUT ID LINE      one per line of output (stdout and stderr)
#   MARK END ID rc=N
# "off" (or the end of the input) powers the guest off.  Every marker starts
# with MARK, a nonce the test puts on the kernel command line, so nothing the
# guest's network brings back can forge one.  The kernel passes the command
# line's NAME=VALUE words it does not know to init as its environment:
# EGR_MARK, EGR_IP4, EGR_GW4, EGR_IP6, EGR_GW6.
export PATH=/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
# Only emergencies on the console: a kernel line would split a marker line.
echo 1 > /proc/sys/kernel/printk

fail() {
  echo "$EGR_MARK FAILED $*"
  poweroff -f
}
[ -n "${EGR_MARK:-}" ] || { echo "tap-guest: no EGR_MARK on the command line"; poweroff -f; }

# The pod's addresses are its own: no duplicate address detection (the pod's
# veth in the pod namespace, whose frames the tap carries, holds them too).
sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0
rel=$(uname -r)
while read -r m opts; do
  # shellcheck disable=SC2086  # module options are words
  insmod "/lib/modules/$rel/$m" $opts || fail "insmod $m"
done < /modules.order
[ -e /sys/class/net/eth0 ] || fail "no eth0 after loading virtio_net"

ip link set lo up || fail "lo up"
ip link set eth0 up || fail "eth0 up"
ip addr add "$EGR_IP4/32" dev eth0 || fail "address $EGR_IP4"
ip route add "$EGR_GW4" dev eth0 scope link || fail "route to $EGR_GW4"
ip route add default via "$EGR_GW4" dev eth0 || fail "default via $EGR_GW4"
ip -6 addr add "$EGR_IP6/128" dev eth0 || fail "address $EGR_IP6"
ip -6 route add "$EGR_GW6" dev eth0 || fail "route to $EGR_GW6"
ip -6 route add default via "$EGR_GW6" dev eth0 || fail "default via $EGR_GW6"

# The test's commands come back otherwise (the tty echoes them).
stty -echo 2>/dev/null
echo "$EGR_MARK READY kernel=$rel mac=$(cat /sys/class/net/eth0/address)"
while read -r id cmd; do
  [ "$id" = off ] && break
  [ -n "$id" ] || continue
  sh -c "$cmd" > /tmp/out 2>&1
  rc=$?
  while IFS= read -r line; do echo "$EGR_MARK OUT $id $line"; done < /tmp/out
  echo "$EGR_MARK END $id rc=$rc"
done
echo "$EGR_MARK OFF"
poweroff -f
