#!/usr/bin/env bash
# CPU (user + system, the whole process tree) of `CTL --help` and
# `CTL run -- true` for each egressctl binary given (e.g. a dynamic and a
# static link), interleaved with `unshare --fork --pid --mount true` in the
# same rounds, on an egressd instance of its own (a scratch node netns, pin
# root and runtime dir, unloaded at exit).  Medians of N rounds, and each
# median's ratio to unshare's.
#   [N=21] [OUT=/tmp/egr-startup-cmp] bench/profile/startup_compare.sh [CTL...]
# Run as root.  No traffic: the command is `true`.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${N:-21}
out=${OUT:-/tmp/egr-startup-cmp}
ctls=("$@")
[ ${#ctls[@]} -gt 0 ] || ctls=("$PWD/${BUILD_DIR:-build}/tools/egressctl/egressctl")
mkdir -p "$out"
tag=egl-$$-$(od -An -N3 -tx1 /dev/urandom | tr -d ' ')
node=$tag-n
export EGRESSD_PIN_ROOT=/sys/fs/bpf/egr-cmp-$$ EGRESSD_RUNTIME_DIR=/run/egressd-cmp-$$
export EGRESSD_NODE_NETNS=/var/run/netns/$node
cleanup() {
  "${ctls[0]}" unload --force >/dev/null 2>&1 || true
  rm -rf "$EGRESSD_RUNTIME_DIR"
  ip netns del "$node" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$node"
nsenter --net="$EGRESSD_NODE_NETNS" "${ctls[0]}" load >/dev/null 2>&1

python3 - "$n" "${ctls[@]}" <<'PY' | tee "$out/startup-compare.json"
import json, resource, statistics, subprocess, sys, time
n, ctls = int(sys.argv[1]), sys.argv[2:]
cmds = [("unshare", ["unshare", "--fork", "--pid", "--mount", "true"])]
for i, c in enumerate(ctls):
    cmds.append((f"{i}:help", [c, "--help"]))
    cmds.append((f"{i}:run", [c, "run", "--egress", "192.0.2.10", "--", "true"]))
res = {name: {"cpu_ms": [], "user_ms": [], "sys_ms": [], "wall_ms": []} for name, _ in cmds}
for r in range(n):
    for k in range(len(cmds)):
        name, argv = cmds[(k + r) % len(cmds)]
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.monotonic() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        u, s = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
        for key, v in (("cpu_ms", u + s), ("user_ms", u), ("sys_ms", s), ("wall_ms", wall)):
            res[name][key].append(round(v * 1e3, 2))
base = statistics.median(res["unshare"]["cpu_ms"])
for name, v in res.items():
    for key in ("cpu", "user", "sys", "wall"):
        v[key + "_median_ms"] = statistics.median(v[key + "_ms"])
    v["cpu_ratio_to_unshare"] = round(v["cpu_median_ms"] / base, 2) if base else None
res["ctls"] = ctls
res["loadavg"] = open("/proc/loadavg").read().strip()
print(json.dumps(res))
for name, _ in cmds:
    v = res[name]
    print(f"{name:12} cpu {v['cpu_median_ms']:7.2f} ms (user {v['user_median_ms']:.2f} + sys {v['sys_median_ms']:.2f})"
          f"  x{v['cpu_ratio_to_unshare']} unshare  wall {v['wall_median_ms']:.2f} ms", file=sys.stderr)
PY
for i in $(seq 0 $((${#ctls[@]} - 1))); do echo "ctl $i: ${ctls[$i]}" >&2; done
