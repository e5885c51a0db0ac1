#!/usr/bin/env bash
# Interleaved A/B of `dns serve` builds on the closed-loop DNS rows (dnsperf
# from the pod; bench/dns_rows.cc): N alternations, each one
# `bench/run.sh --quick --only dns` per build (3 rounds of the three paths),
# the build's serve started through EGR_BENCH_SERVE_PREFIX; then per build
# and name the medians over every round of egressd's and the incumbent's
# rate and path CPU per query, each as its round's ratio to the floor (the
# floor and the incumbent are the same in every run: their spread is the
# machine's).
#   bench/profile/dns_rows_ab.sh OUT_DIR N NAME=EGRESSCTL_BINARY...
# (see dns_speed_ab.sh for making the binaries; a NAME=SCRIPT that execs
# something else works too, e.g. bench/profile/min_relay_serve.sh).
set -euo pipefail
out=$1 n=$2
shift 2
cd "$(dirname "$0")/../.."
. bench/profile/ab_lib.sh
run_dns_rows() { bench/run.sh --quick --only dns; }
ab_alternate "$out" "$n" run_dns_rows "$@"
python3 - "$out" <<'PY'
import collections, glob, json, os, statistics, sys
agg = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(sys.argv[1] + "/*/*-dns.json")):
    build = os.path.basename(os.path.dirname(f)).rsplit("-", 1)[0]
    dns = json.load(open(f))["dns"]
    for names in ("allowed", "denied"):
        row = dns[names]
        for en in ("egressd", "nftables"):
            agg[(names, build)][en + " rate"] += row["qps_under_1pct_loss_ratio"][en]["samples"]
            agg[(names, build)][en + " cpu/q"] += row["path_cpu_us_per_query_ratio"][en]["samples"]
for (names, build), d in sorted(agg.items()):
    cols = "  ".join(f"{k} {statistics.median(v):.3f}" for k, v in sorted(d.items()))
    print(f"{names} {build}: {cols}  (rounds {len(next(iter(d.values())))}; ratios to the floor)")
PY
