#!/usr/bin/env bash
# For the stand-ins that take `dns serve`'s place in the DNS speed rows
# (min_relay_serve.sh, nx_reflect_serve.sh):
#   bench_dns_endpoint.sh CALLER dns serve --upstream-dns ADDR
# checks the arguments bench/dns_rows.cc starts serve with (exit 2 naming
# CALLER otherwise) and prints "ADDR PORT UPSTREAM": the IPv4 DNS endpoint of
# the rows' sandbox (the record whose cgroup is bench-dns, under
# $EGRESSD_RUNTIME_DIR) and the upstream serve was given.
set -euo pipefail
caller=$1
shift
[[ ${1:-} == dns && ${2:-} == serve && ${3:-} == --upstream-dns && -n ${4:-} ]] ||
  { echo "$caller: called as \"$*\", want: dns serve --upstream-dns ADDR" >&2; exit 2; }
python3 - "${EGRESSD_RUNTIME_DIR:?$caller: EGRESSD_RUNTIME_DIR unset}" "$4" "$caller" <<'PY'
import json, os, sys
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        try:
            j = json.load(open(os.path.join(root, f)))
        except Exception:
            continue
        if isinstance(j, dict) and str(j.get("cgroup_path", "")).endswith("bench-dns") and j.get("dns"):
            print(j["dns"]["addr4"], j["dns"]["port"], sys.argv[2])
            sys.exit(0)
sys.exit(sys.argv[3] + ": no sandbox record for bench-dns with a DNS endpoint under " + sys.argv[1])
PY
