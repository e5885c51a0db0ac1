#include "loader/probe.h"

#include <bpf/libbpf.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "userspace/common/errors.h"
#include "userspace/common/fault.h"

namespace egressd {
namespace {

// /proc/filesystems lists every filesystem type the kernel can mount.
bool KernelHasFilesystem(const std::string& type) {
  std::ifstream in("/proc/filesystems");
  std::string line;
  while (std::getline(in, line)) {
    auto tab = line.rfind('\t');
    if (line.substr(tab == std::string::npos ? 0 : tab + 1) == type) return true;
  }
  return false;
}

ProbeItem ProgType(const char* what, bpf_prog_type t) {
  int r = libbpf_probe_bpf_prog_type(t, nullptr);
  return {what, r == 1, r == 1 ? "" : (r == 0 ? "not supported by this kernel" : absl::StrCat("probe failed: ", r))};
}

ProbeItem MapType(const char* what, bpf_map_type t) {
  int r = libbpf_probe_bpf_map_type(t, nullptr);
  return {what, r == 1, r == 1 ? "" : (r == 0 ? "not supported by this kernel" : absl::StrCat("probe failed: ", r))};
}

constexpr char kSecurityfs[] = "/sys/kernel/security";
constexpr char kLsmList[] = "/sys/kernel/security/lsm";

}  // namespace

BpfLsmState ProbeBpfLsm() {
  if (InjectedError("probe:bpf-lsm")) return {BpfLsm::kInactive, "not active (injected: probe:bpf-lsm)"};
  std::ifstream in(kLsmList);
  std::string list;
  if (!in || !std::getline(in, list)) {
    return {BpfLsm::kUnknown, absl::StrCat("unknown, securityfs not mounted (", kLsmList,
                                           " unreadable); `egressctl load` mounts it")};
  }
  for (absl::string_view lsm : absl::StrSplit(list, ',')) {
    if (lsm == "bpf") return {BpfLsm::kActive, absl::StrCat("active LSMs: ", list)};
  }
  return {BpfLsm::kInactive, absl::StrCat("not in the active LSMs (", list,
                                          "); boot with lsm=...,bpf to enable it")};
}

absl::StatusOr<BpfLsmState> BpfLsmForLoad() {
  BpfLsmState st = ProbeBpfLsm();
  if (st.state != BpfLsm::kUnknown) return st;
  struct stat sb {};
  if (stat(kSecurityfs, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    return BpfLsmState{BpfLsm::kInactive, absl::StrCat("no ", kSecurityfs, " (CONFIG_SECURITYFS)")};
  }
  if (mount("securityfs", kSecurityfs, "securityfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0 &&
      errno != EBUSY) {
    return ErrnoStatus(errno, absl::StrCat("mount securityfs at ", kSecurityfs));
  }
  return ProbeBpfLsm();
}

std::vector<ProbeItem> ProbeKernel(const Paths& paths) {
  std::vector<ProbeItem> items;
  struct utsname u {};
  uname(&u);
  items.push_back({"kernel", true, u.release});
  items.push_back({"root privileges (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN)", geteuid() == 0,
                   geteuid() == 0 ? "" : "run as root"});
  auto cg = FindCgroup2Mount();
  items.push_back({"cgroup v2 mount", cg.ok(), cg.ok() ? *cg : std::string(cg.status().message())});
  // Reported, never mounted here: the probe changes nothing.  `load` mounts
  // bpffs where it is absent, so a kernel that has the filesystem is enough.
  if (IsBpffs(paths.bpffs)) {
    items.push_back({"bpffs at " + paths.bpffs, true, "mounted"});
  } else {
    bool known = KernelHasFilesystem("bpf");
    items.push_back({"bpffs at " + paths.bpffs, known,
                     known ? "not mounted; `egressctl load` mounts it"
                           : "this kernel has no bpf filesystem (CONFIG_BPF_SYSCALL)"});
  }
  items.push_back(ProgType("program type cgroup_sock_addr (connect4/6, sendmsg4/6, recvmsg4/6, getpeername4/6)",
                           BPF_PROG_TYPE_CGROUP_SOCK_ADDR));
  items.push_back(ProgType("program type cgroup_skb (egress backstop)", BPF_PROG_TYPE_CGROUP_SKB));
  BpfLsmState lsm = ProbeBpfLsm();
  items.push_back({"bpf LSM (socket families, abstract unix sockets)", lsm.state == BpfLsm::kActive,
                   lsm.detail, false});
  ProbeItem lsm_prog = ProgType("program type lsm (BPF_LSM_MAC)", BPF_PROG_TYPE_LSM);
  lsm_prog.required = false;
  items.push_back(lsm_prog);
  items.push_back(MapType("map type lpm_trie", BPF_MAP_TYPE_LPM_TRIE));
  items.push_back(MapType("map type hash", BPF_MAP_TYPE_HASH));
  items.push_back(MapType("map type percpu_array", BPF_MAP_TYPE_PERCPU_ARRAY));
  items.push_back(MapType("map type sk_storage", BPF_MAP_TYPE_SK_STORAGE));
  auto cookie = NetnsCookieOf(paths.node_netns);
  items.push_back({"SO_NETNS_COOKIE on " + paths.node_netns, cookie.ok(),
                   cookie.ok() ? "" : std::string(cookie.status().message())});
  return items;
}

absl::Status RequireKernel(const Paths& paths) {
  std::vector<std::string> missing;
  for (const auto& i : ProbeKernel(paths)) {
    if (!i.ok && i.required) missing.push_back(absl::StrCat(i.what, ": ", i.detail));
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "this node cannot run egressd (needs Linux 6.1+ with cgroup v2 and BPF):\n  ",
      absl::StrJoin(missing, "\n  ")));
}

}  // namespace egressd
