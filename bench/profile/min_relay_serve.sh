#!/usr/bin/env bash
# A stand-in for `egressctl dns serve` in the DNS speed rows: runs
# egr-min-relay (bench/min_relay.cc) on the benchmark sandbox's DNS endpoint,
# so bench/profile/dns_speed_ab.sh measures what the proxy hop alone adds:
#   bench/profile/dns_speed_ab.sh OUT N egressd=build/tools/egressctl/egressctl \
#     relay=bench/profile/min_relay_serve.sh
# Called as `min_relay_serve.sh dns serve --upstream-dns ADDR` with the
# instance's EGRESSD_RUNTIME_DIR (bench/dns_rows.cc starts serve that way);
# the endpoint is read from the sandbox record whose cgroup is bench-dns.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
ep=$("$here/bench/profile/bench_dns_endpoint.sh" min_relay_serve.sh "$@")
read -r addr port upstream <<<"$ep"
exec "${BUILD_DIR:-$here/build}/bench/egr-min-relay" dns serve --upstream-dns "$upstream" --listen "$addr" --port "$port"
