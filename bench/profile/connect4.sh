#!/usr/bin/env bash
# Prices the pieces of egr_connect4 one by one (kernel.bpf_stats_enabled):
# bench/profile/connect_variants.bpf.c's programs, all attached (multi) to one
# scratch cgroup at depth DEPTH, while a process in that cgroup connects N
# times to a listener on 127.0.0.1 in a network namespace of its own (nothing
# leaves it).  Prints one JSON object: ns per run of each variant.
#   bench/profile/connect4.sh [N=20000] [DEPTH=2] [LPM_ENTRIES=100000]
# PERF=FILE records the loop with `perf record -g -e cpu-clock` into FILE (the
# kernel's side of each connect, helpers and allocator included);
# PROGS="v_empty v_storage_create" attaches only those variants.
# Run as root.  Everything it makes (pins, cgroups) is removed at exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-20000}
depth=${2:-2}
lpm_entries=${3:-100000}
tag=egr-prof-$$
tmp=$(mktemp -d /tmp/$tag-XXXXXX)
pins=/sys/fs/bpf/$tag
cgroot=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
[[ -n $cgroot ]] || { echo "connect4.sh: no cgroup2 mount" >&2; exit 1; }
cg=$cgroot/$tag
stats_before=$(cat /proc/sys/kernel/bpf_stats_enabled)
read -r -a progs <<< "${PROGS:-v_empty v_netns_cookie v_own_cgroup v_ancestor_ids v_walk v_lpm v_storage_lookup v_storage_create v_cookie_hash}"

cleanup() {
  for p in "${progs[@]}"; do
    bpftool cgroup detach "$leaf" connect4 pinned "$pins/$p" 2>/dev/null || true
  done
  rm -rf "$pins" "$pins-maps" "$tmp"
  # Deepest first.
  find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  echo "$stats_before" > /proc/sys/kernel/bpf_stats_enabled
}
leaf=$cg
trap cleanup EXIT

clang -g -O2 -target bpf -D__TARGET_ARCH_x86 -Wall -Werror -Ibpf/vmlinux -I. -Ibpf \
  -c bench/profile/connect_variants.bpf.c -o "$tmp/v.o"
bpftool prog loadall "$tmp/v.o" "$pins" pinmaps "$pins-maps"

mkdir -p "$cg"
for ((l = 2; l <= depth; l++)); do leaf=$leaf/l$l; mkdir -p "$leaf"; done
# The cgroup id is its kernfs inode number; registered as a sandbox (the value's
# content does not change the lookup's cost).
id=$(stat -c %i "$leaf")
key=$(printf '%016x' "$id" | sed 's/../& /g' | awk '{for (i = 8; i >= 1; i--) printf "%s ", $i}')
vsize=$(bpftool -j map show pinned "$pins-maps/v_cgroups" | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_value"])')
bpftool map update pinned "$pins-maps/v_cgroups" key hex $key value hex $(printf '01 %.0s' $(seq 1 "$vsize"))

# The LPM trie: policy 1's /24s (11.b.c.0/24 ...), and the destination 127.0.0.1/32.
asize=$(bpftool -j map show pinned "$pins-maps/v_allow4" | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_value"])')
python3 - "$lpm_entries" "$asize" "$pins-maps/v_allow4" > "$tmp/batch" <<'PY'
import sys
n, asize, pin = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
val = " ".join(["00"] * asize)
def line(plen, a, b, c, d):
    key = f"{plen:02x} 00 00 00 00 00 00 01 {a:02x} {b:02x} {c:02x} {d:02x}"
    return f"map update pinned {pin} key hex {key} value hex {val}"
for i in range(n):
    print(line(56, 11 + i // 65536, (i // 256) % 256, i % 256, 0))
print(line(64, 127, 0, 0, 1))
PY
bpftool batch file "$tmp/batch" >/dev/null

for p in "${progs[@]}"; do bpftool cgroup attach "$leaf" connect4 pinned "$pins/$p" multi; done
echo 1 > /proc/sys/kernel/bpf_stats_enabled

cat > "$tmp/loop.py" <<'PY'
import os, socket, struct, sys, time
n = int(sys.argv[1])
os.system("ip link set lo up")
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1024)
addr = srv.getsockname()
lg = struct.pack("ii", 1, 0)
t0 = time.process_time()
for _ in range(n):
    c = socket.socket()
    c.connect(addr)
    a, _ = srv.accept()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, lg)
    c.close(); a.close()
print(time.process_time() - t0, file=sys.stderr)
PY
perf=()
if [[ -n ${PERF:-} ]]; then perf=(perf record -q -g -e cpu-clock -o "$PERF" --); fi
"${perf[@]}" sh -c "echo \$\$ > '$leaf/cgroup.procs' && exec unshare -n python3 '$tmp/loop.py' $n" 2>"$tmp/cpu"
sed -i '/^\[ perf record/d' "$tmp/cpu"

python3 - "$pins" "$n" "$depth" "$lpm_entries" "$(cat "$tmp/cpu")" "$(cat /proc/loadavg)" "${progs[@]}" <<'PY'
import json, subprocess, sys
pins, n, depth, lpm, cpu, load = sys.argv[1:7]
out = {"connects": int(n), "cgroup_depth": int(depth), "lpm_entries": int(lpm),
       "loop_cpu_s": float(cpu), "loadavg": load, "ns_per_run": {}}
for p in sys.argv[7:]:
    j = json.loads(subprocess.check_output(["bpftool", "-j", "prog", "show", "pinned", f"{pins}/{p}"]))
    out["ns_per_run"][p] = round(j.get("run_time_ns", 0) / max(j.get("run_cnt", 1), 1), 1)
    out.setdefault("runs", {})[p] = j.get("run_cnt", 0)
print(json.dumps(out))
PY
