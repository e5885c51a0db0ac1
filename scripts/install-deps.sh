#!/usr/bin/env bash
# Installs everything egressd needs to build and test, from Debian 12's packages only.
# Idempotent: a second run installs nothing and takes a second.
set -euo pipefail

packages=(
  # build
  cmake ninja-build g++ clang llvm pkg-config make
  libbpf-dev bpftool linux-libc-dev
  libabsl-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
  libcli11-dev nlohmann-json3-dev libyaml-cpp-dev libc-ares-dev liburing-dev
  libelf-dev zlib1g-dev
  # lab and tests
  iproute2 nftables dnsmasq-base util-linux procps iputils-ping tcpdump
  # policy compiler: YAML, IDN, the public suffix list (read at run time);
  # libFuzzer for tests/fuzz (only Recommended by clang, so not pulled in)
  libyaml-dev libidn2-dev publicsuffix libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all ${#packages[@]} packages present"
fi
