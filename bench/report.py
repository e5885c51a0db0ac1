#!/usr/bin/env python3
"""Renders enforcer_bench's JSON as the markdown table and the gnuplot data.

usage: report.py RESULTS.json TABLE.md DATDIR
Ratios are to the no-filter run of the same round; "no difference" where the
95% interval of the ratio contains 1.
"""
import json
import sys
import time


def ratio_cell(s, lower_is_better=False):
    lo, hi = s["ci95"]
    text = f"{s['median']:.3f} [{lo:.3f}, {hi:.3f}]"
    if lo <= 1.0 <= hi:
        text += " no difference"
    return text


def secs(s):
    lo, hi = s["ci95"]
    return f"{s['median']*1e3:.1f} ms [{lo*1e3:.1f}, {hi*1e3:.1f}]"


def main():
    res_path, table_path, dat_dir = sys.argv[1:4]
    r = json.load(open(res_path))
    scales = sorted(r["scales"], key=int)
    out = []
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(r["date"]))
    out.append(f"Run {when}, mode {r['mode']}, kernel {r['kernel'].strip()}, {r['nproc']} CPUs; "
               f"load average at start {r['loadavg_start'].split()[0:3]}, at end {r['loadavg_end'].split()[0:3]} "
               "(the machine is shared: read the ratios, not the absolute figures).")
    out.append("")
    out.append("Connect+accept+close to an allowed address (ratio to no filter, median [95% CI]; "
               "rate: higher is better, CPU: lower is better):")
    out.append("")
    out.append("| CIDR entries | rate nftables | rate egressd | CPU/conn nftables | CPU/conn egressd | no-filter rate | goal: egressd <= 1% slower, never worse than nftables |")
    out.append("|---|---|---|---|---|---|---|")
    for s in scales:
        c = r["scales"][s]
        rn, re_ = c["connect_rate_ratio"]["nftables"], c["connect_rate_ratio"]["egressd"]
        cn, ce = c["cpu_ratio"]["nftables"], c["cpu_ratio"]["egressd"]
        none = c["connect_per_s"]["none"]["median"]
        met_1pct = re_["ci95"][1] >= 0.99
        not_worse = re_["ci95"][1] >= rn["ci95"][0]
        goal = ("met" if met_1pct and not_worse else
                "MISSED: " + ", ".join(x for x, ok in (("more than 1% slower", met_1pct),
                                                         ("slower than nftables", not_worse)) if not ok))
        out.append(f"| {int(s):,} | {ratio_cell(rn)} | {ratio_cell(re_)} | {ratio_cell(cn)} | {ratio_cell(ce)} | "
                   f"{none:,.0f}/s | {goal} |")
    out.append("")
    out.append("Applying a policy of N entries (egressd: `egressctl sandbox add`, compile + batch map updates; "
               "nftables: `nft -f` of the pre-rendered ruleset) and adding one resolved address:")
    out.append("")
    out.append("| CIDR entries | nft -f | egressd apply | nft / egressd | add one resolved address (nft) | egressd: one resolved address |")
    out.append("|---|---|---|---|---|---|")
    for s in scales:
        a = r["scales"][s]["apply_s"]
        ratio = a["nftables"]["median"] / a["egressd"]["median"]
        add = r["scales"][s]["add_resolved_s"]["nftables"]
        goal = "" if int(s) < 100000 else (" (goal >= 10x: met)" if ratio >= 10 else " (goal >= 10x: MISSED)")
        out.append(f"| {int(s):,} | {secs(a['nftables'])} | {secs(a['egressd'])} | {ratio:.2f}x{goal} | {secs(add)} | "
                   "blocked: no DNS proxy yet (issue 11) |")
    out.append("")
    out.append("In-kernel ns per program run (kernel.bpf_stats_enabled; every run of the instance's programs "
               "during the egressd loops, goal: connect4 <= 400 ns at 100k):")
    out.append("")
    names = sorted({n for s in scales for n in r["scales"][s].get("bpf_ns_per_run", {})})
    out.append("| program | " + " | ".join(f"{int(s):,} entries" for s in scales) + " |")
    out.append("|---|" + "---|" * len(scales))
    for n in names:
        cells = []
        for s in scales:
            v = r["scales"][s].get("bpf_ns_per_run", {}).get(n)
            cells.append(f"{v['ns']:.0f} ns ({v['runs']:.0f} runs)" if v else "-")
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    out.append("")
    st = r["startup_s"]
    run_med = st["egressctl_run"]["median"]
    out.append(f"Start-up, median of {len(st['egressctl_run']['samples'])}: `egressctl run -- true` "
               f"{secs(st['egressctl_run'])}, `unshare --fork --pid --mount true` {secs(st['unshare'])} "
               f"(goal <= 10 ms: {'met' if run_med <= 0.010 else 'MISSED'}).")
    out.append("")
    out.append("Not measured yet: UDP send rate and iperf3 throughput (2), memory at 1,000 sandboxes (5), "
               "the 1M-entry stress point, the resolved-address axis and every DNS row (6; blocked until the "
               "DNS proxy exists, issue 11), the sandbox axis (1/100/1,000).")
    open(table_path, "w").write("\n".join(out) + "\n")

    # gnuplot data: entries, then median lo hi per enforcer.
    with open(f"{dat_dir}/connect_cpu.dat", "w") as f:
        f.write("# entries  none(med lo hi)  nftables(med lo hi)  egressd(med lo hi): CPU us per connection\n")
        for s in scales:
            row = [s]
            for en in ("none", "nftables", "egressd"):
                v = r["scales"][s]["cpu_us_per_conn"][en]
                row += [v["median"], v["ci95"][0], v["ci95"][1]]
            f.write(" ".join(str(x) for x in row) + "\n")
    with open(f"{dat_dir}/apply.dat", "w") as f:
        f.write("# entries  nftables(med lo hi)  egressd(med lo hi): seconds to apply\n")
        for s in scales:
            row = [s]
            for en in ("nftables", "egressd"):
                v = r["scales"][s]["apply_s"][en]
                row += [v["median"], v["ci95"][0], v["ci95"][1]]
            f.write(" ".join(str(x) for x in row) + "\n")


if __name__ == "__main__":
    main()
