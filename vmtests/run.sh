#!/usr/bin/env bash
# Runs egressd's privileged test suite on another kernel: Debian 12's 6.1 by
# default, or any bzImage given with --kernel.  Builds an initramfs holding
# the test binaries (with their libraries), bpftool, iproute2, util-linux,
# nftables, dnsmasq, busybox and the kernel modules the lab needs, boots it
# under qemu (KVM where present, otherwise TCG software emulation), and exits
# with the suite's result read from markers on the guest's serial console.
#
#   vmtests/run.sh [--kernel PATH [--modules DIR]] [--suite GTEST_FILTER]
#                  [--tests "BIN..."] [--timeout SECS] [--accel auto|kvm|tcg]
#                  [--cgroup-mount /sys/fs/cgroup[/NAME]] [--mem SIZE] [--smp N]
#                  [--append KERNEL_ARGS] [--guests auto|N] [--no-build] [--no-install]
#                  [--install-only] [--keep] [--quiet] [--print-targets]
#
# --guests N splits the binaries over N guests booted side by side (each -smp,
# -m as given), balanced by vmtests/weights; auto: 3 where the host has 2+
# CPUs and the memory for three (else 2, else 1).  Under TCG the guests are
# CPU-bound (about one of each guest's two vCPUs busy: the summary's cpu=);
# three keep 2 host CPUs busy where one binary waits.  The cases listed in
# vmtests/host-only are left to the host under TCG (load figures, which
# emulation cannot give).  --install-only installs the host packages and exits.
# --print-targets prints the build targets the guests need (every priv test and
# the binaries they run), one a line, from a configured build/, and exits: .ci/run
# builds those first and boots the guests while the rest compiles.
# The console log stays in build/vmtests/<kernel release>/console.log (with
# several guests: console-gN.log each, and console.log their concatenation).
# Exit status: 0 all tests passed; 1 a test failed, or the guest crashed, hung
# or never reported (the log path is printed); 2 bad usage or setup.
# Run as root (installs Debian packages; packs device nodes).  See docs/kernels.md.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
here="$repo/vmtests"
# shellcheck source=vmtests/lib.sh
. "$here/lib.sh"

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "vmtests: $*" >&2; exit 2; }
log() { [[ $quiet == 1 ]] || echo "vmtests: $*"; }

append="" cgmount=/sys/fs/cgroup accel=auto kernel="" modules="" suite="" timeout_s=2400 mem=2G smp=2 build=1 install=1 keep=0 quiet=0
guests=auto install_only=0 print_targets=0
tests=""
while (($#)); do
  case $1 in
    --kernel) kernel=${2:?}; shift 2 ;;
    --modules) modules=${2:?}; shift 2 ;;
    --suite) suite=${2:?}; shift 2 ;;
    --tests) tests=${2:?}; shift 2 ;;
    --timeout) timeout_s=${2:?}; shift 2 ;;
    --cgroup-mount) cgmount=${2:?}; shift 2 ;;
    --append) append=${2:?}; shift 2 ;;
    --accel) accel=${2:?}; shift 2 ;;
    --mem) mem=${2:?}; shift 2 ;;
    --smp) smp=${2:?}; shift 2 ;;
    --no-build) build=0; shift ;;
    --no-install) install=0; shift ;;
    --install-only) install_only=1; shift ;;
    --print-targets) print_targets=1; shift ;;
    --guests) guests=${2:?}; shift 2 ;;
    --keep) keep=1; shift ;;
    --quiet) quiet=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
# The binaries the priv tests run, beside the tests themselves (build/<dir>/<name>,
# each its own CMake target).
helper_bins=(tests/lab/egressd-probe tools/egressctl/egressctl tools/egressd/egressd
             tests/priv/egr-lock-holder tests/priv/egr-dns-ask tests/lab/egr-dns-attack
             tests/priv/egr-mesh-proxy bench/egr-nft-forwarder
             bench/egr-dns-load   # daemon_handover_test's open-loop load
             tests/lab/egr-churn-dns)  # dns_churn_test (issue 12's bounds)
