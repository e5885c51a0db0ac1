#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test (unit and privileged)
# through ctest.  REQUIRE_BPF=1: a privileged test that cannot run fails
# instead of skipping.  Run as root.
#
# ctest runs -j2 (CTEST_PARALLEL_LEVEL overrides): the unit tests two at a
# time; every privileged test is RUN_SERIAL, so it still runs alone.
# TEST_SKIP_INSTALL=1 / TEST_SKIP_BUILD=1 skip those steps (.ci/run did them);
# each step's seconds are printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) -ne 0 ]]; then
  echo "test.sh: run as root (the privileged tests load BPF and build namespaces)" >&2
  exit 2
fi
steps=()
step() {  # step NAME COMMAND...: runs it, keeps its seconds
  local name=$1 t=$SECONDS
  shift
  "$@"
  steps+=("$name $((SECONDS - t))s")
}
report() { ((${#steps[@]} == 0)) || echo "test.sh: steps: ${steps[*]}"; }
trap report EXIT
[[ ${TEST_SKIP_INSTALL:-0} == 1 ]] || step install ./scripts/install-deps.sh
[[ ${TEST_SKIP_BUILD:-0} == 1 ]] || step build ./scripts/build.sh
# libFuzzer needs clang: a second build tree holding the fuzz targets only; its
# ctest (label fuzz) runs each fuzzer (the policy parsers, the port folding)
# for 20 s on its seed corpus, two at a time.
fuzz_build() {
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
  cmake --build build-fuzz --target policy_fuzz allow_entries_fuzz dns_fuzz
}
step fuzz-build fuzz_build
step fuzz bash -c 'cd build-fuzz && ctest -j2 -L fuzz --output-on-failure'
export REQUIRE_BPF=1
cd "${BUILD_DIR:-build}"
step ctest ctest -j"${CTEST_PARALLEL_LEVEL:-2}" --output-on-failure "$@"
