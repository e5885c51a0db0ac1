// The per-sandbox declarations, read from YAML: a task's
// `egress: {allow: [...]}` (task.yaml) and a runtime's
// `sandbox: {egress: {allow: [...]}}` (runtime.yaml).
#ifndef EGRESSD_USERSPACE_POLICY_DECLARATIONS_H_
#define EGRESSD_USERSPACE_POLICY_DECLARATIONS_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace egressd::policy {

struct DeclaredTarget {
  std::string text;   // as written
  std::string where;  // "egress.allow[2]", for messages
};

// A declaration is present even when its list is empty: `allow: []` is the
// strongest scope there is, not the absence of one.
struct Declaration {
  std::vector<DeclaredTarget> allow;
};

// The task declaration in `yaml` (nullopt: no `egress` key, or an empty
// document).  The document holds the declaration only: any key other than
// `egress` at the top, or other than `allow` under it, is an error, and so is
// an `egress` without `allow` or an `allow` that is not a list (`allow:` with
// nothing after it included).  Targets are not judged here.  `file` names the
// input in syntax errors.  Every problem, one line each, in one
// InvalidArgumentError; each line starts "task ".
absl::StatusOr<std::optional<Declaration>> ParseTaskDeclaration(
    std::string_view yaml, std::string_view file);

// The same for a runtime: `sandbox: {egress: {allow: [...]}}`; lines start
// "runtime ".
absl::StatusOr<std::optional<Declaration>> ParseRuntimeDeclaration(
    std::string_view yaml, std::string_view file);

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_DECLARATIONS_H_
