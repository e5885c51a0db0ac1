// Reading the rendered Kubernetes manifests (deploy/kubernetes) in tests: the
// documents of `kubectl kustomize` output, each parsed with the policy
// compiler's strict YAML reader, and the few lookups the checks need.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "userspace/policy/yaml_walk.h"

namespace egressd::test::manifest {

using policy::yaml::Node;

// The value at `key` of a mapping, or nullptr (not a mapping, no such key).
inline const Node* Get(const Node* node, const std::string& key) {
  if (node == nullptr || !node->IsMap()) return nullptr;
  for (const auto& [k, v] : node->map) {
    if (k->IsScalar() && k->scalar == key) return v;
  }
  return nullptr;
}

// Get along a dotted path ("spec.template.spec").
inline const Node* At(const Node* node, const std::string& path) {
  for (const auto& part : absl::StrSplit(path, '.')) node = Get(node, std::string(part));
  return node;
}

inline std::string Scalar(const Node* node) { return node && node->IsScalar() ? node->scalar : ""; }

// A sequence's scalars in order; empty for anything else.
inline std::vector<std::string> Scalars(const Node* node) {
  std::vector<std::string> out;
  if (node && node->IsSequence()) {
    for (const Node* item : node->items) out.push_back(Scalar(item));
  }
  return out;
}

// The item of a sequence whose `key` is `value` (a container by name, a
// volume by name, a mount by mountPath), or nullptr.
inline const Node* Find(const Node* seq, const std::string& key, const std::string& value) {
  if (seq == nullptr || !seq->IsSequence()) return nullptr;
  for (const Node* item : seq->items) {
    if (Scalar(Get(item, key)) == value) return item;
  }
  return nullptr;
}

// The documents of a multi-document YAML text (kustomize's "---" lines),
// parsed by `walker`, which owns them; syntax errors land in its errors.
inline std::vector<const Node*> Documents(policy::yaml::Walker& walker, const std::string& text) {
  std::vector<const Node*> out;
  for (absl::string_view doc : absl::StrSplit(text, absl::ByString("\n---\n"))) {
    const Node* n = walker.Load(std::string(doc), "rendered");
    if (n != nullptr && !n->IsNull()) out.push_back(n);
  }
  return out;
}

// The document of kind `kind` (and name, when given), or nullptr.
inline const Node* OfKind(const std::vector<const Node*>& docs, const std::string& kind,
                          const std::string& name = "") {
  for (const Node* d : docs) {
    if (Scalar(Get(d, "kind")) == kind && (name.empty() || Scalar(At(d, "metadata.name")) == name)) return d;
  }
  return nullptr;
}

}  // namespace egressd::test::manifest
