#include "loader/pin_check.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "maps/egressd_abi.h"
#include "userspace/common/errors.h"
#include "userspace/common/unique_fd.h"

namespace egressd {
namespace {

constexpr char kPinnedStatePayload[] = "egressd/pinned-state";

std::string TypeName(uint32_t type) {
  const char* s = libbpf_bpf_map_type_str(static_cast<bpf_map_type>(type));
  return s != nullptr ? absl::StrCat(s, " (", type, ")") : absl::StrCat(type);
}

}  // namespace

absl::Status PinnedStateError(const std::string& message) {
  absl::Status s = absl::FailedPreconditionError(message);
  s.SetPayload(kPinnedStatePayload, absl::Cord("1"));
  return s;
}

bool IsPinnedStateError(const absl::Status& s) { return s.GetPayload(kPinnedStatePayload).has_value(); }

absl::Status CompareShape(const MapShape& want, const MapShape& found, const std::string& pin) {
  std::vector<std::string> diffs;
  auto field = [&](const char* what, uint32_t w, uint32_t f, bool type = false) {
    if (w == f) return;
    diffs.push_back(type ? absl::StrCat(what, " expected ", TypeName(w), ", found ", TypeName(f))
                         : absl::StrCat(what, " expected ", w, ", found ", f));
  };
  field("type", want.type, found.type, true);
  field("key_size", want.key_size, found.key_size);
  field("value_size", want.value_size, found.value_size);
  field("max_entries", want.max_entries, found.max_entries);
  field("map_flags", want.flags, found.flags);
  if (diffs.empty()) return absl::OkStatus();
  return PinnedStateError(absl::StrCat(
      "pinned map ", want.name, " (", pin, ") does not have the layout this egressd's programs expect: ",
      absl::StrJoin(diffs, "; "),
      ". Refused, nothing was changed: the pin is another build's state under the same name (a layout change "
      "needs a new _vN name and a migration, loader/migrations/); unload that instance or point --pin-root elsewhere"));
}

std::vector<MapShape> DeclaredPinnedShapes(const bpf_object* obj) {
  std::vector<MapShape> out;
  const bpf_map* m = nullptr;
  bpf_object__for_each_map(m, obj) {
    if (bpf_map__pin_path(m) == nullptr) continue;  // .rodata/.bss: never pinned
    out.push_back({bpf_map__name(m), static_cast<uint32_t>(bpf_map__type(m)), bpf_map__key_size(m),
                   bpf_map__value_size(m), bpf_map__max_entries(m), bpf_map__map_flags(m)});
  }
  return out;
}

absl::StatusOr<MapShape> PinnedShape(const std::string& pin) {
  UniqueFd fd(bpf_obj_get(pin.c_str()));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("open pinned map ", pin));
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(fd.get(), &info, &len) != 0) {
    return ErrnoStatus(errno, absl::StrCat("read map info of ", pin));
  }
  return MapShape{info.name, info.type, info.key_size, info.value_size, info.max_entries, info.map_flags};
}

std::optional<std::pair<std::string, int>> SplitVersion(const std::string& name) {
  const size_t at = name.rfind("_v");
  int v = 0;
  if (at == std::string::npos || at == 0 || !absl::SimpleAtoi(name.substr(at + 2), &v) || v <= 0 ||
      name.substr(at + 2) != absl::StrCat(v)) {
    return std::nullopt;
  }
  return std::make_pair(name.substr(0, at), v);
}

absl::Status CheckNotNewer(const std::vector<std::string>& pinned_names, const std::vector<MapShape>& declared,
                           std::optional<uint32_t> pinned_schema, const std::string& pin_root) {
  std::vector<std::string> newer;
  if (pinned_schema && *pinned_schema > kPinSchema) {
    newer.push_back(absl::StrCat("the pinned schema is ", *pinned_schema, " (", pin_root, "/", EGR_MAP_CONFIG,
                                 "), this egressd knows schema ", kPinSchema));
  }
  for (const auto& d : declared) {
    auto mine = SplitVersion(d.name);
    if (!mine) continue;
    for (const auto& p : pinned_names) {
      auto theirs = SplitVersion(p);
      if (theirs && theirs->first == mine->first && theirs->second > mine->second) {
        newer.push_back(absl::StrCat(pin_root, "/", p, " is pinned, this egressd's layout is ", d.name));
      }
    }
  }
  if (newer.empty()) return absl::OkStatus();
  return PinnedStateError(absl::StrCat(
      "the pinned state is newer than this egressd (a downgrade): ", absl::StrJoin(newer, "; "),
      ". Refused, nothing was changed: run the newer egressd, or unload and load this one"));
}

}  // namespace egressd
