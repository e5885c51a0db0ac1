#!/usr/bin/env bash
# Instructions per query of the DNS proxy's hot path (bench/dns_ir.cc) under
# callgrind: reproducible on a shared machine, where the wall-clock rows of
# `bench/run.sh --only dnsspeed` are not.  Prints, per phase (allowed name,
# wildcard name, local NXDOMAIN), the process's instructions per query (every
# thread: the loop and the audit writer) and the functions that take them.
#   bench/dns_ir.sh [--queries N] [--no-audit] [--per-thread] [--keep DIR]
# --per-thread counts the loop's thread alone in each phase, and prints the
# other threads' (the audit writer, which encodes the lines) over the run.
# EGR_DNS_IR=BINARY runs another build of egr-dns-ir (a before/after pair).
# Needs valgrind and dnsmasq (scripts/install-deps.sh); no root, no BPF.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
queries=2000
extra=()
keep=
threads=()
while (($#)); do
  case $1 in
    --queries)
      if [[ ! ${2:-} =~ ^[1-9][0-9]*$ ]]; then
        echo "bench/dns_ir.sh: --queries takes a positive count (got \"${2:-}\")" >&2
        exit 2
      fi
      queries=$2
      shift
      ;;
    --no-audit) extra+=(--no-audit) ;;
    --per-thread) threads=(--separate-threads=yes) ;;
    --keep) keep=${2:?bench/dns_ir.sh: --keep takes a directory}; shift ;;
    *)
      echo "bench/dns_ir.sh: unknown argument \"$1\" (usage: bench/dns_ir.sh [--queries N] [--no-audit] [--per-thread] [--keep DIR])" >&2
      exit 2
      ;;
  esac
  shift
done
for tool in valgrind callgrind_annotate dnsmasq; do
  command -v "$tool" >/dev/null || { echo "bench/dns_ir.sh: $tool not installed (scripts/install-deps.sh)" >&2; exit 1; }
done
ir=${EGR_DNS_IR:-$build/bench/egr-dns-ir}
if [[ ! -x $ir ]]; then cmake --build "$build" --target egr-dns-ir >/dev/null; fi
dir=${keep:-$(mktemp -d /tmp/egr-dns-ir-XXXXXX)}
mkdir -p "$dir"
dnsmasq_pid=
cleanup() {
  if [[ -n $dnsmasq_pid ]]; then kill "$dnsmasq_pid" 2>/dev/null || true; fi
  if [[ -z $keep ]]; then rm -rf "$dir"; fi
}
trap cleanup EXIT
# The upstream: authoritative for bench.test, no cache, no log, a port of its own.
port=$((30000 + RANDOM % 20000))
dnsmasq --keep-in-foreground --no-resolv --no-hosts --no-daemon --cache-size=0 --port="$port" \
  --listen-address=127.0.0.1 --bind-interfaces --user="$(id -un)" --pid-file= \
  --address=/bench.test/192.0.2.10 >"$dir/dnsmasq.log" 2>&1 &
dnsmasq_pid=$!
for _ in $(seq 50); do
  if dig +time=1 +tries=1 -p "$port" @127.0.0.1 allowed.bench.test >/dev/null 2>&1; then break; fi
  sleep 0.1  # dnsmasq has no ready signal; dig answering is the check
done
valgrind --tool=callgrind "${threads[@]}" --callgrind-out-file="$dir/cg.out" --dump-instr=no \
  "$ir" --upstream "127.0.0.1:$port" --queries "$queries" "${extra[@]}" \
  2>"$dir/valgrind.log" | tee "$dir/stdout.txt"
echo
for f in "$dir"/cg.out.*; do
  label=$(sed -n 's/^desc: Trigger: Client Request: //p' "$f")
  [[ -n $label ]] || continue
  total=$(sed -n 's/^summary: //p;s/^totals: //p' "$f" | head -1)
  printf '%s: %s instructions per query (%s over %s queries)\n' "$label" "$((total / queries))" "$total" "$queries"
  callgrind_annotate --inclusive=yes "$f" 2>/dev/null | awk -v n="$queries" '
    /^-+$/ { sep++ ; next }
    sep >= 3 && NF >= 2 && $1 ~ /^[0-9,]+$/ {
      gsub(",", "", $1); if (++shown > 30) exit
      line = $0; sub(/^[ 0-9,]+\([ 0-9.%]+\) */, "", line); sub(/^[ 0-9,]+ */, "", line)
      printf "  %8d  %s\n", $1 / n, substr(line, 1, 150)
    }' || true  # awk stops reading after 30 lines: callgrind_annotate's SIGPIPE is expected
  echo
done
if ((${#threads[@]})); then
  # Thread 1 is the loop (its phases above); the others' counts are dumped
  # at exit, for all three phases together.
  other=0
  for f in "$dir"/cg.out-*; do
    [[ $f == *-01 ]] && continue
    other=$((other + $(sed -n 's/^summary: //p;s/^totals: //p' "$f" | head -1)))
  done
  printf 'other threads (the audit writer), all phases: %s instructions per query (%s over %s queries)\n' \
    "$((other / (3 * queries)))" "$other" "$((3 * queries))"
fi
echo "bench/dns_ir.sh: callgrind files in $dir${keep:+ (kept)}"
