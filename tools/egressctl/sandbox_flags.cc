#include "tools/egressctl/sandbox_flags.h"

#include <sys/stat.h>
#include <sys/vfs.h>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"
#include "userspace/common/node.h"

namespace egressd::cli {

absl::StatusOr<control::Labels> ParseLabels(const SandboxFlags& flags) {
  control::Labels labels;
  for (const auto& l : flags.labels) EGR_RETURN_IF_ERROR(control::ParseLabel(l, labels));
  return labels;
}

absl::StatusOr<control::SandboxSpec> MakeSandboxSpec(const SandboxFlags& flags, const std::string& path,
                                                     uint64_t cgroup_id, const std::string& default_netns) {
  control::SandboxSpec spec{.cgroup_id = cgroup_id, .cgroup_path = path};
  EGR_ASSIGN_OR_RETURN(spec.labels, ParseLabels(flags));
  const std::string netns = flags.netns.empty() ? default_netns : flags.netns;
  if (netns.empty()) return spec;
  struct stat st {};
  struct statfs fs {};
  if (stat(netns.c_str(), &st) != 0 || statfs(netns.c_str(), &fs) != 0 || fs.f_type != 0x6e736673 /* NSFS_MAGIC */) {
    return absl::InvalidArgumentError(absl::StrCat("--netns \"", netns, "\" is not a network namespace"));
  }
  spec.netns_inode = st.st_ino;
  EGR_ASSIGN_OR_RETURN(spec.netns_cookie, NetnsCookieOf(netns));
  return spec;
}

}  // namespace egressd::cli
