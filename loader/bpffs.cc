#include "loader/bpffs.h"

#include <sys/mount.h>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"
#include "userspace/common/node.h"

namespace egressd {

absl::Status EnsureBpffs(const std::string& path) {
  if (IsBpffs(path)) return absl::OkStatus();
  EGR_RETURN_IF_ERROR(MakeDirs(path, 0700));
  if (mount("bpf", path.c_str(), "bpf", 0, "mode=0700") != 0) {
    return ErrnoStatus(errno, absl::StrCat("mount bpffs at ", path));
  }
  return absl::OkStatus();
}

}  // namespace egressd
