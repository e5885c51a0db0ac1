#!/usr/bin/env bash
# Builds localhost/egressd:latest from Debian 12 packages and this build's
# binaries, without a registry: mmdebstrap makes a minbase root filesystem
# holding the Debian packages the binaries link against (found with ldd and
# dpkg -S) plus util-linux (nsenter, mount), coreutils (stat) and publicsuffix
# (read at run time); podman imports it as localhost/egressd-base:bookworm and
# builds deploy/image/Containerfile on it.  Needs: mmdebstrap, podman (Debian
# 12's), a reachable Debian mirror (the one in /etc/apt/sources.list.d).
#   deploy/image/build.sh [BUILD_DIR]    (default: build)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bdir=${1:-$repo/build}
bins=("$bdir/tools/egressd/egressd" "$bdir/tools/egressctl/egressctl")
for b in "${bins[@]}"; do [[ -x $b ]] || { echo "build.sh: $b missing: run scripts/build.sh" >&2; exit 2; }; done
for t in mmdebstrap podman; do command -v $t >/dev/null || { echo "build.sh: $t missing (apt-get install $t)" >&2; exit 2; }; done

# The package of each shared library the binaries load (merged /usr: dpkg
# knows some by their /lib path, some by /usr/lib).
pkgs=(util-linux coreutils mount publicsuffix ca-certificates)
while read -r lib; do
  real=$(readlink -f "$lib")
  p=$(dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}" 2>/dev/null || dpkg -S "$lib" 2>/dev/null || true)
  [[ -n $p ]] || { echo "build.sh: no Debian package holds $lib" >&2; exit 1; }
  pkgs+=("${p%%:*}")
done < <(for b in "${bins[@]}"; do ldd "$b" | awk '/=>/ {print $3}'; done | sort -u)
mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)

work=$(mktemp -d /tmp/egressd-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "build.sh: rootfs with ${pkgs[*]}"
mmdebstrap --quiet --variant=minbase --include="$(IFS=,; echo "${pkgs[*]}")" \
  --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
  bookworm "$work/rootfs.tar"
podman import --quiet "$work/rootfs.tar" localhost/egressd-base:bookworm >/dev/null
cp "${bins[@]}" "$repo/deploy/image/Containerfile" "$work/"
strip --strip-debug "$work/egressd" "$work/egressctl"
podman build --quiet --pull=never -t localhost/egressd:latest -f "$work/Containerfile" "$work"
podman image inspect localhost/egressd:latest --format 'build.sh: {{.Id}} {{.Size}} bytes'
