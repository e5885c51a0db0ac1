# Shared by the scripts that boot Debian 12's 6.1 kernel under qemu with an
# initramfs of their own: vmtests/run.sh (the priv suite in a guest) and
# vmtests/tap-guest.sh (the guest behind a tap of tests/priv/guest_tap_test).
# Sourced, never run; bash.  Each function reports its failure on stderr and
# returns non-zero: the caller decides how to die.

# The kernel both boot by default: Debian 12's newest 6.1 (linux-image-amd64
# pulls it; vmtests/run.sh --install-only installs it), or nothing.
vm_default_kernel() {
  find /boot -maxdepth 1 -name 'vmlinuz-6.1.0-*-amd64' | sort -V | tail -n1
}

# vm_kernel_release KERNEL: its release (uname -r), from the bzImage's header,
# else from the file name.
vm_kernel_release() {
  local r
  r=$(file -bL "$1" | sed -n 's/.*, version \([^ ]*\) .*/\1/p')
  [[ -n $r ]] || r=$(basename "$1" | sed -n 's/^vmlinuz-//p')
  [[ -n $r ]] || { echo "cannot tell the release of $1 (is it a bzImage?)" >&2; return 1; }
  echo "$r"
}

# vm_root_skeleton ROOT: a merged-/usr root with /dev/console and /dev/null
# (the kernel opens the initramfs's /dev/console for init).
vm_root_skeleton() {
  local root=$1
  mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib,usr/lib64,etc,proc,sys,dev,run,tmp,root}
  ln -s usr/bin "$root/bin"; ln -s usr/sbin "$root/sbin"
  ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"
  mknod -m 600 "$root/dev/console" c 5 1
  mknod -m 666 "$root/dev/null" c 1 3
}

# vm_pack_libs ROOT ELF...: the shared libraries the ELFs need (ldd's
# closure), at the paths the loader looks in, and ROOT's ld.so.cache.
vm_pack_libs() {
  local root=$1 l libs
  shift
  libs=$(for e in "$@"; do ldd "$e" 2>/dev/null || true; done |
    awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }' | sort -u)
  for l in $libs; do
    [[ -e $root$l ]] && continue
    mkdir -p "$(dirname "$root$l")"
    cp -L "$l" "$root$l"
  done
  echo /usr/lib/x86_64-linux-gnu > "$root/etc/ld.so.conf"
  ldconfig -r "$root" 2>/dev/null || true
}

# vm_pack_busybox ROOT: busybox-static, and a link for every applet ROOT has
# no real tool for.
vm_pack_busybox() {
  local root=$1 a
  [[ -x /bin/busybox ]] || { echo "/bin/busybox not found (install busybox-static)" >&2; return 1; }
  cp /bin/busybox "$root/usr/bin/busybox"
  for a in $(/bin/busybox --list); do
    [[ -e $root/usr/bin/$a || -e $root/usr/sbin/$a ]] || ln -s busybox "$root/usr/bin/$a"
  done
}

# vm_pack_modules ROOT MODULES_DIR RELEASE MODULE...: the modules, with their
# dependencies and soft dependencies in load order (modprobe -D), decompressed
# into ROOT/lib/modules/RELEASE, and a modules.dep there so the guest's kernel
# can load more of them on demand.  Prints the load order, one
# "<path under lib/modules/RELEASE> [options]" a line, for the guest's insmod.
vm_pack_modules() {
  local root=$1 modules=${2%/} release=$3 mod_base m
  shift 3
  mod_base=${modules%/lib/modules/"$release"}
  local -A seen=()
  for m in "$@"; do
    modprobe -d "${mod_base:-/}" -S "$release" --show-depends "$m" ||
      { echo "module $m not found for $release in $modules" >&2; return 1; }
  done > "$root/.modprobe-D" || return 1
  local verb path opts rel q
  while read -r verb path opts; do
    [[ $verb == insmod && -z ${seen[$path]:-} ]] || continue
    seen[$path]=1
    [[ $path != //* ]] || path=${path#/}   # modprobe -d / prints //lib/modules/...
    rel=${path#"$modules"/}
    case $rel in
      *.ko) q=$rel ;;
      *.ko.xz) q=${rel%.xz} ;;
      *.ko.zst) q=${rel%.zst} ;;
      *.ko.gz) q=${rel%.gz} ;;
      *) echo "unknown module format: $path" >&2; return 1 ;;
    esac
    mkdir -p "$(dirname "$root/lib/modules/$release/$q")"
    case $rel in
      *.ko) cp "$path" "$root/lib/modules/$release/$q" ;;
      *.ko.xz) xz -dc "$path" > "$root/lib/modules/$release/$q" ;;
      *.ko.zst) zstd -qdc "$path" > "$root/lib/modules/$release/$q" ;;
      *.ko.gz) gzip -dc "$path" > "$root/lib/modules/$release/$q" ;;
    esac
    echo "$q${opts:+ $opts}"
  done < "$root/.modprobe-D"
  rm -f "$root/.modprobe-D"
  cp "$modules"/modules.builtin* "$root/lib/modules/$release/" 2>/dev/null || true
  depmod -b "$root" "$release" 2>/dev/null || true
}

# vm_cpio ROOT OUT: ROOT as a newc archive owned by root (the kernel's
# initramfs format).
vm_cpio() {
  (cd "$1" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) > "$2"
}
