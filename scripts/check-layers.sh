#!/usr/bin/env bash
# Keeps the layers honest: no include and no link edge from a lower layer to
# a higher one.  Run by ctest (label unit) and usable alone:
#   scripts/check-layers.sh [REPO]
# Layers, lowest first (a layer may use itself and anything listed before it):
#   userspace/common → userspace/net → userspace/policy → userspace/dns → maps → loader
#   → userspace/control → userspace/audit (of maps/ only the ABI header and
#   the libbpf-free event_ring.h) → userspace/daemon (issue 14);  userspace/sandbox uses common only;  bpf/ uses
#   bpf/lib and maps/egressd_abi.h only;  tools/ and tests/ may use anything.
set -euo pipefail
repo=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$repo"

# layer dir | include prefixes it may use | egr_ libraries it may link
rules=(
  "userspace/common|userspace/common/|egr_common"
  "userspace/net|userspace/common/ userspace/net/|egr_common egr_net"
  "userspace/policy|userspace/common/ userspace/net/ userspace/policy/|egr_common egr_net egr_policy egr_policy_json"
  "userspace/dns|userspace/common/ userspace/net/ userspace/policy/ userspace/dns/|egr_common egr_net egr_policy egr_dns"
  "userspace/sandbox|userspace/common/ userspace/sandbox/|egr_common egr_sandbox"
  "maps|userspace/common/ userspace/net/ userspace/policy/ userspace/dns/ maps/|egr_abi egr_common egr_net egr_policy egr_maps"
  "loader|userspace/common/ userspace/net/ userspace/policy/ userspace/dns/ maps/ loader/ egressd.skel.h|egr_abi egr_common egr_net egr_policy egr_maps egr_bpf_skel egr_loader"
  "userspace/control|userspace/common/ userspace/net/ userspace/policy/ userspace/dns/ maps/ loader/ userspace/control/|egr_abi egr_common egr_net egr_policy egr_policy_json egr_dns egr_maps egr_loader egr_control"
  "userspace/audit|userspace/common/ userspace/net/ userspace/policy/ userspace/dns/ maps/egressd_abi.h maps/event_ring.h userspace/control/ userspace/audit/|egr_abi egr_common egr_net egr_policy egr_dns egr_maps egr_control egr_audit egr_audit_suggest"
  "userspace/daemon|userspace/common/ userspace/net/ userspace/policy/ userspace/dns/ maps/ loader/ userspace/control/ userspace/audit/ userspace/daemon/|egr_abi egr_common egr_net egr_policy egr_policy_json egr_dns egr_maps egr_loader egr_control egr_audit egr_daemon egr_daemon_dns egr_daemon_client egr_daemon_metrics"
  "bpf|lib/ maps/egressd_abi.h vmlinux.h vmlinux/|"
)

fail=0
for rule in "${rules[@]}"; do
  IFS='|' read -r dir allowed libs <<<"$rule"
  [[ -d $dir ]] || continue
  # Project includes are the quoted ones; <...> are system and third-party.
  while IFS= read -r hit; do
    file=${hit%%:*}
    inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${hit#*:}")
    # Only egressd's own headers are layered; "absl/...", "nlohmann/..."
    # and the like are third-party.
    case $inc in
      userspace/*|maps/*|loader/*|tools/*|tests/*|bpf/*|lib/*|*.skel.h) ;;
      *) continue ;;
    esac
    ok=0
    for a in $allowed; do [[ $inc == "$a"* ]] && ok=1; done
    # A header next to the file, included by its bare name.
    [[ $ok == 0 && -e "$(dirname "$file")/$inc" ]] && ok=1
    if [[ $ok == 0 ]]; then
      echo "layering: $file includes \"$inc\" (not allowed in $dir)"
      fail=1
    fi
  done < <(grep -rHE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$dir" --include='*.h' --include='*.cc' --include='*.c' | grep -v '/build')
  if [[ -f $dir/CMakeLists.txt ]]; then
    for lib in $(grep -oE '\begr_[a-z_]+' "$dir/CMakeLists.txt" | sort -u); do
      ok=0
      for a in $libs; do [[ $lib == "$a" ]] && ok=1; done
      if [[ $ok == 0 ]]; then
        echo "layering: $dir/CMakeLists.txt names $lib (not allowed in $dir)"
        fail=1
      fi
    done
  fi
done
# Only maps/ and loader/ (and the BPF programs, and tests) talk to libbpf.
while IFS= read -r hit; do
  echo "layering: ${hit%%:*} includes libbpf (only maps/ and loader/ call libbpf)"
  fail=1
done < <(grep -rlE '^[[:space:]]*#[[:space:]]*include[[:space:]]+<bpf/' userspace tools --include='*.h' --include='*.cc' 2>/dev/null || true)
while IFS= read -r hit; do
  echo "layering: $hit links libbpf (only maps/ and loader/ call libbpf)"
  fail=1
done < <(grep -lE 'LIBBPF' userspace/*/CMakeLists.txt tools/*/CMakeLists.txt 2>/dev/null || true)
# The policy types do not drag nlohmann-json into every unit that includes
# them: only the renderer (compiled_policy_json.*) includes it.
while IFS= read -r hit; do
  echo "layering: $hit includes nlohmann (only userspace/policy/*_json.* render JSON)"
  fail=1
done < <(grep -rlE '^[[:space:]]*#[[:space:]]*include[[:space:]]+[<"]nlohmann/' userspace/policy \
           --include='*.h' --include='*.cc' 2>/dev/null | grep -vE '_json\.(h|cc)$' || true)

if [[ $fail == 0 ]]; then echo "layering: ok (${#rules[@]} layers checked)"; fi
exit $fail
