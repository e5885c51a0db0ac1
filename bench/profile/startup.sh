#!/usr/bin/env bash
# Where `egressctl run -- true` spends its time: an egressd instance of its own
# (a scratch node netns, pin root and runtime dir, unloaded at exit), then
#   1. wall and CPU (user and system, the whole process tree) of N runs,
#      interleaved with `unshare --fork --pid --mount true`, `true` (the
#      floor of any exec) and `egressctl --help` (the floor of loading
#      egressctl: its shared libraries and static initialisers);
#   2. strace -f -c (syscall counts and time) and strace -f -T (the slowest
#      calls, in $OUT/strace-T.txt);
#   3. callgrind of egressctl's own user space (callgrind_annotate, top 40).
#   bench/profile/startup.sh [N=21] [OUT=/tmp/egr-startup-prof]
# Run as root.  No traffic: the command is `true`.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-21}
out=${2:-/tmp/egr-startup-prof}
mkdir -p "$out"
ctl=$PWD/${BUILD_DIR:-build}/tools/egressctl/egressctl
tag=egl-$$-$(od -An -N3 -tx1 /dev/urandom | tr -d ' ')
node=$tag-n
export EGRESSD_PIN_ROOT=/sys/fs/bpf/egr-prof-$$ EGRESSD_RUNTIME_DIR=/run/egressd-prof-$$
export EGRESSD_NODE_NETNS=/var/run/netns/$node
cleanup() {
  "$ctl" unload --force >/dev/null 2>&1 || true
  rm -rf "$EGRESSD_RUNTIME_DIR"
  ip netns del "$node" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$node"
nsenter --net="$EGRESSD_NODE_NETNS" "$ctl" load >/dev/null
run=("$ctl" run --egress 192.0.2.10 -- true)

# 1. wall and CPU per run (RUSAGE_CHILDREN: every process of the run).
python3 - "$n" "${run[@]}" <<'PY' | tee "$out/times.json"
import json, resource, statistics, subprocess, sys, time
n, run = int(sys.argv[1]), sys.argv[2:]
cmds = [("egressctl_run", run), ("unshare", ["unshare", "--fork", "--pid", "--mount", "true"]),
        ("true", ["true"]), ("egressctl_help", [run[0], "--help"])]
res = {name: {"wall_ms": [], "cpu_ms": [], "user_ms": [], "sys_ms": []} for name, _ in cmds}
for i in range(n):
    for k in range(len(cmds)):
        name, argv = cmds[(k + i) % len(cmds)]
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.monotonic() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        res[name]["wall_ms"].append(round(wall * 1e3, 2))
        res[name]["cpu_ms"].append(round(cpu * 1e3, 2))
        res[name]["user_ms"].append(round((r1.ru_utime - r0.ru_utime) * 1e3, 2))
        res[name]["sys_ms"].append(round((r1.ru_stime - r0.ru_stime) * 1e3, 2))
for v in res.values():
    for key in ("wall", "cpu", "user", "sys"):
        v[key + "_median_ms"] = statistics.median(v[key + "_ms"])
res["loadavg"] = open("/proc/loadavg").read().strip()
print(json.dumps(res))
PY

# 2. syscalls.
strace -f -c -o "$out/strace-c.txt" "${run[@]}" 2>/dev/null
strace -f -T -tt -o "$out/strace-T.raw" "${run[@]}" 2>/dev/null
# The slowest calls: "<...>" durations at the end of each line.
awk 'match($0, /<[0-9.]+>$/) { d = substr($0, RSTART + 1, RLENGTH - 2); print d "\t" $0 }' "$out/strace-T.raw" \
  | sort -rn | head -40 > "$out/strace-T.txt" || true

# 3. egressctl's user space (the parent; the sandboxed child is `true`).
# Under valgrind the sandboxed child fails (exit 125: valgrind 3.19 does not
# know open_tree, syscall 428, which the child's mount setup calls); the
# parent's start-up and its work up to the fork are what this measures.
valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out" "${run[@]}" 2>"$out/callgrind.log" || true
callgrind_annotate --inclusive=yes "$out/callgrind.out" > "$out/callgrind-inclusive.txt" 2>/dev/null || true
callgrind_annotate "$out/callgrind.out" > "$out/callgrind-self.txt" 2>/dev/null || true
# 4. the whole tree, kernel included: perf samples of 20 runs, by shared object and symbol.
printf '%q ' "${run[@]}" > "$out/loop.sh"
sed -i 's/^/for i in $(seq 20); do /; s/$/ 2>\/dev\/null; done/' "$out/loop.sh"
perf record -q -g -e cpu-clock -o "$out/perf.data" -- sh "$out/loop.sh"
perf report -i "$out/perf.data" --stdio --no-children --sort dso 2>/dev/null | grep -E '^ +[0-9]' > "$out/perf-dso.txt" || true
perf report -i "$out/perf.data" --stdio --children --sort sym -g none 2>/dev/null | grep -E '^ +[0-9]' | head -80 \
  > "$out/perf-children.txt" || true
echo "startup.sh: results in $out" >&2
