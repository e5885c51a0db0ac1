#!/usr/bin/env bash
# Builds localhost/egressd:latest from Debian 12 packages and this build's
# binaries, without a registry: mmdebstrap makes a minbase root filesystem
# holding the Debian packages the binaries link against (found with ldd and
# dpkg -S) plus util-linux (nsenter, mount), coreutils (stat) and publicsuffix
# (read at run time); podman imports it as localhost/egressd-base:bookworm and
# builds deploy/image/Containerfile on it.  Needs: mmdebstrap, podman (Debian
# 12's), a reachable Debian mirror (the one in /etc/apt/sources.list.d).
#
# Cached by its inputs: the image carries a label hashing the binaries, this
# script, the Containerfile and the libraries they load (checked first, in a
# few seconds); the base one hashing mmdebstrap's command line and the packages'
# names and versions (the host's, which the binaries were linked against), so new
# binaries on unchanged packages reuse the root filesystem.  A run whose inputs match rebuilds nothing (CI's priv test
# calls it on every run: tests/priv/image_test.cc).  --force rebuilds both.
#   deploy/image/build.sh [--force] [--base-only] [BUILD_DIR]    (default: build)
# --base-only stops after the root filesystem (localhost/egressd-base:bookworm).
# Exit 2: a missing binary or tool; 1: the mirror or podman failed.
set -euo pipefail
force=0 base_only=0
while [[ ${1:-} == --* ]]; do
  case $1 in
    --force) force=1 ;;
    --base-only) base_only=1 ;;
    *) echo "build.sh: unknown option $1 (--force, --base-only)" >&2; exit 2 ;;
  esac
  shift
done
repo=$(cd "$(dirname "$0")/../.." && pwd)
bdir=${1:-$repo/build}
bins=("$bdir/tools/egressd/egressd" "$bdir/tools/egressctl/egressctl")
for b in "${bins[@]}"; do [[ -x $b ]] || { echo "build.sh: $b missing: run scripts/build.sh" >&2; exit 2; }; done
for t in mmdebstrap podman; do command -v $t >/dev/null || { echo "build.sh: $t missing (scripts/install-deps.sh installs it)" >&2; exit 2; }; done
start=$SECONDS
label() { podman image inspect "$1" --format "{{index .Labels \"$2\"}}" 2>/dev/null || true; }

# The image's inputs, cheaply: the binaries, this script, the Containerfile
# and every shared library the binaries load (path, size, mtime: a package
# upgrade changes them).  Checked before anything costly.
libs=$(for b in "${bins[@]}"; do ldd "$b" | awk '/=>/ {print $3}'; done | sort -u)
key=$( { sha256sum "${bins[@]}" "$0" "$repo/deploy/image/Containerfile" | cut -d' ' -f1
         for l in $libs; do stat -L -c '%n %s %Y' "$l"; done; } | sha256sum | cut -c1-32)
if ((!force && !base_only)) && [[ $(label localhost/egressd:latest org.egressd.inputs) == "$key" ]]; then
  echo "build.sh: localhost/egressd:latest is current (inputs $key), $((SECONDS - start)) s"
  exit 0
fi

# The package of each shared library the binaries load (merged /usr: dpkg
# knows some by their /lib path, some by /usr/lib).
pkgs=(util-linux coreutils mount publicsuffix ca-certificates)
while read -r lib; do
  real=$(readlink -f "$lib")
  p=$(dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}" 2>/dev/null || dpkg -S "$lib" 2>/dev/null || true)
  [[ -n $p ]] || { echo "build.sh: no Debian package holds $lib" >&2; exit 1; }
  pkgs+=("${p%%:*}")
done <<<"$libs"
mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)

work=$(mktemp -d /tmp/egressd-image.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The root filesystem's inputs: mmdebstrap's command line and the packages'
# versions (bump the "v2" when what is done to the tree changes).
# What makes it fast (from nothing: 135-161 s beside a ninja -j2 on the 2-core
# development machine, where the defaults took 181 s on a quiet disk and
# 835-1068 s on a busy one): dpkg's fsync after every file was nearly all of
# mmdebstrap's time, so dpkg runs with force-unsafe-io and the tree is built
# on a tmpfs (mounted in a private mount namespace, gone when mmdebstrap
# exits: nothing on the machine changes) and written out once as a tar.  The
# documentation, man pages and translations are not unpacked (the copyright
# files are), as in Debian's slim images.  The downloads (about 43 MB) take
# seconds, so the host's apt cache is not used (it held 18 of the 108: the
# rest came with the machine's own image, not through apt).  Both dpkg options stay in the
# image's /etc/dpkg/dpkg.cfg.d/99mmdebstrap, so a later apt-get in it behaves
# the same.
mm=(mmdebstrap --quiet --mode=root --variant=minbase --include="$(IFS=,; echo "${pkgs[*]}")"
    --dpkgopt=force-unsafe-io
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias'
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' bookworm)
base_key=$( { echo v2 "${mm[@]}"; dpkg-query -W -f='${Package}=${Version}\n' "${pkgs[@]}"; } | sha256sum | cut -c1-32)
if ((force)) || [[ $(label localhost/egressd-base:bookworm org.egressd.inputs) != "$base_key" ]]; then
  echo "build.sh: rootfs with ${pkgs[*]}"
  base_start=$SECONDS
  mkdir "$work/chroot"
  # shellcheck disable=SC2016 # $0 and $@ are the inner shell's
  if ! unshare --mount --propagation private -- sh -ec \
      'mount -t tmpfs -o size=2g,mode=0755 egressd-image "$0"; TMPDIR=$0 exec "$@"' \
      "$work/chroot" "${mm[@]}" "$work/rootfs.tar" 2>"$work/mmdebstrap.err"; then
    cat "$work/mmdebstrap.err" >&2
    echo "build.sh: mmdebstrap could not make the root filesystem from the Debian mirror (above); no image built" >&2
    exit 1
  fi
  podman import --quiet --change "LABEL org.egressd.inputs=$base_key" "$work/rootfs.tar" \
    localhost/egressd-base:bookworm >/dev/null
  echo "build.sh: localhost/egressd-base:bookworm built in $((SECONDS - base_start)) s"
  ((!base_only)) || exit 0
else
  echo "build.sh: localhost/egressd-base:bookworm is current (inputs $base_key)"
  ((!base_only)) || exit 0
fi

cp "${bins[@]}" "$repo/deploy/image/Containerfile" "$work/"
strip --strip-debug "$work/egressd" "$work/egressctl"
podman build --quiet --pull=never --label "org.egressd.inputs=$key" -t localhost/egressd:latest \
  -f "$work/Containerfile" "$work" >/dev/null
podman image inspect localhost/egressd:latest --format "build.sh: {{.Id}} {{.Size}} bytes, inputs $key, $((SECONDS - start)) s"
