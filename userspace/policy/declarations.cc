#include "userspace/policy/declarations.h"

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "userspace/policy/yaml_walk.h"

namespace egressd::policy {
namespace {

constexpr std::string_view kNoDenyList =
    "egress accepts one key, \"allow\" (there is no deny list: an allow list "
    "that omits a host keeps the sandbox off it)";
constexpr std::string_view kWriteEmpty =
    "write \"allow: []\" to declare nothing beyond the platform's services";

// `egress: {allow: [...]}` at `path`.
std::optional<Declaration> ReadEgress(yaml::Walker& w, const yaml::Node& node,
                                      const std::string& path) {
  const size_t errors_before = w.error_count();
  auto entries = w.Mapping(node, path, {"allow"}, kNoDenyList);
  if (!entries) {
    w.Error(path, node.IsNull() ? "is empty; " + std::string(kWriteEmpty)
                                : "must be a mapping with the one key "
                                  "\"allow\"");
    return std::nullopt;
  }
  const std::string allow_path = yaml::Walker::Child(path, "allow");
  for (const auto& [key, value_ptr] : *entries) {
    const yaml::Node& value = *value_ptr;
    if (value.IsNull()) {
      w.Error(allow_path, "is empty (null); " + std::string(kWriteEmpty));
      return std::nullopt;
    }
    auto items = w.Strings(value, allow_path, /*scalar_ok=*/false);
    if (!items) return std::nullopt;
    Declaration d;
    d.allow.reserve(items->size());
    for (auto& item : *items) {
      d.allow.push_back({std::move(item.value), std::move(item.path)});
    }
    return d;
  }
  // A mapping without `allow`; when its keys were unknown, that error says
  // enough.
  if (w.error_count() == errors_before) {
    w.Error(path, "has no \"allow\" list; " + std::string(kWriteEmpty));
  }
  return std::nullopt;
}

absl::StatusOr<std::optional<Declaration>> Finish(
    std::vector<std::string>& errors, std::optional<Declaration> d) {
  if (!errors.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  }
  return d;
}

}  // namespace

absl::StatusOr<std::optional<Declaration>> ParseTaskDeclaration(
    std::string_view text, std::string_view file) {
  std::vector<std::string> errors;
  yaml::Walker w("task", &errors);
  auto doc = w.Load(text, file);
  if (!doc) return Finish(errors, std::nullopt);
  if (doc->IsNull()) return std::optional<Declaration>();
  auto top = w.Mapping(*doc, "", {"egress"},
                       "a task declaration has one key, \"egress\"");
  if (!top) {
    w.Error(file, "must be a mapping with the one key \"egress\"");
    return Finish(errors, std::nullopt);
  }
  std::optional<Declaration> d;
  for (const auto& [key, value] : *top) d = ReadEgress(w, *value, "egress");
  return Finish(errors, std::move(d));
}

absl::StatusOr<std::optional<Declaration>> ParseRuntimeDeclaration(
    std::string_view text, std::string_view file) {
  std::vector<std::string> errors;
  yaml::Walker w("runtime", &errors);
  auto doc = w.Load(text, file);
  if (!doc) return Finish(errors, std::nullopt);
  if (doc->IsNull()) return std::optional<Declaration>();
  auto top = w.Mapping(*doc, "", {"sandbox"},
                       "a runtime declaration has one key, \"sandbox\"");
  if (!top) {
    w.Error(file, "must be a mapping with the one key \"sandbox\"");
    return Finish(errors, std::nullopt);
  }
  std::optional<Declaration> d;
  for (const auto& [key, sandbox_ptr] : *top) {
    const yaml::Node& sandbox = *sandbox_ptr;
    if (sandbox.IsNull()) continue;  // `sandbox:` with nothing: no egress
    auto inner = w.Mapping(sandbox, "sandbox", {"egress"},
                           "sandbox has one key here, \"egress\"");
    if (!inner) {
      w.Error("sandbox", "must be a mapping with the one key \"egress\"");
      continue;
    }
    for (const auto& [k, egress] : *inner) {
      d = ReadEgress(w, *egress, "sandbox.egress");
    }
  }
  return Finish(errors, std::move(d));
}

}  // namespace egressd::policy
