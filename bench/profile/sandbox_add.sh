#!/usr/bin/env bash
# What one `egressctl sandbox add` costs as the number of registered sandboxes
# grows: an egressd instance of its own (a scratch node netns, pin root,
# runtime dir and cgroup tree, all removed at exit), the sandbox axis's shape
# of policy (100 CIDRs + 50 names, every sandbox sharing it), then at each
# stage N:
#   1. the median wall time of R adds of one more sandbox (each removed again,
#      so the population stays N), for every binary given, interleaved;
#   2. callgrind's instruction count of one such add, for every binary.
#   [STAGES="1 100 500"] [REPS=7] [OUT=/tmp/egr-add-prof] bench/profile/sandbox_add.sh [CTL...]
# (CTL defaults to build/tools/egressctl/egressctl.)
# The population is registered with the first CTL.  Binaries built from
# different commits can be compared because the records and maps are the
# same format.  Run as root; no traffic.
set -euo pipefail
cd "$(dirname "$0")/../.."
stages=${STAGES:-"1 100 500"}
reps=${REPS:-7}
out=${OUT:-/tmp/egr-add-prof}
ctls=("$@")
[ ${#ctls[@]} -gt 0 ] || ctls=("$PWD/${BUILD_DIR:-build}/tools/egressctl/egressctl")
mkdir -p "$out"
tag=egl-$$-$(od -An -N3 -tx1 /dev/urandom | tr -d ' ')
node=$tag-n
cgroot=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)/$tag
export EGRESSD_PIN_ROOT=/sys/fs/bpf/egr-add-$$ EGRESSD_RUNTIME_DIR=/run/egressd-add-$$
export EGRESSD_NODE_NETNS=/var/run/netns/$node
# This host cannot load the bpf LSM: the test suite's opt-out (see tests/priv/egressd_env).
export EGRESSD_ACCEPT_UNCONTAINED_PACKET_SOCKETS=1
cleanup() {
  "${ctls[0]}" unload --force >/dev/null 2>&1 || true
  for cg in "$cgroot"/*/; do [ -d "$cg" ] && rmdir "$cg" 2>/dev/null; done
  rmdir "$cgroot" 2>/dev/null || true
  rm -rf "$EGRESSD_RUNTIME_DIR"
  ip netns del "$node" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$node"
mkdir -p "$cgroot"
nsenter --net="$EGRESSD_NODE_NETNS" "${ctls[0]}" load >/dev/null
task=$out/axis.yaml
. bench/profile/axis_task.sh  # the script runs from the repository root
write_axis_task "$task"
flags=(--policy "$task" --egress 192.0.2.10)

python3 - "$stages" "$reps" "$out" "$cgroot" "$task" "${ctls[@]}" <<'PY' | tee "$out/sandbox-add.json"
import json, os, statistics, subprocess, sys, time
stages, reps, out, cgroot, task = [int(s) for s in sys.argv[1].split()], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
ctls = sys.argv[6:]
flags = ["--policy", task, "--egress", "192.0.2.10"]

def add(ctl, cg, prefix=()):
    subprocess.run(list(prefix) + [ctl, "sandbox", "add", "--cgroup", cg] + flags, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

def remove(ctl, cg):
    subprocess.run([ctl, "sandbox", "remove", "--cgroup", cg], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

have, res = 0, {"ctls": ctls, "stages": []}
probe = os.path.join(cgroot, "probe")
os.makedirs(probe, exist_ok=True)
for n in stages:
    while have < n:
        cg = os.path.join(cgroot, f"sb-{have}")
        os.makedirs(cg, exist_ok=True)
        add(ctls[0], cg)
        have += 1
    stage = {"registered": n, "binaries": []}
    times = {c: [] for c in ctls}
    for r in range(reps):
        for k in range(len(ctls)):
            c = ctls[(k + r) % len(ctls)]
            t0 = time.monotonic()
            add(c, probe)
            times[c].append(time.monotonic() - t0)
            remove(ctls[0], probe)
    for i, c in enumerate(ctls):
        cg_out = os.path.join(out, f"callgrind-{n}-{i}.out")
        add(c, probe, ["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg_out}"])
        remove(ctls[0], probe)
        ir = None
        for line in open(cg_out):
            if line.startswith("summary:") or line.startswith("totals:"):
                ir = int(line.split()[1])
        stage["binaries"].append({"ctl": c, "wall_ms": [round(t * 1e3, 2) for t in times[c]],
                                  "wall_median_ms": round(statistics.median(times[c]) * 1e3, 2),
                                  "callgrind_ir": ir})
    stage["loadavg"] = open("/proc/loadavg").read().strip()
    res["stages"].append(stage)
    print(json.dumps(stage), file=sys.stderr)
os.rmdir(probe)
print(json.dumps(res, indent=1))
PY
for i in $(seq 0 $((${#ctls[@]} - 1))); do echo "ctl $i: ${ctls[$i]}" >&2; done
echo "sandbox_add.sh: results in $out" >&2
