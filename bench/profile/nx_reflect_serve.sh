#!/usr/bin/env bash
# A stand-in for `egressctl dns serve` in the DNS speed rows' denied names:
# bench/profile/nx_reflect.bpf.c on the tc ingress of every pod-facing veth
# in the node's netns, answering NXDOMAIN in the kernel to every query for
# the benchmark sandbox's DNS endpoint (the floor of a kernel answer at the
# hop; notes section 10). Only the denied rows make sense with it:
#   NAMES=denied bench/profile/dns_speed_ab.sh OUT N \
#     egressd=build/tools/egressctl/egressctl reflect=bench/profile/nx_reflect_serve.sh
# Called as `nx_reflect_serve.sh dns serve --upstream-dns ADDR` in the node's
# netns with the instance's EGRESSD_RUNTIME_DIR, as bench/dns_rows.cc starts
# serve; prints "ready:" once attached and detaches on SIGTERM or SIGINT.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
ep=$("$here/bench/profile/bench_dns_endpoint.sh" nx_reflect_serve.sh "$@")
read -r addr port _ <<<"$ep"
IFS=. read -r a b c d <<<"$addr"
obj=$(mktemp /tmp/egr-nx-reflect-XXXXXX.o)
clang -g -O2 -target bpf -D__TARGET_ARCH_x86 -Wall -Werror -I"$here/bpf/vmlinux" \
  -DENDPOINT_ADDR=$(((a << 24) | (b << 16) | (c << 8) | d))u -DENDPOINT_PORT="$port" \
  -c "$here/bench/profile/nx_reflect.bpf.c" -o "$obj"

# The pod-facing veths: the node's interfaces holding the endpoint's address.
mapfile -t devs < <(ip -o -4 addr show | awk -v a="$addr" '$4 ~ "^"a"/" {print $2}' | sed 's/@.*//')
((${#devs[@]})) || { echo "nx_reflect_serve.sh: no interface holds $addr in this netns" >&2; exit 1; }
made_qdisc=() attached=() sleeper=
cleanup() {
  local dev
  [[ -n $sleeper ]] && kill "$sleeper" 2>/dev/null
  for dev in "${attached[@]}"; do tc filter del dev "$dev" ingress pref 1 2>/dev/null || true; done
  for dev in "${made_qdisc[@]}"; do tc qdisc del dev "$dev" clsact 2>/dev/null || true; done
  rm -f "$obj"
}
trap cleanup EXIT
trap 'exit 0' TERM INT
for dev in "${devs[@]}"; do
  if ! tc qdisc show dev "$dev" | grep -q clsact; then
    tc qdisc add dev "$dev" clsact
    made_qdisc+=("$dev")
  fi
  # pref 1: before any filter egressd itself has on the device.
  tc filter add dev "$dev" ingress pref 1 bpf direct-action obj "$obj" sec tc
  attached+=("$dev")
done
echo "ready: answering NXDOMAIN in the kernel to $addr:$port on ${devs[*]}"
sleep infinity &
sleeper=$!
wait "$sleeper"
