// What is pinned under an instance's bpffs directory, as the kernel sees it:
// every pin's path (relative to the pin root) with the id of the object
// behind it, and for a link the id of the program it runs.  Two snapshots
// are equal only when no pin was added, removed or re-pointed, no map
// replaced, no link re-created and no program swapped: what "enforcement
// untouched" means, checked against the kernel rather than a status call.
#pragma once

#include <bpf/bpf.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace egressd::test {

// path -> "map <id>" | "prog <id>" | "link <id> prog <id>" | "dir" | "error <what>".
using PinSnapshot = std::map<std::string, std::string>;

inline std::string DescribePinnedObject(const std::string& path) {
  const int fd = bpf_obj_get(path.c_str());
  if (fd < 0) return "error open";
  // The fd's anon inode names its kind ("anon_inode:bpf-map", -prog, -link).
  char kind[64] = {};
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t n = readlink(link.c_str(), kind, sizeof(kind) - 1);
  std::string out = "error kind";
  if (n > 0) {
    const std::string k(kind, static_cast<size_t>(n));
    if (k == "anon_inode:bpf-map") {
      bpf_map_info info{};
      uint32_t len = sizeof(info);
      if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) out = absl::StrCat("map ", info.id);
    } else if (k == "anon_inode:bpf-prog") {
      bpf_prog_info info{};
      uint32_t len = sizeof(info);
      if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) out = absl::StrCat("prog ", info.id);
    } else if (k == "anon_inode:bpf_link" || k == "anon_inode:bpf-link") {
      bpf_link_info info{};
      uint32_t len = sizeof(info);
      if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) out = absl::StrCat("link ", info.id, " prog ", info.prog_id);
    } else {
      out = "error kind " + k;
    }
  }
  close(fd);
  return out;
}

inline PinSnapshot SnapshotPins(const std::string& pin_root) {
  PinSnapshot out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(pin_root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::string rel = std::filesystem::relative(it->path(), pin_root, ec).string();
    out[rel] = it->is_directory(ec) ? "dir" : DescribePinnedObject(it->path().string());
  }
  if (ec) out["(walk)"] = "error " + ec.message();
  return out;
}

// The entries of `a` and `b` that differ, one per line ("path: a -> b"), for
// a failure message; empty when they are equal.
inline std::string PinDiff(const PinSnapshot& a, const PinSnapshot& b) {
  std::string out;
  for (const auto& [p, v] : a) {
    auto it = b.find(p);
    if (it == b.end()) {
      absl::StrAppend(&out, p, ": ", v, " -> (gone)\n");
    } else if (it->second != v) {
      absl::StrAppend(&out, p, ": ", v, " -> ", it->second, "\n");
    }
  }
  for (const auto& [p, v] : b) {
    if (!a.count(p)) absl::StrAppend(&out, p, ": (none) -> ", v, "\n");
  }
  return out;
}

}  // namespace egressd::test
