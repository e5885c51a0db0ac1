#include "loader/loader.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "egressd.skel.h"
#include "loader/tc_attach.h"
#include "userspace/common/errors.h"
#include "loader/bpffs.h"
#include "loader/migrate.h"
#include "loader/probe.h"
#include "userspace/common/fault.h"
#include "loader/self_test.h"
#include "loader/verifier_stats.h"
#include "userspace/common/unique_fd.h"
#include "maps/egressd_abi.h"
#include "maps/pinned_maps.h"
#include "maps/sandbox_table.h"

namespace egressd {
namespace {

struct SkelDeleter {
  void operator()(egressd_bpf* s) const { egressd_bpf__destroy(s); }
};
using Skeleton = std::unique_ptr<egressd_bpf, SkelDeleter>;

struct LinkDeleter {
  void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};
using Link = std::unique_ptr<bpf_link, LinkDeleter>;

// The programs, each named once: the name is also its link's pin file.
using SkeletonPrograms = decltype(egressd_bpf::progs);
// LSM programs attach to their hook (globally; they find the sandbox
// themselves) and only where the bpf LSM is active.
struct ProgramSlot {
  const char* name;
  bpf_program* SkeletonPrograms::*prog;
  bool lsm = false;
};
constexpr ProgramSlot kPrograms[] = {
    {"egr_connect4", &SkeletonPrograms::egr_connect4},
    {"egr_connect6", &SkeletonPrograms::egr_connect6},
    {"egr_sendmsg4", &SkeletonPrograms::egr_sendmsg4},
    {"egr_sendmsg6", &SkeletonPrograms::egr_sendmsg6},
    {"egr_skb_egress", &SkeletonPrograms::egr_skb_egress},
    {"egr_setsockopt", &SkeletonPrograms::egr_setsockopt},
    {"egr_socket_create", &SkeletonPrograms::egr_socket_create, true},
    {"egr_socket_sendmsg", &SkeletonPrograms::egr_socket_sendmsg, true},
    {"egr_unix_connect", &SkeletonPrograms::egr_unix_connect, true},
    {"egr_unix_may_send", &SkeletonPrograms::egr_unix_may_send, true},
    {"egr_recvmsg4", &SkeletonPrograms::egr_recvmsg4},
    {"egr_recvmsg6", &SkeletonPrograms::egr_recvmsg6},
    {"egr_getpeername4", &SkeletonPrograms::egr_getpeername4},
    {"egr_getpeername6", &SkeletonPrograms::egr_getpeername6},
    {"egr_sock_release", &SkeletonPrograms::egr_sock_release},
};

std::string LinkDir(const Paths& p) { return p.pin_root + "/links"; }
std::string LinkPin(const Paths& p, const std::string& prog) { return LinkDir(p) + "/" + prog; }

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// `config_fd`: the loaded object's egr_config_v1 (the pinned one, reused).
// Not opened by pin name: a map being migrated is not pinned under its name
// yet.
absl::Status WriteConfig(const Paths& paths, int config_fd, bool socket_containment) {
  uint32_t zero = 0;
  egr_config_val cfg{};
  EGR_ASSIGN_OR_RETURN(uint64_t cookie, NetnsCookieOf(paths.node_netns));
  if (bpf_map_lookup_elem(config_fd, &zero, &cfg) != 0) {
    return ErrnoStatus(errno, absl::StrCat("read ", EGR_MAP_CONFIG));
  }
  // The node netns is pinned by the first load.  A reload that names another
  // would silently move whose loopback counts as the node's: refused before
  // any program changes.
  if (cfg.node_netns_cookie != 0 && cfg.node_netns_cookie != cookie) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the node netns ", paths.node_netns, " (netns cookie ", cookie, ") is not the one this instance ",
        "was loaded with (netns cookie ", cfg.node_netns_cookie, ", pinned in ", paths.pin_root, "/",
        EGR_MAP_CONFIG, "); set EGRESSD_NODE_NETNS or --node-netns to that namespace, or unload first"));
  }
  cfg.node_netns_cookie = cookie;
  // Whether the LSM hooks are in force is this load's finding.
  if (socket_containment) {
    cfg.flags &= ~uint32_t{EGR_CONFIG_NO_SOCKET_CONTAINMENT};
  } else {
    cfg.flags |= EGR_CONFIG_NO_SOCKET_CONTAINMENT;
  }
  if (bpf_map_update_elem(config_fd, &zero, &cfg, BPF_ANY) != 0) {
    return ErrnoStatus(errno, absl::StrCat("update ", EGR_MAP_CONFIG));
  }
  return absl::OkStatus();
}

