#!/usr/bin/env bash
# Where one `egressctl sandbox add` of a 100k-CIDR policy spends its time (the
# entries axis's apply at 100k: compile + batch map updates).  An egressd
# instance of its own (a scratch node netns, pin root, runtime dir and cgroup,
# removed at exit), the scale test's declaration (bench/scale_inputs.h:
# /24, host, /64, v6 host in turn, plus the server's address), then:
#   1. REPS adds timed on the wall clock (each removed again), and one
#      `nft -f` of the same policy's `compile -o nft` rendering in a scratch
#      netns, interleaved;
#   2. one add under callgrind, with --collect-systime=nsec so the syscalls
#      (the batch map updates are kernel time) show up as time per function;
#   3. callgrind_annotate's inclusive and exclusive tops.
#   [N=100000] [REPS=3] [OUT=/tmp/egr-apply-prof] bench/profile/apply_100k.sh [CTL]
# Run as root; no traffic.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${N:-100000}
reps=${REPS:-3}
out=${OUT:-/tmp/egr-apply-prof}
ctl=${1:-$PWD/${BUILD_DIR:-build}/tools/egressctl/egressctl}
mkdir -p "$out"
tag=egp-$$-$(od -An -N3 -tx1 /dev/urandom | tr -d ' ')
node=$tag-n
pod=$tag-p
cg=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)/$tag
export EGRESSD_PIN_ROOT=/sys/fs/bpf/egr-apply-$$ EGRESSD_RUNTIME_DIR=/run/egressd-apply-$$
export EGRESSD_NODE_NETNS=/var/run/netns/$node
# This host cannot load the bpf LSM: the test suite's opt-out (see tests/priv/egressd_env).
export EGRESSD_ACCEPT_UNCONTAINED_PACKET_SOCKETS=1
cleanup() {
  "$ctl" sandbox remove --cgroup "$cg" >/dev/null 2>&1 || true
  "$ctl" unload --force >/dev/null 2>&1 || true
  rmdir "$cg" 2>/dev/null || true
  rm -rf "$EGRESSD_RUNTIME_DIR"
  ip netns del "$node" 2>/dev/null || true
  ip netns del "$pod" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$node"
ip netns add "$pod"
mkdir -p "$cg"
nsenter --net="$EGRESSD_NODE_NETNS" "$ctl" load >/dev/null
task=$out/task-$n.yaml
# scale_inputs.h's CidrText(i), i < n
python3 - "$n" > "$task" <<'PY'
import sys
n = int(sys.argv[1])
print("egress:\n  allow:")
for i in range(n):
    a, b, c = 11 + i // 65536, (i // 256) % 256, i % 256
    k = i % 4
    if k == 0: s = f"{a}.{b}.{c}.0/24"
    elif k == 1: s = f"{a}.{b}.{c}.7"
    elif k == 2: s = f"2001:db8:{i // 65536:x}:{i % 65536:x}::/64"
    else: s = f"2001:db8:{i // 65536:x}:{i % 65536:x}::1"
    print(f"    - {s}")
PY
# The per-sandbox caps (issue 14) default to 4096 v4 / 1024 v6 entries: a
# deployment that wants 100k raises them (up to the maps' capacities).
printf 'limits:\n  maxCidrEntriesPerSandbox: 1048576\n  maxCidr6EntriesPerSandbox: 262144\n' > "$out/config.yaml"
flags=(--policy "$task" --egress 192.0.2.10 --config "$out/config.yaml")
"$ctl" policy compile -o nft "${flags[@]}" > "$out/rules.nft"
for r in $(seq 1 "$reps"); do
  t0=$(date +%s.%N)
  ip netns exec "$pod" nft -f "$out/rules.nft"
  t1=$(date +%s.%N)
  "$ctl" sandbox add --cgroup "$cg" "${flags[@]}" >/dev/null
  t2=$(date +%s.%N)
  "$ctl" sandbox remove --cgroup "$cg" >/dev/null
  ip netns exec "$pod" nft delete table inet egressd_sandbox
  echo "rep $r: nft -f $(echo "$t1 - $t0" | bc) s, sandbox add $(echo "$t2 - $t1" | bc) s" | tee -a "$out/wall.txt"
done
valgrind --tool=callgrind --collect-systime=nsec --callgrind-out-file="$out/callgrind.out" \
  "$ctl" sandbox add --cgroup "$cg" "${flags[@]}" >/dev/null 2>"$out/valgrind.log"
"$ctl" sandbox remove --cgroup "$cg" >/dev/null
# (head closes the pipe early: not a failure)
{ callgrind_annotate --inclusive=yes "$out/callgrind.out" 2>/dev/null || true; } | head -60 > "$out/inclusive.txt" || true
{ callgrind_annotate "$out/callgrind.out" 2>/dev/null || true; } | head -45 > "$out/exclusive.txt" || true
{ callgrind_annotate --inclusive=yes --sort=sysTime "$out/callgrind.out" 2>/dev/null || true; } | head -60 > "$out/systime.txt" || true
grep -E "^(summary|totals):" "$out/callgrind.out" | tee "$out/totals.txt"
echo "apply_100k.sh: $out/{wall,inclusive,exclusive,systime}.txt, callgrind.out" >&2
