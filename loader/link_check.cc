#include "loader/link_check.h"

#include <bpf/bpf.h>
#include <fcntl.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "loader/loader.h"
#include "userspace/common/errors.h"
#include "userspace/common/unique_fd.h"

namespace egressd {

namespace {

// The program ids attached to the cgroup at `cg_fd` for `type`.
absl::StatusOr<std::vector<uint32_t>> AttachedPrograms(int cg_fd, bpf_attach_type type) {
  std::vector<uint32_t> ids(64);
  for (;;) {
    uint32_t count = ids.size();
    uint32_t flags = 0;
    if (bpf_prog_query(cg_fd, type, 0, &flags, ids.data(), &count) == 0) {
      ids.resize(count);
      return ids;
    }
    // ENOSPC: more than we asked for; count says how many.
    if (errno != ENOSPC || count <= ids.size()) return ErrnoStatus(errno, absl::StrCat("BPF_PROG_QUERY attach type ", type));
    ids.resize(count);
  }
}

void Check(LinkState& s, int cg_fd, uint64_t root_id) {
  UniqueFd link(bpf_obj_get(s.pin.c_str()));
  if (!link.valid()) {
    s.problem = absl::StrCat("not pinned (", std::strerror(errno), ")");
    return;
  }
  bpf_link_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(link.get(), &info, &len) != 0) {
    s.problem = absl::StrCat("its link info cannot be read (", std::strerror(errno), ")");
    return;
  }
  if (info.type != BPF_LINK_TYPE_CGROUP) {
    s.problem = absl::StrCat("the pin holds a link of type ", info.type, ", not a cgroup link");
    return;
  }
  if (info.cgroup.cgroup_id == 0) {
    s.problem = "detached (its link is attached to no cgroup)";
    return;
  }
  if (info.cgroup.cgroup_id != root_id) {
    s.problem = absl::StrCat("attached to cgroup ", info.cgroup.cgroup_id, ", not the cgroup2 root (", root_id, ")");
    return;
  }
  auto ids = AttachedPrograms(cg_fd, static_cast<bpf_attach_type>(info.cgroup.attach_type));
  if (!ids.ok()) {
    s.problem = std::string(ids.status().message());
    return;
  }
  for (uint32_t id : *ids) {
    if (id == info.prog_id) {
      s.attached = true;
      return;
    }
  }
  s.problem = absl::StrCat("its program ", info.prog_id, " is not in the cgroup2 root's attach list");
}

}  // namespace

absl::StatusOr<std::vector<LinkState>> CheckCgroupLinks(const Paths& paths) {
  EGR_ASSIGN_OR_RETURN(std::string root, FindCgroup2Mount());
  EGR_ASSIGN_OR_RETURN(uint64_t root_id, CgroupIdOf(root));
  UniqueFd cg(open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cg.valid()) return ErrnoStatus(errno, absl::StrCat("open cgroup2 root ", root));
  std::vector<LinkState> out;
  for (const std::string& name : CgroupLinkNames()) {
    LinkState s{.name = name, .pin = absl::StrCat(paths.pin_root, "/links/", name)};
    Check(s, cg.get(), root_id);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<std::string> DetachedLinks(const std::vector<LinkState>& links) {
  std::vector<std::string> out;
  for (const auto& l : links) {
    if (!l.attached) out.push_back(absl::StrCat(l.name, ": ", l.problem));
  }
  return out;
}

}  // namespace egressd