// Written last, once the load committed: a load that rolls back leaves the
// schema the previous programs pinned.
absl::Status WriteSchema(int config_fd) {
  uint32_t zero = 0;
  egr_config_val cfg{};
  if (bpf_map_lookup_elem(config_fd, &zero, &cfg) != 0) return ErrnoStatus(errno, absl::StrCat("read ", EGR_MAP_CONFIG));
  cfg.pad0 = kPinSchema;
  if (bpf_map_update_elem(config_fd, &zero, &cfg, BPF_ANY) != 0) {
    return ErrnoStatus(errno, absl::StrCat("write the schema into ", EGR_MAP_CONFIG));
  }
  return absl::OkStatus();
}

// What one load changed at one hook, so a failure later in the same load
// can put it back: a link attached by this load is detached and unpinned; a
// link whose program this load swapped gets its old program back.
// A tracing (LSM) link cannot swap its program: the new link is attached
// next to the old one and its pin renamed over the old pin; the old link is
// held open (still enforcing) until the load commits, so a rollback pins it
// back.
struct HookChange {
  std::string name;
  std::string pin;
  bool attached = false;  // else updated in place (or replaced)
  UniqueFd old_prog;      // updated: the program that was in force before
  UniqueFd old_link;      // replaced: the link that was in force before
};

// Tracing links have no detach (EOPNOTSUPP): their pin is their last reference.
bool DetachFailed(int err) { return err != EINVAL && err != EOPNOTSUPP; }

absl::StatusOr<UniqueFd> ProgramOfLink(int link_fd) {
  bpf_link_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(link_fd, &info, &len) != 0) return ErrnoStatus(errno, "read link info");
  UniqueFd prog(bpf_prog_get_fd_by_id(info.prog_id));
  if (!prog.valid()) return ErrnoStatus(errno, absl::StrCat("open program ", info.prog_id, " of a link"));
  return prog;
}

// Swaps the program behind an existing pinned link, or attaches and pins.
absl::Status AttachLsm(const Paths& paths, const std::string& name, bpf_program* prog,
                       LoadReport& report, std::vector<HookChange>& changes) {
  std::string pin = LinkPin(paths, name);
  if (int e = InjectedError("attach:" + name)) {
    return ErrnoStatus(e, absl::StrCat("attach ", name, " to its LSM hook (injected)"));
  }
  UniqueFd old(Exists(pin) ? bpf_obj_get(pin.c_str()) : -1);
  Link link(bpf_program__attach_lsm(prog));
  if (!link) return ErrnoStatus(errno, absl::StrCat("attach ", name, " to its LSM hook"));
  std::string next = pin + "-new";  // bpffs refuses names with a dot
  unlink(next.c_str());
  if (int r = bpf_link__pin(link.get(), next.c_str()); r != 0) {
    return LibbpfStatus(r, absl::StrCat("pin link ", next));
  }
  if (rename(next.c_str(), pin.c_str()) != 0) {
    int e = errno;
    unlink(next.c_str());
    return ErrnoStatus(e, absl::StrCat("rename ", next, " over ", pin));
  }
  if (old.valid()) {
    changes.push_back({name, pin, false, UniqueFd(), std::move(old)});
    report.links_updated++;
  } else {
    changes.push_back({name, pin, true, UniqueFd(), UniqueFd()});
    report.links_attached++;
  }
  return absl::OkStatus();
}

absl::Status AttachOrUpdate(const Paths& paths, const std::string& name, bpf_program* prog,
                            int cgroup_fd, LoadReport& report, std::vector<HookChange>& changes) {
  std::string pin = LinkPin(paths, name);
  if (int e = InjectedError("attach:" + name)) {
    return ErrnoStatus(e, absl::StrCat("attach ", name, " to the cgroup2 root (injected)"));
  }
  if (Exists(pin)) {
    Link link(bpf_link__open(pin.c_str()));
    if (link) {
      auto old = ProgramOfLink(bpf_link__fd(link.get()));
      if (old.ok() && bpf_link__update_program(link.get(), prog) == 0) {
        changes.push_back({name, pin, false, std::move(*old)});
        report.links_updated++;
        return absl::OkStatus();
      }
    }
    // A pin whose link no longer works (e.g. its cgroup vanished): replace it.
    spdlog::warn("pinned link {} unusable ({}); re-attaching", pin, std::strerror(errno));
    unlink(pin.c_str());
  }
  Link link(bpf_program__attach_cgroup(prog, cgroup_fd));
  if (!link) return ErrnoStatus(errno, absl::StrCat("attach ", name, " to the cgroup2 root"));
  if (int r = bpf_link__pin(link.get(), pin.c_str()); r != 0) {
    return LibbpfStatus(r, absl::StrCat("pin link ", pin));
  }
  changes.push_back({name, pin, true, UniqueFd(), UniqueFd()});
  report.links_attached++;
  return absl::OkStatus();
}

