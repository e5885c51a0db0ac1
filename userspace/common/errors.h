// absl::Status from errno with the context a reader needs (what, which path).
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace egressd {

// Never kInvalidArgument: that code means "the caller's input is wrong, and
// nothing was changed" (exit 2), while an errno is the kernel's or the
// system's answer (a kernel EINVAL included) and exits 1.
inline absl::Status ErrnoStatus(int err, const std::string& what) {
  std::string msg = absl::StrCat(what, ": ", std::strerror(err), " (errno ", err, ")");
  switch (err) {
    case ENOENT: return absl::NotFoundError(msg);
    case EEXIST: return absl::AlreadyExistsError(msg);
    case EPERM:
    case EACCES: return absl::PermissionDeniedError(msg);
    case EBUSY:
    case EAGAIN: return absl::UnavailableError(msg);
    default: return absl::InternalError(msg);
  }
}

// libbpf returns -errno (or sets errno and returns NULL).
inline absl::Status LibbpfStatus(long ret, const std::string& what) {
  return ErrnoStatus(ret < 0 ? static_cast<int>(-ret) : errno, what);
}

}  // namespace egressd

#define EGR_RETURN_IF_ERROR(expr)            \
  do {                                       \
    absl::Status egr_status_ = (expr);       \
    if (!egr_status_.ok()) return egr_status_; \
  } while (0)

#define EGR_CONCAT_INNER(a, b) a##b
#define EGR_CONCAT(a, b) EGR_CONCAT_INNER(a, b)
#define EGR_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(*tmp)
#define EGR_ASSIGN_OR_RETURN(lhs, expr) \
  EGR_ASSIGN_OR_RETURN_IMPL(EGR_CONCAT(egr_statusor_, __LINE__), lhs, expr)
