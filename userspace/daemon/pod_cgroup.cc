#include "userspace/daemon/pod_cgroup.h"

#include <sys/stat.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace egressd::daemon {
namespace {

bool LowerHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string Basename(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

absl::Status CheckPodUid(const std::string& uid) {
  bool ok = false;
  if (uid.size() == 36) {
    ok = true;
    for (size_t i = 0; i < uid.size(); ++i) {
      const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
      ok &= dash ? uid[i] == '-' : LowerHex(uid[i]);
    }
  } else if (uid.size() == 32) {
    ok = true;
    for (char c : uid) ok &= LowerHex(c);
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "field pod_uid \"", absl::CEscape(uid),
      "\" is not a pod UID (a lowercase UUID 8-4-4-4-12, or 32 lowercase hex digits for a static pod)"));
}

std::vector<std::string> PodCgroupCandidates(const std::string& root_in, const std::string& uid) {
  std::string root(absl::StripSuffix(root_in, "/"));
  std::vector<std::string> out;
  // cgroupfs driver: plain directory names.
  out.push_back(absl::StrCat(root, "/kubepods/pod", uid));
  for (const char* qos : {"burstable", "besteffort"}) out.push_back(absl::StrCat(root, "/kubepods/", qos, "/pod", uid));
  // systemd driver: each slice's name is its parent's name plus "-<part>".
  std::string prefix;
  const std::string base = Basename(root);
  if (absl::EndsWith(base, ".slice") && base != "-.slice") prefix = absl::StrCat(absl::StripSuffix(base, ".slice"), "-");
  const std::string kubepods = absl::StrCat(prefix, "kubepods");
  const std::string u = absl::StrReplaceAll(uid, {{"-", "_"}});
  out.push_back(absl::StrCat(root, "/", kubepods, ".slice/", kubepods, "-pod", u, ".slice"));
  for (const char* qos : {"burstable", "besteffort"}) {
    const std::string q = absl::StrCat(kubepods, "-", qos);
    out.push_back(absl::StrCat(root, "/", kubepods, ".slice/", q, ".slice/", q, "-pod", u, ".slice"));
  }
  return out;
}

absl::StatusOr<std::string> FindPodCgroup(const std::vector<std::string>& roots, const std::string& uid) {
  if (absl::Status s = CheckPodUid(uid); !s.ok()) return s;
  std::vector<std::string> found;
  for (const auto& root : roots) {
    for (auto& c : PodCgroupCandidates(root, uid)) {
      if (IsDirectory(c)) found.push_back(std::move(c));
    }
  }
  if (found.size() == 1) return found[0];
  if (found.empty()) {
    return absl::NotFoundError(absl::StrCat("no cgroup for pod_uid \"", uid, "\" under ", absl::StrJoin(roots, ", "),
                                            " (kubelet cgroupfs or systemd layout)"));
  }
  return absl::InvalidArgumentError(absl::StrCat("field pod_uid \"", uid, "\" is ambiguous: ", found.size(),
                                                 " cgroups match (", absl::StrJoin(found, ", "),
                                                 "); give \"cgroup\" instead"));
}

}  // namespace egressd::daemon