// Undoes `changes` newest first.  Returns what an operator must know: what
// was put back, and anything that could not be.
std::string RollBack(std::vector<HookChange>& changes) {
  std::vector<std::string> done, failed;
  for (auto it = changes.rbegin(); it != changes.rend(); ++it) {
    if (it->old_link.valid()) {
      std::string back = it->pin + "-old";
      unlink(back.c_str());
      if (bpf_obj_pin(it->old_link.get(), back.c_str()) != 0 || rename(back.c_str(), it->pin.c_str()) != 0) {
        failed.push_back(absl::StrCat(it->name, " (re-pin the previous link: ", std::strerror(errno), ")"));
        unlink(back.c_str());
        continue;
      }
      done.push_back(absl::StrCat(it->name, " back on its previous link"));
      continue;
    }
    UniqueFd link(bpf_obj_get(it->pin.c_str()));
    if (!link.valid()) {
      failed.push_back(absl::StrCat(it->name, " (open ", it->pin, ": ", std::strerror(errno), ")"));
      continue;
    }
    if (it->attached) {
      if (bpf_link_detach(link.get()) != 0 && DetachFailed(errno)) {
        failed.push_back(absl::StrCat(it->name, " (detach: ", std::strerror(errno), ")"));
        continue;
      }
      unlink(it->pin.c_str());
      done.push_back(absl::StrCat(it->name, " detached"));
    } else {
      if (bpf_link_update(link.get(), it->old_prog.get(), nullptr) != 0) {
        failed.push_back(absl::StrCat(it->name, " (restore the old program: ", std::strerror(errno), ")"));
        continue;
      }
      done.push_back(absl::StrCat(it->name, " back on its previous program"));
    }
  }
  changes.clear();
  std::string out;
  if (!done.empty()) absl::StrAppend(&out, "rolled back: ", absl::StrJoin(done, ", "));
  if (!failed.empty()) {
    absl::StrAppend(&out, out.empty() ? "" : "; ", "NOT rolled back: ", absl::StrJoin(failed, ", "));
  }
  return out;
}

// The status of a load that failed after `changes`, with what became of them.
absl::Status FailedAfter(const absl::Status& cause, std::vector<HookChange>& changes) {
  if (changes.empty()) return cause;
  std::string undo = RollBack(changes);
  return absl::Status(cause.code(), absl::StrCat(cause.message(), "\n", undo));
}

}  // namespace

static std::string ProgramsIdPath(const Paths& paths) { return paths.runtime_dir + "/programs.id"; }

std::string EmbeddedProgramsId() {
  size_t size = 0;
  const auto* bytes = static_cast<const uint8_t*>(egressd_bpf__elf_bytes(&size));
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < size; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return absl::StrCat(absl::Hex(h, absl::kZeroPad16), "-", size);
}

// Best effort: without it the next daemon start loads again (as safe, slower).
static void WriteProgramsId(const Paths& paths) {
  const std::string path = ProgramsIdPath(paths), tmp = path + ".tmp";
  if (MakeDirs(paths.runtime_dir, 0700).ok()) {
    if (FILE* f = std::fopen(tmp.c_str(), "w")) {
      const std::string id = EmbeddedProgramsId();
      const bool ok = std::fwrite(id.data(), 1, id.size(), f) == id.size();
      if (std::fclose(f) == 0 && ok && std::rename(tmp.c_str(), path.c_str()) == 0) return;
    }
  }
  spdlog::warn("cannot write {}: the daemon will load the programs again at its next start", path);
}

bool ProgramsCurrent(const Paths& paths) {
  if (!IsLoaded(paths)) return false;
  std::ifstream in(ProgramsIdPath(paths));
  std::string id;
  std::getline(in, id);
  if (id != EmbeddedProgramsId()) return false;
  // Never adopted by path alone: what is pinned must be what the programs
  // declare.  Otherwise the caller loads, which refuses naming the mismatch.
  DECLARE_LIBBPF_OPTS(bpf_object_open_opts, opts, .pin_root_path = paths.pin_root.c_str());
  Skeleton skel(egressd_bpf__open_opts(&opts));
  if (!skel) return false;
  if (absl::Status s = CheckAdoptable(paths, skel->obj); !s.ok()) {
    spdlog::warn("pinned state not adopted as it is: {}", std::string(s.message()));
    return false;
  }
  return true;
}

