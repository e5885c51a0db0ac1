#!/usr/bin/env python3
"""Renders veth_bench's JSON (bench/veth_bench.cc) as its markdown table.

usage: report_veth.py RESULTS.json TABLE.md
Ratios are to the no-filter pod's run of the same round, median [95% CI];
"no difference" where the interval contains 1 (report.py's cells).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import ratio_cell  # noqa: E402

# (row, value key, CPU key, what, unit of the no-filter figure, higher is better)
ROWS = [
    ("connect", "connect_per_s", "cpu_us_per_conn", "TCP connect+accept+close", "conn/s", "CPU µs/conn"),
    ("udp_send", "udp_sends_per_s", "cpu_us_per_send", "unconnected UDP sendto(), 64 bytes", "sends/s",
     "CPU µs/send"),
    ("iperf_tcp", "iperf_tcp_bps", "iperf_tcp_cpu_s_per_gb", "iperf3 TCP throughput", "bit/s", "CPU s/GB"),
    ("iperf_udp64", "iperf_udp64_pps", "iperf_udp64_cpu_us_per_dgram", "iperf3 UDP, 64-byte datagrams received",
     "dgrams/s", "CPU µs/dgram"),
]
FILTERS = ["nftables", "egressd-tc"]


def main():
    r = json.load(open(sys.argv[1]))
    out = []
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(r["date"]))
    plan = r["plan"]
    out.append(f"Run {when}, mode {r['mode']}, kernel {r['kernel'].strip()}, {r['nproc']} CPUs; load average at "
               f"start {r['loadavg_start'].split()[:3]}, at end {r.get('loadavg_end', '?').split()[:3]} (the "
               f"machine is shared: read the ratios, not the absolute figures).")
    out.append("")
    out.append(f"Three pods behind veths, one policy ({r['policy']}): no filter; nftables in the pod's netns "
               "(`egressctl policy compile -o nft`); egressd's tc program on the node end of the veth of a "
               "sandbox registered by interface only (`egressctl sandbox add --interface`). "
               f"{plan['rounds']} rounds of {plan['connects']:,} connects and {plan['sends']:,} sends, "
               f"{plan['iperf_rounds']} rounds of {plan['iperf_seconds']} s iperf3, order rotated every round.")
    out.append("")
    enf = r.get("enforcing", {})
    if enf:
        out.append("Enforcing (a connect to a host the policy does not name): " + ", ".join(
            f"{k}: {'connected' if v['denied_host_connected'] else 'refused'}"
            + ("" if v["as_expected"] else " (NOT AS EXPECTED)") for k, v in enf.items()) + ".")
        out.append("")
    rows = r.get("rows", {})
    out.append("Ratio to no filter, median [95% CI] (rates: higher is better; CPU: lower is better):")
    out.append("")
    out.append("| row | rate nftables | rate egressd tc | CPU nftables | CPU egressd tc | no-filter rate | "
               "no-filter CPU |")
    out.append("|---|---|---|---|---|---|---|")
    for row, vk, ck, what, unit, cpu_unit in ROWS:
        c = rows.get(row)
        if not c or vk + "_ratio" not in c:
            continue
        cells = [ratio_cell(c[vk + "_ratio"][f]) for f in FILTERS] + [ratio_cell(c[ck + "_ratio"][f])
                                                                       for f in FILTERS]
        none_v = c[vk]["none"]["median"]
        none_c = c[ck]["none"]["median"]
        out.append(f"| {what} | " + " | ".join(cells) + f" | {none_v:,.0f} {unit} | {none_c:.3g} {cpu_unit} |")
    if "iperf3_error" in rows:
        out.append("")
        out.append(f"iperf3 not run: {rows['iperf3_error']}")
    out.append("")
    out.append("The tc programs in the kernel (kernel.bpf_stats_enabled, over the tc pod's runs of each row): "
               "`egr_tc_ingress` judges what the pod sends, `egr_tc_egress` sees what goes into it:")
    out.append("")
    out.append("| row | egr_tc_ingress ns/run | runs/unit | egr_tc_egress ns/run | runs/unit | in-kernel ns per unit |")
    out.append("|---|---|---|---|---|---|")
    for row, _, _, what, unit, _ in ROWS:
        t = rows.get(row, {}).get("tc_programs")
        if not t:
            continue
        cells = []
        for prog in ("egr_tc_ingress", "egr_tc_egress"):
            p = t.get(prog)
            cells.append(f"{p['ns_per_run']:.0f}" if p else "-")
            cells.append(f"{p['runs_per_unit']:.2f}" if p and "runs_per_unit" in p else "-")
        per_unit = f"{t['ns_per_unit']:.0f}" if "ns_per_unit" in t else "-"
        out.append(f"| {what} | " + " | ".join(cells) + f" | {per_unit} |")
    out.append("")
    if not r.get("all_ran", False):
        out.append("**Not everything ran** (see the run's stderr): the rows above are incomplete.")
        out.append("")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(out))


if __name__ == "__main__":
    main()
