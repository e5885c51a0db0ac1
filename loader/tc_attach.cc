#include "loader/tc_attach.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <net/if.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "maps/if_sandbox_table.h"
#include "spdlog/spdlog.h"
#include "userspace/common/errors.h"
#include "userspace/common/unique_fd.h"

namespace egressd {
namespace {

std::string ProgDir(const Paths& p) { return p.pin_root + "/progs"; }

const char* PointName(bpf_tc_attach_point point) {
  return point == BPF_TC_INGRESS ? "egr_tc_ingress to the tc ingress" : "egr_tc_egress to the tc egress";
}

absl::Status Attach(uint32_t ifindex, int prog_fd, bpf_tc_attach_point point) {
  DECLARE_LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = static_cast<int>(ifindex), .attach_point = point);
  if (int r = bpf_tc_hook_create(&hook); r != 0 && r != -EEXIST) {
    return LibbpfStatus(r, absl::StrCat("create the clsact qdisc on interface ", ifindex));
  }
  DECLARE_LIBBPF_OPTS(bpf_tc_opts, opts, .prog_fd = prog_fd, .flags = BPF_TC_F_REPLACE, .handle = kTcHandle,
                      .priority = kTcPriority);
  if (int r = bpf_tc_attach(&hook, &opts); r != 0) {
    return LibbpfStatus(r, absl::StrCat("attach ", PointName(point), " of interface ", ifindex));
  }
  return absl::OkStatus();
}

absl::Status Detach(uint32_t ifindex, bpf_tc_attach_point point) {
  DECLARE_LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = static_cast<int>(ifindex), .attach_point = point);
  DECLARE_LIBBPF_OPTS(bpf_tc_opts, opts, .handle = kTcHandle, .priority = kTcPriority);
  int r = bpf_tc_detach(&hook, &opts);
  if (r != 0 && r != -ENOENT && r != -ENODEV && r != -EINVAL) {
    return LibbpfStatus(r, absl::StrCat("detach ", point == BPF_TC_INGRESS ? "egr_tc_ingress" : "egr_tc_egress",
                                        " from interface ", ifindex));
  }
  return absl::OkStatus();
}

absl::Status AttachPinned(const std::string& pin, uint32_t ifindex, bpf_tc_attach_point point) {
  UniqueFd prog(bpf_obj_get(pin.c_str()));
  if (!prog.valid()) {
    return ErrnoStatus(errno, absl::StrCat("open the tc program pinned at ", pin,
                                           " (loaded by an egressd without it? run `egressctl load`)"));
  }
  return Attach(ifindex, prog.get(), point);
}

// bpffs refuses names with a dot ("reserved for future extensions").
absl::Status PinReplacing(int prog_fd, const std::string& pin) {
  const std::string next = pin + "_next";
  unlink(next.c_str());
  if (bpf_obj_pin(prog_fd, next.c_str()) != 0) return ErrnoStatus(errno, absl::StrCat("pin ", next));
  if (rename(next.c_str(), pin.c_str()) != 0) return ErrnoStatus(errno, absl::StrCat("rename ", next, " to ", pin));
  return absl::OkStatus();
}

}  // namespace

std::string TcProgramPin(const Paths& paths) { return ProgDir(paths) + "/egr_tc_ingress"; }
std::string TcEgressProgramPin(const Paths& paths) { return ProgDir(paths) + "/egr_tc_egress"; }

absl::Status InstallTcProgram(const Paths& paths, int ingress_fd, int egress_fd) {
  if (mkdir(ProgDir(paths).c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, absl::StrCat("create ", ProgDir(paths)));
  }
  EGR_RETURN_IF_ERROR(PinReplacing(ingress_fd, TcProgramPin(paths)));
  EGR_RETURN_IF_ERROR(PinReplacing(egress_fd, TcEgressProgramPin(paths)));
  EGR_ASSIGN_OR_RETURN(auto table, maps::IfSandboxTable::Open(paths.pin_root));
  EGR_ASSIGN_OR_RETURN(auto entries, table.List());
  for (const auto& e : entries) {
    char name[IF_NAMESIZE];
    if (if_indextoname(e.ifindex, name) == nullptr) {  // gone with its pod
      spdlog::warn("registered interface {} is gone; its filter went with it", e.ifindex);
      continue;
    }
    EGR_RETURN_IF_ERROR(Attach(e.ifindex, ingress_fd, BPF_TC_INGRESS));
    EGR_RETURN_IF_ERROR(Attach(e.ifindex, egress_fd, BPF_TC_EGRESS));
  }
  return absl::OkStatus();
}

absl::Status AttachTcPrograms(const Paths& paths, uint32_t ifindex) {
  EGR_RETURN_IF_ERROR(AttachTcIngress(paths, ifindex));
  return AttachTcEgress(paths, ifindex);
}

absl::Status DetachTcPrograms(uint32_t ifindex) {
  EGR_RETURN_IF_ERROR(DetachTcEgress(ifindex));
  return DetachTcIngress(ifindex);
}

absl::Status AttachTcIngress(const Paths& paths, uint32_t ifindex) {
  return AttachPinned(TcProgramPin(paths), ifindex, BPF_TC_INGRESS);
}

absl::Status DetachTcIngress(uint32_t ifindex) { return Detach(ifindex, BPF_TC_INGRESS); }

absl::Status AttachTcEgress(const Paths& paths, uint32_t ifindex) {
  return AttachPinned(TcEgressProgramPin(paths), ifindex, BPF_TC_EGRESS);
}

absl::Status DetachTcEgress(uint32_t ifindex) { return Detach(ifindex, BPF_TC_EGRESS); }

absl::Status RemoveTcProgram(const Paths& paths) {
  if (auto table = maps::IfSandboxTable::Open(paths.pin_root); table.ok()) {
    EGR_ASSIGN_OR_RETURN(auto entries, table->List());
    for (const auto& e : entries) EGR_RETURN_IF_ERROR(DetachTcPrograms(e.ifindex));
  }
  for (const std::string& pin : {TcProgramPin(paths), TcEgressProgramPin(paths)}) {
    if (unlink(pin.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("unpin ", pin));
  }
  rmdir(ProgDir(paths).c_str());
  return absl::OkStatus();
}

}  // namespace egressd