bool IsLoaded(const Paths& paths) {
  for (const auto& slot : kPrograms) {
    if (!slot.lsm && !Exists(LinkPin(paths, slot.name))) return false;
  }
  return true;
}

absl::Status RequireSocketContainment(const Paths& paths) {
  EGR_ASSIGN_OR_RETURN(auto maps, maps::PinnedMaps::Open(paths.pin_root));
  uint32_t zero = 0;
  egr_config_val cfg{};
  if (bpf_map_lookup_elem(maps.config(), &zero, &cfg) != 0) {
    return ErrnoStatus(errno, absl::StrCat("read ", EGR_MAP_CONFIG));
  }
  std::vector<std::string> missing;
  if (cfg.flags & EGR_CONFIG_NO_SOCKET_CONTAINMENT) {
    missing.push_back("the bpf LSM is not in force on this node (`egressctl load` recorded it: see `egressctl probe`)");
  } else {
    for (const auto& slot : kPrograms) {
      if (slot.lsm && !Exists(LinkPin(paths, slot.name))) {
        missing.push_back(absl::StrCat("LSM link ", LinkPin(paths, slot.name), " is not pinned"));
      }
    }
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "socket-family containment is missing (packet, AF_XDP and AF_VSOCK sockets, abstract unix "
      "peers would not be judged): ",
      absl::StrJoin(missing, "; "),
      ". A sandbox that asks to be contained is never run uncontained"));
}

absl::StatusOr<LoadReport> LoadEnforcement(const Paths& paths, const InstanceLock&) {
  EGR_RETURN_IF_ERROR(RequireKernel(paths));
  EGR_RETURN_IF_ERROR(EnsureBpffs(paths.bpffs));
  EGR_ASSIGN_OR_RETURN(std::string cg_root, FindCgroup2Mount());
  EGR_RETURN_IF_ERROR(MakeDirs(LinkDir(paths), 0700));

  EGR_ASSIGN_OR_RETURN(BpfLsmState lsm, BpfLsmForLoad());
  // "bpf" in the LSM list is not enough: a kernel may still refuse to load
  // LSM programs (this project's 6.18 VM does, EPERM, with lockdown).
  if (lsm.state == BpfLsm::kActive && libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_LSM, nullptr) != 1) {
    lsm = {BpfLsm::kInactive, absl::StrCat(lsm.detail, ", but this kernel refuses to load LSM programs")};
  }
  const bool socket_containment = lsm.state == BpfLsm::kActive;

  DECLARE_LIBBPF_OPTS(bpf_object_open_opts, opts, .pin_root_path = paths.pin_root.c_str());
  Skeleton skel(egressd_bpf__open_opts(&opts));
  if (!skel) return ErrnoStatus(errno, "open BPF skeleton");
  if (!socket_containment) {
    for (const auto& slot : kPrograms) {
      if (slot.lsm) bpf_program__set_autoload(skel->progs.*slot.prog, false);
    }
  }
  // Before the load reuses any pin: shapes, schema, downgrade, and the maps
  // to migrate pointed at their staging pins.
  EGR_ASSIGN_OR_RETURN(MigrationPlan plan, MigrationPlan::Prepare(paths, skel->obj));
  const auto load_start = std::chrono::steady_clock::now();
  if (int r = egressd_bpf__load(skel.get()); r != 0) {
    plan.Abandon();
    return LibbpfStatus(r, absl::StrCat("load BPF programs (maps pinned under ", paths.pin_root,
                                        "; a map whose layout changed needs a new _vN name)"));
  }
  LogVerifierCost(skel->obj,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count());
  const int config_fd = bpf_map__fd(skel->maps.egr_config_v1);
  if (absl::Status s = plan.Fill(skel->obj); !s.ok()) {
    plan.Abandon();
    return s;
  }
  if (absl::Status s = WriteConfig(paths, config_fd, socket_containment); !s.ok()) {
    plan.Abandon();
    return s;
  }

  UniqueFd cg(open(cg_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cg.valid()) return ErrnoStatus(errno, absl::StrCat("open cgroup2 root ", cg_root));
  LoadReport report;
  std::vector<HookChange> changes;
  report.socket_containment = socket_containment;
  report.bpf_lsm = lsm.detail;
  for (const auto& slot : kPrograms) {
    bpf_program* prog = skel->progs.*slot.prog;
    if (slot.lsm && !socket_containment) continue;
    absl::Status s = slot.lsm ? AttachLsm(paths, slot.name, prog, report, changes)
                              : AttachOrUpdate(paths, slot.name, prog, cg.get(), report, changes);
    if (!s.ok()) {
      absl::Status f = FailedAfter(s, changes);
      plan.Abandon();
      return f;
    }
  }
  // Every hook runs the new programs: their maps take their names.
  if (absl::Status s = plan.Commit(); !s.ok()) {
    absl::Status f = FailedAfter(s, changes);
    plan.Abandon();
    return f;
  }
  // The tc programs (issue 17): pinned for registrations by interface, and
  // swapped into the interfaces registered already.
  if (absl::Status s = InstallTcProgram(paths, bpf_program__fd(skel->progs.egr_tc_ingress),
                                        bpf_program__fd(skel->progs.egr_tc_egress));
      !s.ok()) {
    return FailedAfter(s, changes);
  }
  if (!socket_containment) {
    spdlog::warn("socket-family containment is MISSING: the bpf LSM is {}; packet, AF_XDP and AF_VSOCK "
                 "sockets and abstract unix peers are not judged, and `sandbox add` refuses sandboxes",
                 lsm.detail);
  }
  spdlog::info("egressd programs in force at {} ({} attached, {} updated in place), pins under {}",
               cg_root, report.links_attached, report.links_updated, paths.pin_root);
  // Programs that do not enforce must not stay in force: a failed self-test
  // puts every hook back as it was before this load.
  if (absl::Status s = RunSelfTest(paths); !s.ok()) {
    absl::Status f = FailedAfter(s, changes);
    plan.Abandon();
    return f;
  }
  EGR_ASSIGN_OR_RETURN(report.migrations, plan.Finish());
  EGR_RETURN_IF_ERROR(WriteSchema(config_fd));
  WriteProgramsId(paths);
  return report;
}

