#include "userspace/common/fault.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace egressd {
namespace {

// The entry of `var`'s list that names `point` ("point" or "point=VALUE"):
// returns true and sets *value to what follows '=' (empty when none).
bool Armed(const char* var, std::string_view point, std::string* value) {
  const char* list = std::getenv(var);
  if (list == nullptr || *list == '\0') return false;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    absl::string_view name = entry.substr(0, entry.find('='));
    if (name != absl::string_view(point.data(), point.size())) continue;
    size_t eq = entry.find('=');
    *value = eq == absl::string_view::npos ? "" : std::string(entry.substr(eq + 1));
    return true;
  }
  return false;
}

int ErrnoByName(const std::string& name) {
  static constexpr struct {
    const char* name;
    int value;
  } kNames[] = {{"EPERM", EPERM}, {"EINVAL", EINVAL}, {"ENOSPC", ENOSPC}, {"E2BIG", E2BIG},
                {"EBUSY", EBUSY}, {"ENOENT", ENOENT}, {"EIO", EIO},       {"ENOMEM", ENOMEM}};
  for (const auto& n : kNames) {
    if (name == n.name) return n.value;
  }
  return EIO;
}

}  // namespace

int InjectedError(std::string_view point) {
  std::string value;
  if (!Armed("EGRESSD_FAULT", point, &value)) return 0;
  return ErrnoByName(value);
}

void CrashPoint(std::string_view point) {
  std::string value;
  if (!Armed("EGRESSD_CRASH_AT", point, &value)) return;
  int sig = value == "SIGTERM" ? SIGTERM : value == "SIGINT" ? SIGINT : value == "SIGHUP" ? SIGHUP : SIGKILL;
  // To the process, as kill(1) from outside would: a blocked signal stays
  // pending, a handled one runs its handler.
  kill(getpid(), sig);
  if (sig == SIGKILL) _exit(137);  // not reached
}

}  // namespace egressd
