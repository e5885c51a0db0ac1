#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: installs, builds, builds the
# built-in lab (network namespaces; nothing leaves this machine), runs
# sandboxed commands under several policies and shows what was allowed and
# denied, then removes everything it made.  Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) -ne 0 ]]; then
  echo "demo.sh: run as root (it loads BPF programs and builds namespaces)" >&2
  exit 2
fi
./scripts/install-deps.sh
./scripts/build.sh
exec "${BUILD_DIR:-build}/tools/demo/egressd-demo"