absl::Status UnloadEnforcement(const Paths& paths, const InstanceLock&, bool force) {
  CollectDeadSelfTests(paths);
  if (auto maps = maps::PinnedMaps::Open(paths.pin_root); maps.ok()) {
    maps::SandboxTable table(*maps);
    EGR_ASSIGN_OR_RETURN(auto entries, table.List());
    int sandboxes = 0;
    for (const auto& e : entries) sandboxes += e.value.kind == EGR_CG_SANDBOX;
    if (sandboxes > 0 && !force) {
      return absl::FailedPreconditionError(absl::StrCat(
          sandboxes, " sandbox(es) are registered; unloading would leave them unenforced. "
                     "Remove them first or pass --force"));
    }
  }
  EGR_RETURN_IF_ERROR(RemoveTcProgram(paths));
  for (const auto& slot : kPrograms) {
    std::string pin = LinkPin(paths, slot.name);
    UniqueFd fd(bpf_obj_get(pin.c_str()));
    if (fd.valid() && bpf_link_detach(fd.get()) != 0 && DetachFailed(errno)) {
      return ErrnoStatus(errno, absl::StrCat("detach link ", pin));
    }
    if (unlink(pin.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("unpin ", pin));
  }
  rmdir(LinkDir(paths).c_str());
  // An interrupted migration's staging pins go with the rest.
  const std::string staging = StagingDir(paths);
  if (DIR* d = opendir(staging.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') unlink((staging + "/" + e->d_name).c_str());
    }
    closedir(d);
    rmdir(staging.c_str());
  }
  unlink(ProgramsIdPath(paths).c_str());
  // The maps go with the links: their pins are the only references left.
  if (DIR* d = opendir(paths.pin_root.c_str())) {
    std::vector<std::string> pins;
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.rfind("egr_", 0) == 0) pins.push_back(paths.pin_root + "/" + n);
    }
    closedir(d);
    for (const auto& p : pins) {
      if (unlink(p.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("unpin ", p));
    }
  }
  if (rmdir(paths.pin_root.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("remove pin dir ", paths.pin_root, " (unexpected pins left?)"));
  }
  spdlog::info("egressd unloaded: links detached, pins under {} removed", paths.pin_root);
  return absl::OkStatus();
}

std::vector<std::string> CgroupLinkNames() {
  std::vector<std::string> names;
  for (const auto& slot : kPrograms) {
    if (!slot.lsm) names.push_back(slot.name);
  }
  return names;
}

}  // namespace egressd
