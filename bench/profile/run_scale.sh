#!/usr/bin/env bash
# Does `egressctl run -- true` cost more on a node with many sandboxes
# registered?  Two egressd instances of their own (scratch node netns, pin
# roots, runtime dirs, a cgroup tree; all removed at exit): `empty`, and
# `full` with N sandboxes added as the bench's sandbox axis adds them
# (`egressctl sandbox add`, the axis policy of 100 CIDRs + 50 names, one
# cgroup each).  Then R rounds, the order rotated each round, of
#   empty        run on the empty instance
#   full         run on the full one
#   full-nospool run on the full one with its unread audit spool moved aside
#                (no daemon ingests it here: every `sandbox add` and `run`
#                leaves files in <runtime dir>/audit/pending)
# with `run --egress 192.0.2.10 -- true`, or with the axis policy itself
# (POLICY=axis: the policy every full sandbox shares).  Prints each one's
# median wall ms and samples, and the load average.
#   [N=1000] [R=11] [POLICY=egress|axis] bench/profile/run_scale.sh
# Run as root.  No traffic: the command is `true` (its DNS proxy's upstream,
# 192.0.2.10, is never asked).
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${N:-1000}
rounds=${R:-11}
policy=${POLICY:-egress}
ctl=$PWD/${BUILD_DIR:-build}/tools/egressctl/egressctl
tag=egl-$$-$(od -An -N3 -tx1 /dev/urandom | tr -d ' ')
cgroot=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)/$tag
work=$(mktemp -d /tmp/egr-run-scale-XXXXXX)
# This host cannot load the bpf LSM: the test suite's opt-out (see tests/priv/egressd_env).
export EGRESSD_ACCEPT_UNCONTAINED_PACKET_SOCKETS=1
inst() {  # the environment of instance $1 (empty|full)
  echo "EGRESSD_PIN_ROOT=/sys/fs/bpf/egr-rs-$1-$$ EGRESSD_RUNTIME_DIR=/run/egressd-rs-$1-$$ EGRESSD_NODE_NETNS=/var/run/netns/$tag-$1"
}
cleanup() {
  for x in empty full; do
    env $(inst $x) "$ctl" unload --force >/dev/null 2>&1 || true
    rm -rf "/run/egressd-rs-$x-$$"
    ip netns del "$tag-$x" 2>/dev/null || true
  done
  for cg in "$cgroot"/*/; do [ -d "$cg" ] && rmdir "$cg" 2>/dev/null; done
  rmdir "$cgroot" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$cgroot"
for x in empty full; do
  ip netns add "$tag-$x"
  env $(inst $x) nsenter --net="/var/run/netns/$tag-$x" "$ctl" load >/dev/null 2>&1
done
task=$work/axis.yaml
. bench/profile/axis_task.sh  # the script runs from the repository root
write_axis_task "$task"
t0=$(date +%s)
for i in $(seq 0 $((n - 1))); do
  mkdir -p "$cgroot/sb-$i"
  env $(inst full) nsenter --net="/var/run/netns/$tag-full" "$ctl" sandbox add --cgroup "$cgroot/sb-$i" \
    --policy "$task" --egress 192.0.2.10 >/dev/null 2>&1
done
echo "run_scale.sh: $n sandboxes added in $(($(date +%s) - t0)) s" >&2
run=(run --egress 192.0.2.10 -- true)
[ "$policy" = axis ] && run=(run --policy "$task" --egress 192.0.2.10 -- true)

python3 - "$rounds" "$ctl" "$tag" "$(inst empty)" "$(inst full)" "${run[@]}" <<'PY'
import json, os, statistics, subprocess, sys, time
rounds, ctl, tag, env_empty, env_full = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
run = sys.argv[6:]
envs = {x: dict(os.environ, **dict(kv.split("=", 1) for kv in e.split())) for x, e in (("empty", env_empty), ("full", env_full))}
spool = envs["full"]["EGRESSD_RUNTIME_DIR"] + "/audit"
os.makedirs(spool + "/pending", exist_ok=True)
os.makedirs(spool + "/pending.aside", exist_ok=True)
def once(which):
    inst = "empty" if which == "empty" else "full"
    if which == "full-nospool":  # an empty spool in place of the full one (two renames)
        os.rename(spool + "/pending", spool + "/pending.full"); os.rename(spool + "/pending.aside", spool + "/pending")
    t0 = time.monotonic()
    subprocess.run(["nsenter", f"--net=/var/run/netns/{tag}-{inst}", ctl] + run, env=envs[inst], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t = time.monotonic() - t0
    if which == "full-nospool":
        os.rename(spool + "/pending", spool + "/pending.aside"); os.rename(spool + "/pending.full", spool + "/pending")
    return t
kinds = ["empty", "full", "full-nospool"]
for k in kinds: once(k)  # warm-up: page cache, and a DNS port ledger made stale by the adds rebuilt once
res = {k: [] for k in kinds}
for i in range(rounds):
    for j in range(len(kinds)):
        k = kinds[(i + j) % len(kinds)]
        res[k].append(once(k))
out = {k: {"median_ms": round(statistics.median(v) * 1e3, 1), "samples_ms": [round(x * 1e3, 1) for x in v]} for k, v in res.items()}
out["registered_full"] = len([f for f in os.listdir(envs["full"]["EGRESSD_RUNTIME_DIR"] + "/sandboxes") if f.endswith(".json")])
out["spool_files_full"] = len(os.listdir(spool + "/pending"))
out["run"] = run
out["loadavg"] = open("/proc/loadavg").read().strip()
print(json.dumps(out, indent=1))
PY
