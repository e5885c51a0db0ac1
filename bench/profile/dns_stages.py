#!/usr/bin/env python3
"""Where a forwarded query's time goes: the proxy's per-stage stamps
(bench/profile/dns_stages.patch, EGR_DNS_STAGES=FILE) joined to egr-dns-load's
per-query samples (EGR_BENCH_DNSSPEED_SAMPLES_DIR=DIR) by the client's query ID
and send time, both CLOCK_MONOTONIC.  Per egressd run: the p50 of every stage,
each stage's own p99, and each stage's mean over the slowest 1% of queries.
  wire the client's send to the query's kernel receive time on the endpoint (redirect, veths)
  wait that receive to the proxy's handler (the loop busy with other work, or off-CPU)
  busy the loop thread's CPU time over the wall time of that wait (1: running all along;
       includes softirqs run in its context, excludes steal)
  dec  Decide (parse, scope)          snd  Upstream::Send (c-ares: socket if none open, writev)
  up   sent to answer callback        fin  Finish (parse, map writes)
  rep  reply sent                     aud  audit record encoded and queued
  out  reply sent to the client's kernel receive timestamp (negative: stamped inside the send)
Then, for each stage, how many queries spent over 200 µs in it.  With --worst,
the loop's events around the longest wait (handler starts and replies, with
the loop's CPU time): what the loop was doing while the query waited.
usage: dns_stages.py SAMPLES_DIR STAGES_FILE [--worst]"""
import bisect, glob, os, statistics, sys

def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")

recs = sorted((list(map(int, l.split())) for l in open(sys.argv[2])), key=lambda r: r[1])
# r: id, t0 received, t1 decided, t2 sent, t3 answered, t4 finished, t5 replied, t6 audited,
#    kernel rx, loop CPU at the handler, loop CPU at the reply
t0s = [r[1] for r in recs]
points = sorted([(r[1], r[9], "rx", r) for r in recs] + [(r[6], r[10], "rep", r) for r in recs],
                key=lambda p: p[0])
walls = [p[0] for p in points]
keys = ["lat", "wire", "wait", "busy", "dec", "snd", "up", "fin", "rep", "aud", "out"]
fmt = lambda k, x: f"{k}={x:.2f}" if k == "busy" else f"{k}={x:.0f}"
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
        if lat < 0 or not r or r[8] == 0:
            continue
        t, krx = r[1:8], r[8]
        j = bisect.bisect_right(walls, krx) - 1  # the loop's last event before the query arrived
        busy = (r[9] - points[j][1]) / (t[0] - points[j][0]) if j >= 0 and t[0] > points[j][0] else 0.0
        comps.append(dict(zip(keys, [lat, (krx - s) / 1e3, (t[0] - krx) / 1e3, busy, (t[1] - t[0]) / 1e3,
                                     (t[2] - t[1]) / 1e3, (t[3] - t[2]) / 1e3, (t[4] - t[3]) / 1e3,
                                     (t[5] - t[4]) / 1e3, (t[6] - t[5]) / 1e3, (s + lat * 1000 - t[5]) / 1e3])))
    comps.sort(key=lambda c: c["lat"])
    tail = comps[int(len(comps) * 0.99):]
    print(f"{os.path.basename(f)}: {len(comps)} of {len(rows)} matched (µs)")
    print("  p50:           " + " ".join(fmt(k, q([c[k] for c in comps], 0.5)) for k in keys))
    print("  p99 each:      " + " ".join(fmt(k, q([c[k] for c in comps], 0.99)) for k in keys))
    print("  slowest 1%:    " + " ".join(fmt(k, statistics.mean([c[k] for c in tail])) for k in keys))
    print("  over 200 µs:   " + " ".join(f"{k}={sum(1 for c in comps if c[k] > 200)}"
                                         for k in keys if k not in ("lat", "busy")))
if "--worst" in sys.argv[3:]:
    with_rx = [r for r in recs if r[8]]
    worst = max(with_rx, key=lambda r: r[1] - r[8])
    print(f"longest wait {(worst[1] - worst[8]) / 1e3:.0f} µs; the loop's events around it "
          "(µs from its arrival, loop CPU µs since the first line):")
    c = bisect.bisect_left(walls, worst[8])
    first = points[max(0, c - 10)]
    for wall, cpu, what, r in points[max(0, c - 10):c + 50]:
        print(f"  {(wall - worst[8]) / 1e3:9.1f} cpu {(cpu - first[1]) / 1e3:8.1f} {what:3} id {r[0]:5} "
              f"wait {(r[1] - r[8]) / 1e3 if r[8] else -1:7.0f} snd {(r[3] - r[2]) / 1e3:6.0f} "
              f"up {(r[4] - r[3]) / 1e3:6.0f} fin {(r[5] - r[4]) / 1e3:6.0f} rep {(r[6] - r[5]) / 1e3:6.0f}")
