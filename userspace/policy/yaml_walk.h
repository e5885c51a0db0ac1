// Strict reading of the YAML inputs (declarations and the deployment
// config): unknown or duplicate keys, wrong types and extra documents are
// errors, collected rather than thrown, so one run reports them all.  A
// misspelt key must never read as an absent one: `egres:` silently meaning
// "no declaration" would leave a sandbox open.
//
// Parsed with libyaml (fuzzed upstream by OSS-Fuzz) into a small tree of our
// own.  yaml-cpp 0.7, Debian 12's, loops forever on inputs as small as ", a"
// (found by tests/fuzz), which a typo in a config must never do.
#ifndef EGRESSD_USERSPACE_POLICY_YAML_WALK_H_
#define EGRESSD_USERSPACE_POLICY_YAML_WALK_H_

#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace egressd::policy::yaml {

// Inputs larger than this are refused before parsing.
inline constexpr size_t kMaxInputBytes = 64 << 20;
// Nodes one input may hold, and how deep they may nest: far beyond any real
// declaration, well short of exhausting memory or the stack.
inline constexpr size_t kMaxNodes = 2'000'000;
inline constexpr int kMaxDepth = 64;

// A file's text, or why it cannot be read (naming it).
absl::StatusOr<std::string> ReadInputFile(const std::string& path);

struct Node {
  enum class Kind { kNull, kScalar, kSequence, kMapping };
  Kind kind = Kind::kNull;
  std::string scalar;                                    // kScalar
  std::vector<const Node*> items;                        // kSequence
  std::vector<std::pair<const Node*, const Node*>> map;  // kMapping, in order

  bool IsNull() const { return kind == Kind::kNull; }
  bool IsScalar() const { return kind == Kind::kScalar; }
  bool IsSequence() const { return kind == Kind::kSequence; }
  bool IsMap() const { return kind == Kind::kMapping; }
};

// One value found in the document and where ("egress.allow[2]").
struct Located {
  std::string path;
  std::string value;
};

class Walker {
 public:
  // `origin` starts every message: "task", "runtime", "deployment setting".
  Walker(std::string origin, std::vector<std::string>* errors)
      : origin_(std::move(origin)), errors_(errors) {}

  // The single document of `text` (a null node for an empty input), or
  // nullptr with the syntax error recorded naming `file`.  The tree lives as
  // long as the walker.
  const Node* Load(std::string_view text, std::string_view file);

  // "<origin> \"<path>\": <why>".
  void Error(std::string_view path, std::string_view why);
  size_t error_count() const { return errors_->size(); }

  // A mapping's entries, keys checked against `allowed` (empty: any key).
  // `unknown_hint` follows the "unknown key" message.  Nullopt when `node`
  // is not a mapping.
  std::optional<std::vector<std::pair<std::string, const Node*>>> Mapping(
      const Node& node, const std::string& path,
      const std::vector<std::string_view>& allowed,
      std::string_view unknown_hint);

  // A list of strings, or one string (when `scalar_ok`) as a list of one.
  std::optional<std::vector<Located>> Strings(const Node& node,
                                              const std::string& path,
                                              bool scalar_ok);
  std::optional<std::string> String(const Node& node, const std::string& path);
  // true | false (YAML 1.2: "yes", "on" and friends are not booleans).
  std::optional<bool> Bool(const Node& node, const std::string& path);

  static std::string Child(const std::string& path, std::string_view key);
  static std::string Index(const std::string& path, size_t i);

 private:
  std::string origin_;
  std::vector<std::string>* errors_;
  std::deque<Node> nodes_;  // the tree; a deque keeps pointers stable
};

}  // namespace egressd::policy::yaml

#endif  // EGRESSD_USERSPACE_POLICY_YAML_WALK_H_
