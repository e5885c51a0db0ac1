#!/usr/bin/env bash
# Generates bpf/vmlinux/vmlinux-6.1-amd64.h from the BTF of Debian 12's 6.1
# kernel, the oldest kernel egressd supports and the one vmtests/run.sh boots.
# The BPF objects are compiled against this header, not against the build
# host's kernel, so a type or field that only newer kernels have fails the
# build instead of failing to load on 6.1.
#
#   scripts/gen-vmlinux-h.sh [--deb FILE.deb | --kernel BZIMAGE] [--out FILE]
#
# Without --deb or --kernel: the linux-image-6.1.0-*-amd64 package that
# Debian 12's linux-image-amd64 depends on (what vmtests installs), fetched
# with `apt-get download` into a temporary directory.  The BTF lives in the
# vmlinux ELF compressed inside the bzImage; this finds the compressed payload
# by its magic bytes, decompresses it and keeps the candidate that is an ELF
# with a .BTF section, then dumps that BTF as C with bpftool.
# Exit status: 0 written; 1 a tool or download failed; 2 bad usage, or a
# --deb/--kernel file that is not a Debian 6.1 amd64 kernel (nothing written).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out="$repo/bpf/vmlinux/vmlinux-6.1-amd64.h"
deb="" kernel=""

usage() { sed -n '8,8p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "gen-vmlinux-h: $*" >&2; exit 1; }
# A file the caller named that is not what it should be is bad input (2); the
# same fault in what this script fetched itself is a system failure (1).
given=0
bad_file() { echo "gen-vmlinux-h: $*" >&2; exit $((given ? 2 : 1)); }
while (($#)); do
  case $1 in
    --deb) deb=${2:?--deb takes a .deb file}; shift 2 ;;
    --kernel) kernel=${2:?--kernel takes a bzImage}; shift 2 ;;
    --out) out=${2:?--out takes a file}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; echo "gen-vmlinux-h: unknown argument: $1" >&2; exit 2 ;;
  esac
done
[[ -z $deb && -z $kernel ]] || given=1
if [[ -n $deb && -n $kernel ]]; then
  echo "gen-vmlinux-h: --deb and --kernel exclude each other" >&2; exit 2
fi
for tool in bpftool readelf dpkg-deb; do
  command -v "$tool" >/dev/null || die "$tool not found (bpftool, binutils, dpkg)"
done

work=$(mktemp -d /tmp/egr-vmlinux.XXXXXX)
trap 'rm -rf "$work"' EXIT

# ---- the kernel image and where it came from -----------------------------------------
source_note=""
if [[ -z $kernel ]]; then
  if [[ -z $deb ]]; then
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
          sed -n 's/^ *Depends: \(linux-image-6\.1\.[0-9.]*-[0-9]*-amd64\)$/\1/p' | head -n1)
    [[ -n $pkg ]] || die "linux-image-amd64 does not depend on a linux-image-6.1.*-amd64 here (not Debian 12? run apt-get update)"
    (cd "$work" && apt-get download -q "$pkg" >/dev/null 2>&1) || die "apt-get download $pkg failed"
    deb=$(find "$work" -maxdepth 1 -name "${pkg}_*.deb" | head -n1)
    [[ -n $deb ]] || die "apt-get download $pkg left no .deb in $work"
  fi
  [[ -r $deb ]] || bad_file "$deb not readable"
  pkg_name=$(dpkg-deb -f "$deb" Package 2>/dev/null) || bad_file "$deb is not a Debian package"
  pkg_version=$(dpkg-deb -f "$deb" Version)
  [[ $pkg_name == linux-image-6.1.*-amd64 ]] || bad_file "$deb is ${pkg_name:-no package}, not a Debian 6.1 amd64 kernel"
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work" --wildcards './boot/vmlinuz-*' ||
    bad_file "no ./boot/vmlinuz-* in $deb"
  kernel=$(find "$work/boot" -name 'vmlinuz-*' | head -n1)
  source_note="$pkg_name $pkg_version ($(basename "$deb"), sha256 $(sha256sum "$deb" | cut -d' ' -f1))"
else
  [[ -r $kernel ]] || bad_file "$kernel not readable"
  owner=$(dpkg -S "$(readlink -f "$kernel")" 2>/dev/null | cut -d: -f1 || true)
  if [[ -n $owner ]]; then
    source_note="$owner $(dpkg-query -W -f='${Version}' "$owner") ($kernel)"
  else
    source_note="$kernel (sha256 $(sha256sum "$kernel" | cut -d' ' -f1))"
  fi
fi

# ---- the vmlinux ELF inside the bzImage ----------------------------------------------
# Each compressor the x86 boot code supports, by the magic its stream starts
# with.  Every occurrence is tried: the magic can also appear by chance.
vmlinux="$work/vmlinux"
has_btf() { readelf -S -W "$1" 2>/dev/null | grep -q ' \.BTF '; }
try_payload() {  # offset decompressor...
  local off=$1; shift
  tail -c +"$((off + 1))" "$kernel" | "$@" > "$work/candidate" 2>/dev/null || true
  if [[ -s $work/candidate ]] && has_btf "$work/candidate"; then
    mv "$work/candidate" "$vmlinux"
    return 0
  fi
  return 1
}
found=""
if has_btf "$kernel"; then   # already an uncompressed vmlinux
  cp "$kernel" "$vmlinux"; found="whole file (not compressed)"
fi
while read -r name magic cmd; do
  [[ -z $found ]] || break
  command -v "${cmd%% *}" >/dev/null || continue
  while IFS=: read -r off _; do
    # shellcheck disable=SC2086 # cmd carries its arguments
    if try_payload "$off" $cmd; then found="$name stream at byte $off"; break; fi
  done < <(LC_ALL=C grep -obUaP "$magic" "$kernel" || true)
done <<'EOF'
xz \xfd\x37\x7a\x58\x5a\x00 xz -dc
zstd \x28\xb5\x2f\xfd zstd -dcq
gzip \x1f\x8b\x08 gzip -dc
bzip2 BZh bzip2 -dc
lzma \x5d\x00\x00\x00 xz -dc --format=lzma
lz4 \x02\x21\x4c\x18 lz4 -dcq
lzo \x89\x4c\x5a\x4f lzop -dc
EOF
[[ -n $found ]] || bad_file "found no compressed vmlinux with a .BTF section in $kernel"
release=$(strings -n 12 "$vmlinux" | sed -n 's/^Linux version \([^ ]*\) .*/\1/p' | head -n1)
[[ $release == 6.1.* ]] || bad_file "$kernel holds Linux ${release:-of unknown version}, not 6.1"

# ---- the header ----------------------------------------------------------------------
mkdir -p "$(dirname "$out")"
{
  echo "/* Generated by scripts/gen-vmlinux-h.sh: do not edit."
  echo " * BTF of Linux $release, from $source_note;"
  echo " * the vmlinux ELF is the $found of the kernel image; dumped with"
  echo " * \`bpftool btf dump file vmlinux format c\` ($(bpftool version | head -n1))."
  echo " * Regenerate: scripts/gen-vmlinux-h.sh [--deb FILE | --kernel BZIMAGE] */"
  bpftool btf dump file "$vmlinux" format c
} > "$out.tmp" || die "bpftool btf dump failed"
mv "$out.tmp" "$out"
echo "gen-vmlinux-h: wrote $out (Linux $release, $source_note)"
