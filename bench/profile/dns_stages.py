#!/usr/bin/env python3
"""Where a forwarded query's time goes: the proxy's per-stage stamps
(bench/profile/dns_stages.patch, EGR_DNS_STAGES=FILE) joined to egr-dns-load's
per-query samples (EGR_BENCH_DNSSPEED_SAMPLES_DIR=DIR) by the client's query ID
and send time, both CLOCK_MONOTONIC.  Per egressd run: the p50 of every stage,
each stage's own p99, and each stage's mean over the slowest 1% of queries.
  in   the client's send to the proxy's handler (kernel redirect, socket queue, loop busy or off-CPU)
  dec  Decide (parse, scope)          snd  Upstream::Send (c-ares: socket if none open, writev)
  up   sent to answer callback        fin  Finish (parse, map writes)
  rep  reply sent                     aud  audit record encoded and queued
  out  reply sent to the client's kernel receive timestamp (negative: stamped inside the send)
usage: dns_stages.py SAMPLES_DIR STAGES_FILE"""
import bisect, glob, os, re, statistics, sys

def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")

recs = sorted((list(map(int, l.split())) for l in open(sys.argv[2])), key=lambda r: r[1])
t0s = [r[1] for r in recs]
keys = ["lat", "in", "dec", "snd", "up", "fin", "rep", "aud", "out"]
for f in sorted(glob.glob(sys.argv[1] + "/*-egressd-*.txt"), key=lambda f: int(os.path.basename(f).split("-")[0])):
    rows = [l.split() for l in open(f)]
    sends = [int(r[0]) for r in rows]
    lats = [float(r[1]) for r in rows]
    lo, hi = bisect.bisect_left(t0s, sends[0]), bisect.bisect_right(t0s, sends[-1] + 1_000_000_000)
    by_id = {}
    for r in recs[lo:hi]:
        by_id.setdefault(r[0], r)
    comps = []
    for i, (s, lat) in enumerate(zip(sends, lats)):
        r = by_id.get(i % 65536)
        if lat < 0 or not r:
            continue
        t = r[1:]
        comps.append(dict(zip(keys, [lat, (t[0] - s) / 1e3, (t[1] - t[0]) / 1e3, (t[2] - t[1]) / 1e3,
                                     (t[3] - t[2]) / 1e3, (t[4] - t[3]) / 1e3, (t[5] - t[4]) / 1e3,
                                     (t[6] - t[5]) / 1e3, (s + lat * 1000 - t[5]) / 1e3])))
    comps.sort(key=lambda c: c["lat"])
    tail = comps[int(len(comps) * 0.99):]
    print(f"{os.path.basename(f)}: {len(comps)} of {len(rows)} matched (µs)")
    print("  p50:           " + " ".join(f"{k}={q([c[k] for c in comps], 0.5):.0f}" for k in keys))
    print("  p99 each:      " + " ".join(f"{k}={q([c[k] for c in comps], 0.99):.0f}" for k in keys))
    print("  slowest 1%:    " + " ".join(f"{k}={statistics.mean([c[k] for c in tail]):.0f}" for k in keys))
