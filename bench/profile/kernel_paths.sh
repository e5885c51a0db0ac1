#!/usr/bin/env bash
# Where the backstop's and connect4's nanoseconds go (issue 10's closing note,
# bench/results/2026-12-03-notes.md): build/bench/kernel_paths_profile over the
# variants, one instance of egressd each (`egressctl load` under a pin root of
# its own), with bench/profile/path_steps.bpf.c's cut-down programs on that
# instance's maps.  Writes one JSON line per variant to OUT and prints the
# tables.
#   bench/profile/kernel_paths.sh [OUT=/tmp/kernel_paths.jsonl]
# VARIANTS="10:0 100000:10000:strict" runs only those (entries:learned[:strict][:depthD][:lazy|:noreader]);
# lazy: the audit ring drained every 50 ms instead of by an epoll waiter; noreader: never read.
# Run as root, after `cmake --build build --target kernel_paths_profile egressctl`.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/kernel_paths.jsonl}
build=${BUILD_DIR:-build}
obj=$(mktemp /tmp/egr-path-steps-XXXXXX.o)
trap 'rm -f "$obj"' EXIT
clang -g -O2 -target bpf -D__TARGET_ARCH_x86 -Wall -Werror -Ibpf/vmlinux -I. -Ibpf \
  -c bench/profile/path_steps.bpf.c -o "$obj"
read -r -a variants <<< "${VARIANTS:-10:0 100000:0 100000:10000 100000:10000:strict 10:0:depth5 10:0:lazy}"
: > "$out"
for v in "${variants[@]}"; do
  IFS=: read -r entries learned rest <<< "$v"
  args=(--entries "$entries" --learned "$learned" --repeat "${REPEAT:-100000}" --loop "${LOOP:-20000}" --steps "$obj")
  [[ $rest == *strict* ]] && args+=(--strict)
  [[ $rest =~ depth([0-9]+) ]] && args+=(--depth "${BASH_REMATCH[1]}")
  [[ $rest == *lazy* ]] && args+=(--lazy-reader)
  [[ $rest == *noreader* ]] && args+=(--no-reader)
  echo "kernel_paths: $v" >&2
  "$build/bench/kernel_paths_profile" "${args[@]}" >> "$out"
done

python3 - "$out" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(x): return st.median(x) if isinstance(x, list) else x
def name(r):
    n = f"{r['entries']:,} CIDRs, {r['learned']:,} learned"
    if r["strict"]: n += ", strict"
    if r["cgroup_depth"] != 2: n += f", depth {r['cgroup_depth']}"
    if r.get("ring_reader", "epoll") != "epoll": n += ", ring read: " + r["ring_reader"]
    return n
print("## backstop (egr_skb_egress), BPF_PROG_TEST_RUN ns per run, median of 3 rounds (best of 3 x repeat each)")
for mode in ("stats_off", "stats_on"):
    for r in rows:
        t = r["test_run"][mode]
        if isinstance(t, str):
            print(f"\n{name(r)}, {mode}: {t}"); continue
        steps = t["steps"]
        vecs = list(next(iter(steps.values())).keys())
        print(f"\n{name(r)}, bpf_stats {'off' if mode == 'stats_off' else 'on'}\n")
        print("| step | " + " | ".join(vecs) + " |")
        print("|---|" + "---|" * len(vecs))
        for s, v in steps.items():
            print(f"| {s} | " + " | ".join(f"{med(v.get(x, '-')):.0f}" for x in vecs) + " |")
        print("| the instance's egr_skb_egress | " + " | ".join(
            f"{t['sandbox'][x]['ns_per_run']:.0f} (ret {t['sandbox'][x]['ret']})" if x in t['sandbox'] else "-" for x in vecs) + " |")
        print(f"| not a sandbox (walk only) | {t['not_a_sandbox']['udp4_allowed_cidr']['ns_per_run']:.0f} |")
print("\n## real sockets: bpf_stats ns per run (runs), the sandbox's cgroup only")
for r in rows:
    print(f"\n{name(r)}: audit {r['audit_counters']}, ring records read {r.get('ring_records_read')}, load {r['loadavg']}\n")
    print("| loop | backstop | empty cgroup_skb | connect4 | empty connect4 | sendmsg4 | empty sendmsg4 |")
    print("|---|---|---|---|---|---|---|")
    for loop, v in r["sockets"].items():
        if loop == "connect4_steps": continue
        cell = lambda p: f"{v[p]['ns_per_run']:.0f} ({v[p]['runs']:.0f})" if p in v and v[p]['runs'] > 10 else "-"
        print(f"| {loop} | " + " | ".join(cell(p) for p in ("backstop", "empty_cgroup_skb", "connect4", "empty_connect4", "sendmsg4", "empty_sendmsg4")) + " |")
print("\n## connect4 steps: bpf_stats ns per run, one variant attached at a time, median [min, max] of 5 rounds")
print("\n| step | " + " | ".join(name(r) for r in rows) + " |")
print("|---|" + "---|" * len(rows))
for s in rows[0]["sockets"]["connect4_steps"]:
    cells = []
    for r in rows:
        x = r["sockets"]["connect4_steps"][s]["ns_per_run"]
        cells.append(f"{st.median(x):.0f} [{min(x):.0f}, {max(x):.0f}]")
    print(f"| {s} | " + " | ".join(cells) + " |")
PY
