#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test (unit and privileged)
# through ctest.  REQUIRE_BPF=1: a privileged test that cannot run fails
# instead of skipping.  Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) -ne 0 ]]; then
  echo "test.sh: run as root (the privileged tests load BPF and build namespaces)" >&2
  exit 2
fi
./scripts/install-deps.sh
./scripts/build.sh
# libFuzzer needs clang: a second build tree holding the fuzz targets only; its
# ctest (label fuzz) runs each fuzzer (the policy parsers, the port folding)
# for 20 s on its seed corpus.
cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build build-fuzz --target policy_fuzz allow_entries_fuzz dns_fuzz
(cd build-fuzz && ctest -L fuzz --output-on-failure)
export REQUIRE_BPF=1
cd "${BUILD_DIR:-build}"
ctest --output-on-failure "$@"
