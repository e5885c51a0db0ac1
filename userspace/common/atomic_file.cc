#include "userspace/common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"
#include "userspace/common/unique_fd.h"

namespace egressd {

absl::Status WriteFileAtomically(const std::string& path, absl::string_view text, mode_t mode,
                                 FileSync sync) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  auto fail = [&](int err, const char* step, const std::string& what) {
    unlink(tmp.c_str());
    return ErrnoStatus(err, absl::StrCat(step, " ", what));
  };
  {
    UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode));
    if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("create ", tmp));
    for (size_t done = 0; done < text.size();) {
      ssize_t n = write(fd.get(), text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail(errno, "write", tmp);
      done += static_cast<size_t>(n);
    }
    if (sync == FileSync::kDurable && fsync(fd.get()) != 0) return fail(errno, "fsync", tmp);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) return fail(errno, "rename", absl::StrCat(tmp, " to ", path));
  if (sync == FileSync::kWhole) return absl::OkStatus();
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  UniqueFd d(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d.valid()) return ErrnoStatus(errno, absl::StrCat("open ", dir));
  if (fsync(d.get()) != 0) return ErrnoStatus(errno, absl::StrCat("fsync ", dir));
  return absl::OkStatus();
}

}  // namespace egressd
