# Sourced by the interleaved A/B scripts (dns_speed_ab.sh, dns_rows_ab.sh):
# the alternation they share.
#   ab_alternate OUT N RUN NAME=BINARY...
# writes OUT/NAME-serve for each build (an EGR_BENCH_SERVE_PREFIX wrapper:
# it drops the `egressctl` bench/dns_rows.cc passes and runs BINARY with the
# rest), then N alternations of every build in turn, each a call of RUN with
# BENCH_OUT=OUT/NAME-I and EGR_BENCH_SERVE_PREFIX=OUT/NAME-serve in its
# environment and its output in OUT/NAME-I.log; the time and load of each
# go to OUT/log. A failed run is reported and the alternation goes on.
# Run from the repository's root.
ab_alternate() {
  local out=$1 n=$2 run=$3 v name bin i
  shift 3
  mkdir -p "$out"
  for v in "$@"; do
    name=${v%%=*} bin=${v#*=}
    printf '#!/bin/sh\nshift\nexec %q "$@"\n' "$bin" >"$out/$name-serve"
    chmod +x "$out/$name-serve"
  done
  for ((i = 1; i <= n; i++)); do
    for v in "$@"; do
      name=${v%%=*}
      echo "$(date +%T) $name $i load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/log"
      BENCH_OUT=$out/$name-$i EGR_BENCH_SERVE_PREFIX=$out/$name-serve "$run" >"$out/$name-$i.log" 2>&1 ||
        echo "run $name $i failed: $out/$name-$i.log" >&2
    done
  done
}
