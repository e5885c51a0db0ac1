#!/usr/bin/env bash
# Installs everything egressd needs to build and test, from Debian 12's packages only.
# Idempotent: a second run installs nothing and takes a second.
set -euo pipefail

# Only what the build and the tests use; vmtests/run.sh installs its own
# (qemu, busybox, nftables, dnsmasq..., and the 6.1 kernel), called below.
packages=(
  # build: clang compiles the BPF programs, make runs Makefile.bpf, bpftool
  # makes their skeletons
  cmake ninja-build g++ clang pkg-config make
  libbpf-dev bpftool linux-libc-dev
  # libbpf's pkg-config file requires these two
  libelf-dev zlib1g-dev
  libabsl-dev libspdlog-dev libfmt-dev libgtest-dev libcli11-dev nlohmann-json3-dev
  # the lab's probe (io_uring connect)
  liburing-dev
  # the lab: ip (netns, veth), setpriv (the hostile sandbox's bounded capabilities)
  iproute2 util-linux
  # policy compiler: YAML, IDN, the public suffix list (read at run time);
  # libFuzzer for tests/fuzz (only Recommended by clang, so not pulled in)
  libyaml-dev libidn2-dev publicsuffix libclang-rt-14-dev
  # the incumbent the benchmarks and tests/priv/differential_test compare
  # against (nft -f), bench/run.sh's throughput row, its table (python3) and
  # plots; python3 also serves the differential test's listener
  nftables iperf3 gnuplot-nox python3
  # egressctl run's seccomp fallback on a node without the bpf LSM
  libseccomp-dev
  # the containment tests' positive controls: raw-socket tools a pod runs
  nmap tcpdump iputils-ping
  # bench/profile/: where the missed goals' time goes (perf samples, syscalls,
  # callgrind of egressctl's user space)
  linux-perf strace valgrind
  # the DNS proxy: libknot (messages), c-ares (upstream transport), Boost.Asio
  # (its event loop); its tests: dnsmasq (the upstream, and tests/lab/lab_dns.h's
  # resolvers and proxy stand-in), dig and kdig
  libknot-dev libc-ares-dev libboost-dev libssl-dev dnsmasq-base bind9-dnsutils knot-dnsutils
  # bench/'s DNS rows: dnsperf (latency and rate), libnftables (the incumbent's
  # forwarder adds each answer's addresses in one transaction, in process)
  dnsperf libnftables-dev
  # the audit metrics' check (promtool), bench/audit_bench.cc's CPU figures (GNU time)
  prometheus time
  # bench/nflog_reader.cc: the incumbent's reader of `nft log group N` (nfnetlink_log)
  libnetfilter-log-dev
  # tests/priv/daemon_endpoints_test: the daemon's /metrics scrape and a sandboxed API caller
  curl
  # the image (deploy/image/build.sh: a Debian root filesystem, imported and
  # run by podman + crun: tests/priv/image_test.cc) and the lab's gVisor pod
  # (runsc, --platform=ptrace: tests/lab/gvisor_pod.h)
  mmdebstrap podman crun runsc
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

# qemu, busybox-static and Debian 12's 6.1 kernel (linux-image-amd64, with no
# update-initramfs): vmtests/run.sh boots the priv suite on that kernel and
# tests/priv/guest_tap_test boots it behind a pod's tap.  One list, vmtests/run.sh's.
"$(dirname "$0")/../vmtests/run.sh" --install-only

# tests/unit/deploy_manifests_test renders deploy/kubernetes with `kubectl
# kustomize`: Debian's kubernetes-client (kubectl 1.20, kustomize v2; the
# manifests keep to what it reads).  A machine that already has a kubectl
# keeps it (another package's /usr/bin/kubectl would conflict).
if ! command -v kubectl >/dev/null 2>&1; then
  echo "install-deps: installing kubernetes-client (kubectl)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends kubernetes-client
fi
