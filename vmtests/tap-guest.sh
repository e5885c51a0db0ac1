#!/usr/bin/env bash
# Packs the initramfs of the guest that tests/priv/guest_tap_test boots behind a
# tap in a lab pod (a VM runtime's guest kernel, in Kata's "tcfilter" network
# model): busybox, vmtests/tap-guest-init.sh as /init, the ELFs given (with
# their libraries) in /usr/bin, and virtio_net with what it needs from the
# kernel's modules.  The kernel is vmtests/run.sh's: Debian 12's newest 6.1.
#
#   vmtests/tap-guest.sh --out DIR [--kernel PATH] [--bin ELF]...
#
# Writes DIR/initramfs.cpio and prints "kernel=PATH" and "release=RELEASE".
# Exit status: 0 packed; 2 bad usage; 3 something to install (qemu, the
# kernel, busybox-static: the message names the package; scripts/install-deps.sh
# and vmtests/run.sh --install-only install them); 1 packing failed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=vmtests/lib.sh
. "$here/lib.sh"

die() { echo "tap-guest: $1" >&2; exit "${2:-1}"; }
missing() { die "$1 (scripts/install-deps.sh or vmtests/run.sh --install-only installs it)" 3; }

out="" kernel="" bins=()
while (($#)); do
  case $1 in
    --out) out=${2:?}; shift 2 ;;
    --kernel) kernel=${2:?}; shift 2 ;;
    --bin) bins+=("${2:?}"); shift 2 ;;
    *) die "unknown argument: $1 (usage: --out DIR [--kernel PATH] [--bin ELF]...)" 2 ;;
  esac
done
[[ -n $out && -d $out ]] || die "--out DIR: an existing directory (got \"$out\")" 2
for b in "${bins[@]}"; do [[ -x $b ]] || die "--bin \"$b\": not an executable" 2; done

command -v qemu-system-x86_64 >/dev/null || missing "qemu-system-x86_64 not found: install qemu-system-x86"
[[ -x /bin/busybox ]] || missing "/bin/busybox not found: install busybox-static"
for t in cpio ldd modprobe depmod file; do command -v "$t" >/dev/null || die "$t not found" 3; done
if [[ -z $kernel ]]; then
  kernel=$(vm_default_kernel)
  [[ -n $kernel ]] || missing "no /boot/vmlinuz-6.1.0-*-amd64: install linux-image-amd64 (INITRD=No)"
fi
[[ -r $kernel ]] || die "--kernel \"$kernel\": not readable" 2
release=$(vm_kernel_release "$kernel") || die "cannot tell the release of $kernel"
modules=/lib/modules/$release
[[ -d $modules/kernel ]] || missing "no modules in $modules: reinstall linux-image-$release"

root=$(mktemp -d "$out/root.XXXXXX")
trap 'rm -rf "$root"' EXIT
vm_root_skeleton "$root"
elfs=()
for b in "${bins[@]}"; do
  strip --strip-debug -o "$root/usr/bin/$(basename "$b")" "$b"
  elfs+=("$root/usr/bin/$(basename "$b")")
done
((${#elfs[@]} == 0)) || vm_pack_libs "$root" "${elfs[@]}"
vm_pack_busybox "$root" || exit 3
# virtio-net-pci: the PCI transport and the NIC (and net_failover, failover).
vm_pack_modules "$root" "$modules" "$release" virtio_pci virtio_net > "$root/modules.order" || exit 1
install -m 755 "$here/tap-guest-init.sh" "$root/init"
vm_cpio "$root" "$out/initramfs.cpio"
echo "kernel=$kernel"
echo "release=$release"
