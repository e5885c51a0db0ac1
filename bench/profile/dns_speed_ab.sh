#!/usr/bin/env bash
# Interleaved A/B of `egressctl dns serve` builds on the DNS speed rows
# (bench/results/2026-12-03-dns-notes.md): N alternations, each one short
# `bench/run.sh --quick --only dnsspeed` per build (allowed names, 1k and 5k
# q/s, ROUNDS rounds of 2 s), the build's serve started through
# EGR_BENCH_SERVE_PREFIX; then the medians per build over every round: added
# p50/p99 (run minus the same round's floor), and dns serve's CPU and context
# switches per answered query.
#   bench/profile/dns_speed_ab.sh OUT_DIR N NAME=EGRESSCTL_BINARY...
# e.g. copy build/tools/egressctl/egressctl to /tmp/egressctl-old before a
# change and to /tmp/egressctl-new after, then
#   bench/profile/dns_speed_ab.sh /tmp/ab 3 old=/tmp/egressctl-old new=/tmp/egressctl-new
# NAMES=denied runs the denied names' rows instead of the allowed ones (for
# bench/profile/nx_reflect_serve.sh, which answers NXDOMAIN to everything).
# Run as root on a machine as quiet as you can get; say what the load was.
set -euo pipefail
names=${NAMES:-allowed}
case $names in
  allowed) only=EGR_BENCH_DNSSPEED_ALLOWED_ONLY ;;
  denied) only=EGR_BENCH_DNSSPEED_DENIED_ONLY ;;
  *) echo "dns_speed_ab.sh: NAMES=$names, want allowed or denied" >&2; exit 2 ;;
esac
out=$1 n=$2
shift 2
cd "$(dirname "$0")/../.."
. bench/profile/ab_lib.sh
run_speed_rows() {
  env EGR_BENCH_DNSSPEED_ROUNDS="${ROUNDS:-3}" EGR_BENCH_DNSSPEED_SECONDS=2 EGR_BENCH_DNSSPEED_NO_SEARCH=1 \
    "$only=1" bench/run.sh --quick --only dnsspeed
}
ab_alternate "$out" "$n" run_speed_rows "$@"
python3 - "$out" "$names" <<'PY'
import collections, glob, json, os, statistics, sys
agg = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(sys.argv[1] + "/*/*-dns-speed.json")):
    name = os.path.basename(os.path.dirname(f)).rsplit("-", 1)[0]
    for rate, c in json.load(open(f))["dns_speed"][sys.argv[2]]["latency"].items():
        d = agg[(int(rate), name)]
        d["added p50 us"] += c["added_p50_us"]["egressd"]["samples"]
        d["added p99 us"] += c["added_p99_us"]["egressd"]["samples"]
        d["nft added p99 us"] += c["added_p99_us"]["nftables"]["samples"]
        s = c.get("egressd_serve_per_query")
        if s:
            d["serve cpu us/q"] += s["cpu_us"]["samples"]
            d["voluntary sw/q"] += s["voluntary_switches"]["samples"]
            d["involuntary sw/q"] += s["involuntary_switches"]["samples"]
for (rate, name), d in sorted(agg.items()):
    print(f"{rate}/s {name}: " + "  ".join(f"{k} {statistics.median(v):.2f}" for k, v in d.items() if v) +
          f"  (rounds {len(d['added p99 us'])})")
PY
