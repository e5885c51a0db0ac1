#!/usr/bin/env bash
# Prints "ADDR PORT": the IPv4 DNS endpoint of the DNS speed rows' sandbox
# (the record whose cgroup is bench-dns, under $EGRESSD_RUNTIME_DIR as
# bench/dns_rows.cc registers it), for the stand-ins that take `dns serve`'s
# place (min_relay_serve.sh, nx_reflect_serve.sh).
set -euo pipefail
python3 - "${EGRESSD_RUNTIME_DIR:?bench_dns_endpoint.sh: EGRESSD_RUNTIME_DIR unset}" <<'PY'
import json, os, sys
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        try:
            j = json.load(open(os.path.join(root, f)))
        except Exception:
            continue
        if isinstance(j, dict) and str(j.get("cgroup_path", "")).endswith("bench-dns") and j.get("dns"):
            print(j["dns"]["addr4"], j["dns"]["port"])
            sys.exit(0)
sys.exit("bench_dns_endpoint.sh: no sandbox record for bench-dns with a DNS endpoint under " + sys.argv[1])
PY
