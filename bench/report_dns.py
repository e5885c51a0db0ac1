"""The DNS rows and the resolved-address axis of enforcer_bench's JSON, as
markdown (report.py calls these) and gnuplot data (plots_dns.gp).

Ratios and differences are to the no-filter run of the same round; "no
difference" where the 95% interval contains 1 (ratios) or 0 (differences).
"""


def _ci(s, scale=1.0, fmt="{:.1f}", unit=""):
    lo, hi = s["ci95"]
    return f"{fmt.format(s['median'] * scale)}{unit} [{fmt.format(lo * scale)}, {fmt.format(hi * scale)}]"


def _ratio(s):
    lo, hi = s["ci95"]
    text = f"{s['median']:.3f} [{lo:.3f}, {hi:.3f}]"
    if lo <= 1.0 <= hi:
        text += " no difference"
    return text


def _diff(s, fmt="{:.0f}", unit=" µs"):
    lo, hi = s["ci95"]
    text = _ci(s, fmt=fmt, unit=unit)
    if lo <= 0.0 <= hi:
        text += " no difference"
    return text


def dns_rows(out, r):
    d = r.get("dns")
    if not d:
        return
    if "error" in d:
        out.append(f"DNS rows not run: {d['error']}")
        out.append("")
        return
    out.append(f"DNS (dnsperf from the pod, one name per row; the floor: the same client asking the lab's dnsmasq "
               f"at {d['resolver']} directly; egressd: `egressctl dns serve` behind the kernel redirect; nftables: "
               f"the incumbent's per-pod forwarder `egr-nft-forwarder` behind an nft redirect, one nft transaction per "
               f"answer). Latency at {d['latency_qps']} queries/s for {d['latency_seconds']:g} s a run, p50 and p99 of "
               "every answer; added = the round's difference to the floor, median [95% CI]:")
    out.append("")
    out.append("| names | floor p50 | added p50 nftables | added p50 egressd | p50 ratio nftables | p50 ratio egressd | "
               "floor p99 | added p99 nftables | added p99 egressd |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for row in ("allowed", "denied"):
        c = d.get(row)
        if not c:
            continue
        out.append(f"| {row} | {c['latency_p50_us']['none']['median']:.0f} µs | "
                   f"{_diff(c['added_p50_us']['nftables'])} | {_diff(c['added_p50_us']['egressd'])} | "
                   f"{_ratio(c['latency_p50_us_ratio']['nftables'])} | {_ratio(c['latency_p50_us_ratio']['egressd'])} | "
                   f"{c['latency_p99_us']['none']['median']:.0f} µs | "
                   f"{_diff(c['added_p99_us']['nftables'])} | {_diff(c['added_p99_us']['egressd'])} |")
    out.append("")
    out.append(f"DNS rate: the highest rate with under 1% loss (dnsperf closed loop at 100 outstanding for "
               f"{d['rate_seconds']:g} s, so the path's capacity; open-loop at 70%, 50% and 25% of it when over 1% "
               "was lost; 0 when none passed), as a ratio to the floor; the resolver path's CPU per query (dnsmasq, plus `dns serve` or the "
               "forwarder):")
    out.append("")
    out.append("| names | floor q/s | q/s nftables | q/s egressd | egressd / nftables | path CPU/query floor | "
               "CPU/query ratio nftables | CPU/query ratio egressd |")
    out.append("|---|---|---|---|---|---|---|---|")
    for row in ("allowed", "denied"):
        c = d.get(row)
        if not c:
            continue
        q = c["qps_under_1pct_loss"]
        ratio = q["egressd"]["median"] / q["nftables"]["median"] if q["nftables"]["median"] > 0 else float("nan")
        out.append(f"| {row} | {q['none']['median']:,.0f} | {_ratio(c['qps_under_1pct_loss_ratio']['nftables'])} | "
                   f"{_ratio(c['qps_under_1pct_loss_ratio']['egressd'])} | {ratio:.2f}x | "
                   f"{c['path_cpu_us_per_query']['none']['median']:.1f} µs | "
                   f"{_ratio(c['path_cpu_us_per_query_ratio']['nftables'])} | "
                   f"{_ratio(c['path_cpu_us_per_query_ratio']['egressd'])} |")
    out.append("")
    fc = d.get("forwarder_counters", {})
    if "commits" in fc:
        mean = fc["commit_s_total"] / fc["commits"] * 1e6 if fc["commits"] else 0
        out.append(f"The forwarder's transactions over the whole run: {fc['commits']:,} (one per allowed answer; "
                   f"{fc['commit_failed']} failed), mean {mean:.0f} µs, max {fc['commit_s_max'] * 1e3:.1f} ms; "
                   f"{fc['commits_over_10ms']} over 10 ms, {fc['commits_over_100ms']} over 100 ms, "
                   f"{fc['commits_over_1s']} over 1 s (its loop serves nothing while one runs).")
        out.append("")
    rss = d.get("rss_kib", {})
    if rss:
        out.append(f"Resident memory after the DNS rows: the incumbent's forwarder {rss['nftables_forwarder'] / 1024:.1f} MiB "
                   f"per pod; `egressctl dns serve` {rss['egressd_dns_serve'] / 1024:.1f} MiB per node (every "
                   "sandbox's endpoints in one process).")
        out.append("")


def resolved_axis(out, r, dat_dir):
    ax = r.get("resolved_axis")
    if not ax:
        return
    if "error" in ax:
        out.append(f"Resolved-address axis not run: {ax['error']}")
        out.append("")
        return
    sizes = sorted(ax.get("sizes", {}), key=int)
    out.append("The resolved-address axis: N addresses resolved for one sandbox (egressd: its entries of "
               "egr_resolved_v1, written through the maps layer as the proxy writes them; nftables: N elements in the "
               "pod's timeout set), a names-only policy, so the server is allowed only as a resolved address. "
               "Connect+accept+close to it (ratio to no filter, median [95% CI]):")
    out.append("")
    out.append("| resolved addresses | rate nftables | rate egressd | CPU/conn nftables | CPU/conn egressd | "
               "no-filter rate | egressd never worse than nftables |")
    out.append("|---|---|---|---|---|---|---|")
    for n in sizes:
        c = ax["sizes"][n]
        if "connect_per_s_ratio" not in c:
            out.append(f"| {int(n):,} | not run: {c.get('error', '?')} | | | | | |")
            continue
        rn, re_ = c["connect_per_s_ratio"]["nftables"], c["connect_per_s_ratio"]["egressd"]
        cn, ce = c["cpu_us_per_conn_ratio"]["nftables"], c["cpu_us_per_conn_ratio"]["egressd"]
        not_worse = re_["ci95"][1] >= rn["ci95"][0] and ce["ci95"][0] <= cn["ci95"][1]
        out.append(f"| {int(n):,} | {_ratio(rn)} | {_ratio(re_)} | {_ratio(cn)} | {_ratio(ce)} | "
                   f"{c['connect_per_s']['none']['median']:,.0f}/s | {'met' if not_worse else 'MISSED'} |")
    out.append("")
    out.append(f"Adding one resolved address ({ax.get('add_reps', '?')} each, at N held): egressd one map write "
               "(`ResolvedTable::Learn`: lookup + update, as the proxy learns), nftables one transaction "
               "(libnftables in process, as the forwarder commits an answer), median [95% CI] and p99; the fill "
               "itself (egressd: map writes one by one; nftables: one transaction):")
    out.append("")
    out.append("| resolved addresses | egressd map write | nftables transaction | nft / egressd | "
               "goal: one address in the map < 50 µs | fill egressd | fill nftables |")
    out.append("|---|---|---|---|---|---|---|")
    for n in sizes:
        c = ax["sizes"][n]
        if "add_one_us" not in c:
            continue
        a = c["add_one_us"]
        e, f = a["egressd"], a["nftables"]
        ratio = f["median"] / e["median"] if e["median"] > 0 else float("nan")
        fill = c["fill_s"]
        out.append(f"| {int(n):,} | {_ci(e, unit=' µs')} (p99 {e['p99']:.1f}) | {_ci(f, unit=' µs')} "
                   f"(p99 {f['p99']:.1f}) | {ratio:.0f}x | {'met' if e['median'] < 50 else 'MISSED'} | "
                   f"{fill['egressd'] * 1e3:.1f} ms | {fill['nftables'] * 1e3:.1f} ms ({fill['added']:,} added) |")
    out.append("")
    out.append("From DNS answer to connection allowed: each round a client asks a name no enforcer has learned and "
               "connects to the answer at once (a fresh name and address per round). Query to connected (ms), and "
               "the answer-to-connected part (µs: the connect itself; an answer released before its address is "
               "allowed would show as a failed connect), median [95% CI]:")
    out.append("")
    out.append("| resolved addresses | query to connected: floor | ratio nftables | ratio egressd | "
               "answer to connected: floor | nftables | egressd |")
    out.append("|---|---|---|---|---|---|---|")
    for n in sizes:
        c = ax["sizes"][n]
        if "resolve_connect_ms" not in c:
            continue
        t, a = c["resolve_connect_ms"], c["answer_to_connected_us"]
        out.append(f"| {int(n):,} | {_ci(t['none'], fmt='{:.2f}', unit=' ms')} | "
                   f"{_ratio(c['resolve_connect_ms_ratio']['nftables'])} | {_ratio(c['resolve_connect_ms_ratio']['egressd'])} | "
                   f"{_ci(a['none'], fmt='{:.0f}', unit=' µs')} | {_ci(a['nftables'], fmt='{:.0f}', unit=' µs')} | "
                   f"{_ci(a['egressd'], fmt='{:.0f}', unit=' µs')} |")
    out.append("")

    with open(f"{dat_dir}/resolved.dat", "w") as f:
        f.write("# resolved  cpu_us_per_conn none/nftables/egressd (med lo hi)  add_one_us egressd/nftables (med lo hi)\n")
        for n in sizes:
            c = ax["sizes"][n]
            if "cpu_us_per_conn" not in c or "add_one_us" not in c:
                continue
            row = [n]
            for en in ("none", "nftables", "egressd"):
                v = c["cpu_us_per_conn"][en]
                row += [v["median"], v["ci95"][0], v["ci95"][1]]
            for en in ("egressd", "nftables"):
                v = c["add_one_us"][en]
                row += [v["median"], v["ci95"][0], v["ci95"][1]]
            f.write(" ".join(str(x) for x in row) + "\n")


def _us(v):
    return f"{v:.0f} µs" if v >= 10 else f"{v:.1f} µs"


def dns_speed(out, r):
    """The DNS speed rows (bench/dns_speed.cc): added latency at fixed
    open-loop rates, the highest rate under 1% loss, and answer to map."""
    s = r.get("dns_speed")
    if not s:
        return
    rates = s["rates"]
    out.append(f"DNS speed (bench/dns_speed.cc). Latency: `egr-dns-load` (bench/dns_load.cc) from the pod at a fixed "
               f"open-loop rate ({s['seconds']:g} s a run; each answer timed from its send to the kernel's receive "
               f"timestamp, stragglers awaited 1 s), {s['rounds']} rounds "
               "of the three enforcers interleaved with the order rotated; added = the run's p50 or p99 minus the "
               "floor's of the same round (the floor: the same client asking the lab's dnsmasq directly, through the "
               "node), median [95% CI]. Allowed: the name is forwarded and its address learned (egressd: map write; "
               "nftables: one nft transaction); denied: the local NXDOMAIN (neither asks the upstream).")
    out.append("")
    out.append("| names | rate | floor p50 | floor p99 | added p50 nftables | added p50 egressd | added p99 nftables | "
               "added p99 egressd | p99 ratio nftables | p99 ratio egressd | goal: egressd p99 added | "
               "lost floor / nftables / egressd |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in ("allowed", "denied"):
        for rate in rates:
            c = s.get(row, {}).get("latency", {}).get(str(rate))
            if not c:
                continue
            goal = 200 if row == "allowed" else 50
            a99e = c["added_p99_us"]["egressd"]["median"]
            a99n = c["added_p99_us"]["nftables"]["median"]
            lost = {en: c["lost"][en]["lost"] / max(c["lost"][en]["sent"], 1) for en in ("none", "nftables", "egressd")}
            # A percentile over the answers that came back says nothing when
            # many did not (a serve that answered none has an empty p99).
            if lost["egressd"] >= 0.01 or lost["none"] >= 0.01:
                who = "egressd" if lost["egressd"] >= 0.01 else "the floor"
                verdict = f"not measured ({who} lost {100 * max(lost['egressd'], lost['none']):.1f}%)"
                ahead = ""
            else:
                verdict = "met" if a99e < goal else f"MISSED by {_us(a99e - goal)}"
                if lost["nftables"] >= 0.01:
                    ahead = ", nftables lost {:.1f}%".format(100 * lost["nftables"])
                else:
                    ahead = ", ahead of nftables" if a99e < a99n else ", NOT ahead of nftables"
            out.append(f"| {row} | {rate:,}/s | {c['p50_us']['none']['median']:.0f} µs | "
                       f"{c['p99_us']['none']['median']:.0f} µs | {_diff(c['added_p50_us']['nftables'])} | "
                       f"{_diff(c['added_p50_us']['egressd'])} | {_diff(c['added_p99_us']['nftables'])} | "
                       f"{_diff(c['added_p99_us']['egressd'])} | {_ratio(c['p99_us_ratio']['nftables'])} | "
                       f"{_ratio(c['p99_us_ratio']['egressd'])} | < {goal} µs: {verdict}{ahead} | "
                       + " / ".join(f"{100 * lost[en]:.1f}%" for en in ("none", "nftables", "egressd")) + " |")
    out.append("")
    out.append(f"Highest rate with under 1% loss: a step search of open-loop `egr-dns-load` rates ("
               f"{s['step_seconds']:g} s a step, up the ladder {', '.join(f'{x:,}' for x in s['ladder'])} until a step "
               f"fails twice, then {s['bisections']} bisections; a step passes with under 1% lost and at least 95% of "
               "the rate offered), median [95% CI] over the searches:")
    out.append("")
    out.append("| names | floor q/s | nftables q/s | egressd q/s | egressd / nftables |")
    out.append("|---|---|---|---|---|")
    for row in ("allowed", "denied"):
        m = s.get(row, {}).get("max_qps")
        if not m:
            continue
        n, e = m["nftables"]["median"], m["egressd"]["median"]
        cells = [_ci(m[en], fmt="{:,.0f}") for en in ("none", "nftables", "egressd")]
        out.append(f"| {row} | " + " | ".join(cells) + f" | {e / n:.2f}x |" if n else f"| {row} | " + " | ".join(cells) + " | - |")
    out.append("")
    for row in ("allowed", "denied"):
        for r in s.get(row, {}).get("max_qps_runs", []):
            if "error" in r:
                out.append(f"- {row}, {r.get('enforcer', '?')}: search not run ({r['error']}); its 0 q/s is no figure.")
            elif r.get("capped"):
                out.append(f"- {row}, {r.get('enforcer', '?')}: passed the ladder's top step; the path's capacity "
                           "is above it.")
    out.append("")
    out.append("From the upstream's answer in the enforcer's hands (c-ares' callback) to the address held by the "
               "kernel, from the enforcers' own timestamps over every allowed answer of the latency runs (egressd: "
               "each audit record's `dns.learn_latency_ns`, to the last map write returned; nftables: the forwarder's "
               "own clock, to its transaction returned); the answer is released right after:")
    out.append("")
    out.append("| rate | nftables p50 | nftables p99 | egressd p50 | egressd p99 | answers (nftables / egressd) |")
    out.append("|---|---|---|---|---|---|")
    for rate in rates:
        c = s.get("allowed", {}).get("latency", {}).get(str(rate))
        if not c or "answer_to_map_us" not in c:
            continue
        n, e = c["answer_to_map_us"]["nftables"], c["answer_to_map_us"]["egressd"]
        if not n.get("n") or not e.get("n"):
            out.append(f"| {rate:,}/s | no samples ({n.get('n', 0)} / {e.get('n', 0)}) | | | | |")
            continue
        out.append(f"| {rate:,}/s | {_us(n['p50'])} | {_us(n['p99'])} | {_us(e['p50'])} | {_us(e['p99'])} | "
                   f"{n['n']:,} / {e['n']:,} |")
    out.append("")
