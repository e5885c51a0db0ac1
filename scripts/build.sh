#!/usr/bin/env bash
# Configures and builds egressd into ./build (or $BUILD_DIR).
#   scripts/build.sh                   everything
#   scripts/build.sh TARGET...         only those targets (and what they need)
#   scripts/build.sh --configure-only  configure, build nothing
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
configure_only=0
if [[ ${1:-} == --configure-only ]]; then configure_only=1; shift; fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} >/dev/null
((configure_only == 0)) || exit 0
if (($#)); then
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target "$@"
else
  cmake --build "$BUILD_DIR" -j"$(nproc)"
fi