list_priv_tests() {  # list_priv_tests BUILD_DIR: every ctest test labelled priv
  (cd "$1" && ctest -N -L priv 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: \([^ ]*\).*/\1/p')
}
if [[ $print_targets == 1 ]]; then
  bdir="${BUILD_DIR:-$repo/build}"
  [[ $bdir == /* ]] || bdir="$repo/$bdir"
  mapfile -t priv_tests < <(list_priv_tests "$bdir")
  ((${#priv_tests[@]})) || die "no ctest tests labelled priv in $bdir: configure it first (cmake -S . -B build)"
  printf '%s\n' "${priv_tests[@]}"
  for b in "${helper_bins[@]}"; do basename "$b"; done
  exit 0
fi
[[ $(id -u) -eq 0 ]] || die "run as root (installs packages, makes device nodes for the initramfs)"
[[ $timeout_s =~ ^[0-9]+$ ]] || die "--timeout takes seconds"
[[ $accel =~ ^(auto|kvm|tcg)$ ]] || die "--accel takes auto, kvm or tcg"
[[ $guests =~ ^(auto|[1-9])$ ]] || die "--guests takes auto or 1-9"
[[ $cgmount =~ ^/sys/fs/cgroup(/[A-Za-z0-9._-]+)?$ ]] || die "--cgroup-mount: /sys/fs/cgroup or /sys/fs/cgroup/NAME"
# Seconds a guest's console may stay silent before the first line of our init
# script: a hang, not a slow boot (TCG: ~60 s of wall to that line on a quiet
# host; beside a build, at nice 10, over 180 s on 2026-12-07 while it printed).
boot_timeout=${VMTESTS_BOOT_TIMEOUT:-180}
[[ $boot_timeout =~ ^[1-9][0-9]*$ ]] || die "VMTESTS_BOOT_TIMEOUT takes seconds (>= 1), not '$boot_timeout'"

# KVM where it works: /dev/kvm alone is not enough (on a nested VM without
# vmx/svm it opens, and the guest never leaves the BIOS).
if [[ $accel == auto ]]; then
  accel=tcg
  if [[ -r /dev/kvm && -w /dev/kvm ]] && grep -qwE 'vmx|svm' /proc/cpuinfo; then accel=kvm; fi
fi
case $accel in
  kvm) accel_args=(-accel kvm -accel tcg); accel_note="kvm (tcg if kvm fails)" ;;
  tcg) accel_args=(-accel tcg); accel_note="tcg (software emulation)" ;;
esac

t_start=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# ---- packages (idempotent: a second run installs nothing) ---------------------------
ensure_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
if [[ $install == 1 ]]; then
  # Host side: qemu, busybox for the guest's userland, the tools copied into it.
  ensure_packages qemu-system-x86 busybox-static cpio binutils file coreutils \
    bpftool iproute2 util-linux mount nftables dnsmasq-base bind9-dnsutils kmod xz-utils \
    tcpdump iputils-ping nmap
  # The default kernel: Debian 12's current 6.1 (the metapackage pulls it).
  # INITRD=No: the kernel's postinst skips update-initramfs (this script packs
  # its own initramfs; Debian's, for a kernel nobody boots here, cost CI time).
  [[ -n $kernel ]] || INITRD=No ensure_packages linux-image-amd64
fi
if [[ $install_only == 1 ]]; then log "packages installed"; exit 0; fi
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found (drop --no-install?)"
[[ -x /bin/busybox ]] || die "/bin/busybox not found (busybox-static)"

# ---- kernel and its modules ----------------------------------------------------------
if [[ -z $kernel ]]; then
  kernel=$(vm_default_kernel)
  [[ -n $kernel ]] || die "no /boot/vmlinuz-6.1.0-*-amd64 (apt-get install linux-image-amd64)"
fi
[[ -r $kernel ]] || die "kernel $kernel not readable"
release=$(vm_kernel_release "$kernel") || die "cannot tell the release of $kernel"
modules=${modules:-/lib/modules/$release}
modules=${modules%/}
[[ -d $modules/kernel ]] || die "no modules in $modules: pass --modules DIR (the kernel's /lib/modules/<release>)"
[[ $modules == */lib/modules/$release ]] || die "--modules must be <dir>/lib/modules/$release"
mod_base=${modules%/lib/modules/"$release"}
if [[ ! -f $modules/modules.dep ]]; then   # a .deb unpacked with dpkg-deb -x
  log "no modules.dep in $modules: running depmod -b ${mod_base:-/} $release"
  depmod -b "${mod_base:-/}" "$release" || die "depmod failed for $modules"
fi

out="${BUILD_DIR:-$repo/build}"
[[ $out == /* ]] || out="$repo/$out"
out="$out/vmtests/$release"
mkdir -p "$out"
exec 9>"$out/.lock"
flock -n 9 || die "another vmtests run for $release holds $out/.lock"
console="$out/console.log"
summary="$out/summary.txt"
rm -f "$console" "$summary"

# ---- the binaries under test ---------------------------------------------------------
bdir="${BUILD_DIR:-$repo/build}"
[[ $bdir == /* ]] || bdir="$repo/$bdir"
if [[ $build == 1 ]]; then
  log "building ($bdir)"
  BUILD_DIR="$bdir" "$repo/scripts/build.sh" >/dev/null
fi
# The suite: every ctest test labelled priv (one binary each), the same list the
# host runs; --tests narrows it.  Plus the binaries they run.
mapfile -t priv_tests < <(list_priv_tests "$bdir")
((${#priv_tests[@]})) || die "no ctest tests labelled priv in $bdir: run scripts/build.sh"
project_bins=()
for t in "${priv_tests[@]}"; do
  b=$(find "$bdir/tests" "$bdir/bench" -type f -name "$t" -perm -u+x | head -n1)
  [[ -n $b ]] || die "$t: no binary under $bdir/tests or $bdir/bench: run scripts/build.sh"
  project_bins+=("$b")
done
for b in "${helper_bins[@]}"; do project_bins+=("$bdir/$b"); done
for b in "${project_bins[@]}"; do [[ -x $b ]] || die "$b missing: run scripts/build.sh"; done
# differential_test compares egressd with the nftables rendering through a
# python3 listener, which this initramfs does not carry (python3 and its
# library are larger than the rest of it): it runs on the host's kernel only.
if [[ -z $tests ]]; then
  for t in "${priv_tests[@]}"; do [[ $t == differential_test ]] || tests+="${tests:+ }$t"; done
fi
for t in $tests; do
  [[ " ${priv_tests[*]} " == *" $t "* ]] || die "--tests: $t is not a priv test (${priv_tests[*]})"
done

# ---- guests ----------------------------------------------------------------------------
# How many: auto is 3 on a host with 2+ CPUs whose available memory holds three
# guests (plus 1 GiB for the host), else 2 where it holds two, else 1.  Three on
# two CPUs: under TCG a guest's vCPU is idle about half the time (its tests wait
# on timers, dig's timeouts, the lab's servers), so a third guest fills it.
if [[ $mem =~ ^[0-9]+$ ]]; then mem_mib=$mem   # qemu's -m without a suffix is MiB
else mem_mib=$(($(numfmt --from=iec "${mem%B}" 2>/dev/null || echo 0) / 1048576)); fi
if [[ $guests == auto ]]; then
  avail_mib=$(awk '$1 == "MemAvailable:" { print int($2 / 1024) }' /proc/meminfo)
  guests=1
  if (($(nproc) >= 2 && avail_mib >= 2 * mem_mib + 1024)); then guests=2; fi
  if (($(nproc) >= 2 && avail_mib >= 3 * mem_mib + 1024)); then guests=3; fi
fi
n_tests=$(wc -w <<<"$tests")
((guests <= n_tests)) || guests=$((n_tests > 0 ? n_tests : 1))
# Longest first onto the least loaded guest, by the seconds each binary took in
# a 6.1 guest under TCG (vmtests/weights; a binary not listed counts 60 s).
# Each guest keeps the suite's order.
declare -A weight=()
if [[ -r $here/weights ]]; then
  while read -r w_name w_secs _; do
    [[ $w_name == \#* || -z $w_name ]] || weight[$w_name]=$w_secs
  done < "$here/weights"
fi
declare -A guest_of=()
load=()
for ((g = 1; g <= guests; g++)); do load[g]=0; done
while read -r w t; do
  best=1
  for ((g = 2; g <= guests; g++)); do ((load[g] < load[best])) && best=$g; done
  guest_of[$t]=$best
  load[best]=$((load[best] + w))
done < <(for t in $tests; do echo "${weight[$t]:-60} $t"; done | sort -k1,1nr -k2)
guest_tests=()
for ((g = 1; g <= guests; g++)); do
  guest_tests[g]=""
  for t in $tests; do
    [[ ${guest_of[$t]} == "$g" ]] && guest_tests[g]+="${guest_tests[g]:+ }$t"
  done
done

stage=$(mktemp -d /tmp/egr-vmtests.XXXXXX)
qemu_pids=()
cleanup() {
  local p
  for p in "${qemu_pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  if [[ $keep == 1 ]]; then echo "vmtests: kept $stage" >&2; else rm -rf "$stage"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
root="$stage/root"

# ---- initramfs -----------------------------------------------------------------------
t_pack=$(date +%s.%N)
vm_root_skeleton "$root"
mkdir -p "$root"/{opt/egressd/bin,vmtest,mnt}
mkdir -p "$root/var/tmp"; ln -s ../run "$root/var/run"

# Project binaries: a private copy (another build may be writing build/), debug info
# stripped (symbols kept for backtraces) so the initramfs stays small.
elfs=()
for b in "${project_bins[@]}"; do
  dst="$root/opt/egressd/bin/$(basename "$b")"
  strip --strip-debug -o "$dst" "$b"
  elfs+=("$dst")
done

# Host tools, at the path they have here (real util-linux beats busybox's applets).
# tcpdump, ping and nmap: tests/priv/raw_tools_test's positive controls; dig:
# tests/priv/dns_redirect_test's client; getent: its glibc client (hosts: files dns);
# kdig: tests/priv/dns_attack_test's DoT/DoH client; promtool: audit_test's metrics check.
host_tools=(bpftool ip tc nft dnsmasq dig getent setpriv nsenter unshare mount umount tcpdump ping nmap kdig promtool)
host_tools+=(curl)  # daemon_endpoints_test: the /metrics scrape and the sandboxed API caller
host_tools+=(ss)    # daemon_handover_kill_test: the queries waiting in the proxy's socket (Recv-Q)
for tool in "${host_tools[@]}"; do
  src=$(command -v "$tool") || die "$tool not found on the host"
  src=$(readlink -f "$src")
  dst="$root/usr/${src#/usr/}"
  [[ $src == /usr/* ]] || dst="$root$src"
  mkdir -p "$(dirname "$dst")"
  cp -L "$src" "$dst"
  elfs+=("$dst")
done

# nmap's tables for a SYN scan of one port (not the OS or service databases).
mkdir -p "$root/usr/share/nmap"
cp /usr/share/nmap/{nmap-services,nmap-protocols,nmap-payloads} "$root/usr/share/nmap/"
# The public suffix list egressctl reads for a wildcard (audit suggest, policy
# warnings): Debian's publicsuffix package, as on a node.
mkdir -p "$root/usr/share/publicsuffix"
cp /usr/share/publicsuffix/public_suffix_list.dat "$root/usr/share/publicsuffix/"

# Their shared libraries (ldd's closure), at the paths the loader looks in.
vm_pack_libs "$root" "${elfs[@]}"

# Busybox for everything else (sh, init, insmod, timeout, ...).
vm_pack_busybox "$root" || die "busybox"
ln -s usr/bin/busybox "$root/init"   # busybox's init applet, with our inittab

cat > "$root/etc/inittab" <<'EOF'
::sysinit:/vmtest/guest-init.sh
::once:/bin/poweroff -f
EOF
cat > "$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
dnsmasq:x:100:65534:dnsmasq:/nonexistent:/bin/false
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$root/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' > "$root/etc/hosts"
printf '# no resolver in the test VM\n' > "$root/etc/resolv.conf"
: > "$root/etc/fstab"
mkdir -p "$root/etc/iproute2"

# Kernel modules: the lab's veth, plus what tc and nftables tests load, with
# their dependencies and soft dependencies in load order (modprobe -D), and a
# modules.dep for the guest so the kernel can load more of these on demand.
want_modules=(veth dummy sch_ingress cls_bpf nf_tables nft_reject_inet nft_ct nft_chain_nat nft_nat nft_redir)
vm_pack_modules "$root" "$modules" "$release" "${want_modules[@]}" > "$root/vmtest/modules.order" ||
  die "packing the modules of $release from $modules failed"
[[ -s $root/vmtest/modules.order ]] || die "no modules packed"

install -m 755 "$here/guest-init.sh" "$root/vmtest/guest-init.sh"
initrd="$stage/initramfs.cpio"
vm_cpio "$root" "$initrd"

# The guest's configuration, one per guest: a second cpio archive appended to
# the common one (the kernel unpacks both, in order).  The marker carries a
# per-run nonce, so no test output can forge a result.
mark="EGRESSD-VMTEST-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
sq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
# Under TCG the cases of vmtests/host-only are left to the host (see that
# file): they go into the filter as negative patterns.
guest_filter=$suite
host_only=()
if [[ $accel != kvm ]]; then
  mapfile -t host_only < <(awk '!/^#/ && NF { print $1 }' "$repo/vmtests/host-only")
  if ((${#host_only[@]})); then
    neg=$(IFS=:; echo "${host_only[*]}")
    if [[ -z $guest_filter ]]; then guest_filter="*-$neg"
    elif [[ $guest_filter == *-* ]]; then guest_filter="$guest_filter:$neg"
    else guest_filter="$guest_filter-$neg"; fi
  fi
fi
for ((g = 1; g <= guests; g++)); do
  cfg="$stage/config-g$g"
  mkdir -p "$cfg/vmtest"
  {
    echo "MARK=$(sq "$mark")"
    echo "TESTS=$(sq "${guest_tests[g]}")"
    echo "GTEST_FILTER=$(sq "$guest_filter")"
    echo "EGR_TIME_SCALE=$([[ $accel == kvm ]] && echo 1 || echo 5)"
    echo "CGROUP2_MOUNT=$(sq "$cgmount")"
    echo "SUITE_TIMEOUT=$((timeout_s > 120 ? timeout_s - 60 : timeout_s))"
  } > "$cfg/vmtest/config"
  cp "$initrd" "$stage/initramfs-g$g.cpio"
  (cd "$cfg" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) >> "$stage/initramfs-g$g.cpio"
done
rm -f "$initrd"
pack_s=$(elapsed "$t_pack")
log "initramfs: $(du -h "$stage/initramfs-g1.cpio" | cut -f1) for $release, packed in ${pack_s}s"

# ---- boot ------------------------------------------------------------------------------
log "booting $kernel under qemu ($accel_note, -m $mem -smp $smp), $guests guest(s), timeout ${timeout_s}s"
t_boot=$(date +%s.%N)
t0=$SECONDS
consoles=()
for ((g = 1; g <= guests; g++)); do
  c=$console
  ((guests == 1)) || c="$out/console-g$g.log"
  rm -f "$c"; touch "$c"
  consoles[g]=$c
  log "guest $g: ${guest_tests[g]}"
  log "guest $g console: $c"
  # qemu picks the first accelerator that works: KVM where present, else TCG.
  # no_timer_check: under TCG on a loaded host the boot's IO-APIC timer check
  # can miss its ticks and panic ("IO-APIC + timer doesn't work!": a third
  # guest booting beside the build did); the check proves nothing in a VM.
  qemu-system-x86_64 \
    "${accel_args[@]}" -cpu max -smp "$smp" -m "$mem" \
    -nodefaults -no-user-config -display none -no-reboot \
    -serial "file:$c" \
    -kernel "$kernel" -initrd "$stage/initramfs-g$g.cpio" \
    -append "console=ttyS0 panic=-1 oops=panic rdinit=/init net.ifnames=0 no_timer_check${append:+ $append}" \
    </dev/null >"$stage/qemu-g$g.out" 2>&1 &
  qemu_pids[g]=$!
  if [[ $quiet == 0 ]]; then
    prefix=""
    ((guests == 1)) || prefix="[g$g] "
    tail -n +1 --pid="${qemu_pids[g]}" -f "$c" | tr -d '\r' | sed -u "s/^/$prefix/" &
  fi
done
# Bounds: until our script's first line, a guest whose console stops growing
# for $boot_timeout s is hung (a kernel that hangs early, or a KVM that never
# leaves the BIOS, prints nothing more); every guest finishes within $timeout_s s.
# Silence rather than a deadline: under TCG the boot's speed is the host's
# load (CI once killed three guests at 180 s, each still printing its boot).
hung=()
qemu_rc=()
booted=()        # seconds from qemu's start to our script's first line
quiet_since=()   # when the console last grew, before that line
console_size=()
for ((g = 1; g <= guests; g++)); do quiet_since[g]=$SECONDS; console_size[g]=0; done
running=$guests
while ((running > 0)); do
  running=0
  for ((g = 1; g <= guests; g++)); do
    p=${qemu_pids[g]}
    [[ -n $p ]] || continue
    if ! kill -0 "$p" 2>/dev/null; then
      rc=0; wait "$p" 2>/dev/null || rc=$?
      qemu_rc[g]=$rc; qemu_pids[g]=""
      continue
    fi
    running=$((running + 1))
    if [[ -z ${hung[g]:-} ]] && ((SECONDS - t0 > timeout_s)); then hung[g]="did not finish within ${timeout_s}s"; fi
    if [[ -z ${hung[g]:-} && -z ${booted[g]:-} ]]; then
      if grep -q '^vmtest: init' "${consoles[g]}"; then
        booted[g]=$((SECONDS - t0))
      else
        size=$(stat -c %s "${consoles[g]}")
        if ((size != console_size[g])); then
          console_size[g]=$size quiet_since[g]=$SECONDS
        elif ((SECONDS - quiet_since[g] > boot_timeout)); then
          hung[g]="printed nothing for ${boot_timeout}s before its init script (at $((SECONDS - t0))s, ${size} bytes of console)"
        fi
      fi
    fi
    [[ -z ${hung[g]:-} ]] || kill -KILL "$p" 2>/dev/null || true
  done
  ((running == 0)) || sleep 1
done
wait 2>/dev/null || true   # the console tails end with qemu
boot_s=$(elapsed "$t_boot")
for ((g = 1; g <= guests; g++)); do
  if [[ -s $stage/qemu-g$g.out ]]; then
    grep -v "Could not access KVM kernel module\|failed to initialize kvm\|falling back to tcg" \
      "$stage/qemu-g$g.out" >&2 || true
  fi
done
# One log for the verdict (and for whoever reads it later): the guests' consoles
# one after the other.
if ((guests > 1)); then
  for ((g = 1; g <= guests; g++)); do
    echo "===== guest $g: ${guest_tests[g]}"
    cat "${consoles[g]}"
  done > "$console"
fi

# ---- verdict ---------------------------------------------------------------------------
clean=$(tr -d '\r' < "$console" 2>/dev/null || true)
{
  echo "kernel: $kernel ($release)"
  echo "accelerator: $accel_note"
  echo "initramfs pack: ${pack_s}s; qemu (boot + tests + power-off): ${boot_s}s; total: $(elapsed "$t_start")s; guests: $guests"
  for ((g = 1; g <= guests; g++)); do echo "guest $g: ${guest_tests[g]}"; done
  for ((g = 1; g <= guests; g++)); do echo "guest $g reached its init script after: ${booted[g]:-(never)}${booted[g]:+s}"; done
  echo "probe:"
  awk -v m="$mark" '$0 == m " PROBE BEGIN" { on = 1; next } index($0, m " PROBE END") == 1 { on = 0 } on' <<<"$clean" | sed 's/^/  /'
  grep -F "$mark LOAD" <<<"$clean" | sed "s/^$mark /  /" || true
  if ((${#host_only[@]})); then
    echo "left to the host under TCG (vmtests/host-only):"
    printf '  %s\n' "${host_only[@]}"
  fi
  echo "results:"
  awk -v m="$mark" '
    /^Running main\(\) from/ { p = f = s = 0 }
    /^\[  PASSED  \] [0-9]+ tests?\./ { p = $4 }
    /^\[  FAILED  \] [0-9]+ tests?, listed below/ { f = $4 }
    /^\[  SKIPPED \] [0-9]+ tests?, listed below/ { s = $4 }
    index($0, m " RESULT ") == 1 {
      sub(m " RESULT ", ""); printf "  %s passed=%d failed=%d skipped=%d\n", $0, p, f, s; p = f = s = 0
    }' <<<"$clean"
  # Skipped tests with their reasons: on this kernel a skip must say why
  # (the probe's reason), never pass silently.
  awk '
    /^\[ RUN      \] / { name = $4; why = ""; grab = 0; next }
    /: Skipped$/ { grab = 1; next }
    /^\[  SKIPPED \] .* \([0-9]+ ms\)$/ { gsub(/\n+$/, "", why); printf "  SKIPPED %s: %s\n", name, why; grab = 0; next }
    grab && NF { why = why (why == "" ? "" : " ") $0 }' <<<"$clean"
  grep -E '^\[  FAILED  \] [A-Za-z].*[^)]$' <<<"$clean" | sed 's/, where GetParam() = .*//' | sort -u | sed 's/^/  /' || true
} > "$summary"

echo "----- vmtests summary ($summary)"
cat "$summary"
# Test counts over every binary that reported, for the closing line.
read -r n_pass n_fail n_skip < <(awk '
  $1 == "results:" { on = 1; next }
  on && / rc=[0-9]+ secs=/ {
    for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "passed") p += kv[2]; if (kv[1] == "failed") f += kv[2]; if (kv[1] == "skipped") s += kv[2] }
  }
  END { print p + 0, f + 0, s + 0 }' "$summary")
closing() { echo "vmtests: $n_pass passed, $((n_fail + $1)) failed, $n_skip skipped"; }
extra=0 failed_rc=0
for ((g = 1; g <= guests; g++)); do
  who="the guest"; ((guests == 1)) || who="guest $g (${guest_tests[g]})"
  cg=$(tr -d '\r' < "${consoles[g]}" 2>/dev/null || true)
  done_line=$(grep -F "$mark DONE" <<<"$cg" | tail -n1 || true)
  if [[ -n ${hung[g]:-} ]]; then
    echo "vmtests: FAILED: $who ${hung[g]} (killed); console log: ${consoles[g]}"
    last=$(grep -E '^\[ RUN      \] ' <<<"$cg" | tail -n1 | cut -c14-)
    [[ -z $last ]] || echo "vmtests: the last test started there was $last"
    [[ $accel != kvm ]] || echo "vmtests: (with KVM: if the log is empty, KVM may not work on this host; try --accel tcg)"
    extra=$((extra + 1))
  elif [[ -z $done_line ]]; then
    echo "vmtests: FAILED: $who stopped without reporting (crash, panic or early error; qemu rc=${qemu_rc[g]:-?}); console log: ${consoles[g]}"
    grep -E "Kernel panic|BUG:|Oops|general protection|Call Trace" <<<"$cg" | head -n 20 || true
    extra=$((extra + 1))
  elif [[ $done_line != "$mark DONE rc=0" ]]; then
    echo "vmtests: FAILED on $release: $who (${done_line#"$mark "}); console log: ${consoles[g]}"
    failed_rc=1
  fi
done
if ((extra > 0 || failed_rc)); then
  closing $((extra + (failed_rc && n_fail == 0 && extra == 0 ? 1 : 0)))
  exit 1
fi
echo "vmtests: PASSED on $release in $(elapsed "$t_start")s ($guests guest(s)); console log: $console"
closing 0
