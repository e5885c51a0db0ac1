#!/usr/bin/env bash
# A stand-in for `egressctl dns serve` in the DNS speed rows: egr-min-relay
# --fresh-port (bench/min_relay.cc) on the benchmark sandbox's DNS endpoint,
# the bare relay plus a new upstream socket per query (egressd's RFC 5452
# defence), so that beside min_relay_serve.sh and `dns serve` it prices the
# fresh port apart from everything else egressd does:
#   ROUNDS=3 bench/profile/dns_speed_ab.sh OUT N egressd=build/tools/egressctl/egressctl \
#     relay=bench/profile/min_relay_serve.sh fresh=bench/profile/fresh_port_relay_serve.sh
# QUERIES_PER_PORT=K (default 1, egressd's) prices a cheaper variant: a new
# socket every K queries; as a build in the same alternation, a wrapper:
#   printf '#!/bin/sh\nQUERIES_PER_PORT=8 exec %s "$@"\n' "$PWD/bench/profile/fresh_port_relay_serve.sh" >/tmp/k8
#   chmod +x /tmp/k8   # then k8=/tmp/k8 beside fresh=...
# Called as `fresh_port_relay_serve.sh dns serve --upstream-dns ADDR` with the
# instance's EGRESSD_RUNTIME_DIR, as min_relay_serve.sh is.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
ep=$("$here/bench/profile/bench_dns_endpoint.sh" fresh_port_relay_serve.sh "$@")
read -r addr port upstream <<<"$ep"
exec "${BUILD_DIR:-$here/build}/bench/egr-min-relay" dns serve --upstream-dns "$upstream" --listen "$addr" --port "$port" \
  --queries-per-port "${QUERIES_PER_PORT:-1}"
