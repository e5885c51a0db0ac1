#include "userspace/policy/yaml_walk.h"

#include <yaml.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "userspace/net/ip.h"
#include "userspace/policy/text.h"

namespace egressd::policy::yaml {
namespace {

std::string QuotedList(const std::vector<std::string_view>& keys) {
  std::vector<std::string> q;
  for (std::string_view k : keys) q.push_back(net::Quote(k));
  return absl::StrJoin(q, ", ");
}

std::string At(const yaml_mark_t& m) {
  return "line " + std::to_string(m.line + 1) + ", column " +
         std::to_string(m.column + 1);
}

// YAML 1.2 core schema nulls, written plain ("null" in quotes is a string).
bool IsPlainNull(const yaml_event_t& e) {
  if (e.data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
  const std::string_view v(reinterpret_cast<const char*>(e.data.scalar.value),
                           e.data.scalar.length);
  return v.empty() || v == "~" || v == "null" || v == "Null" || v == "NULL";
}

std::string AnchorOf(const yaml_char_t* anchor) {
  return anchor == nullptr ? "" : reinterpret_cast<const char*>(anchor);
}

// Builds the tree from libyaml's events.  Aliases point at the anchored
// node, which is registered only once complete, so no alias can make a
// cycle.
class Builder {
 public:
  explicit Builder(std::deque<Node>& nodes) : nodes_(nodes) {}

  // Nullopt, or why the event cannot be taken.
  std::optional<std::string> Take(const yaml_event_t& e) {
    switch (e.type) {
      case YAML_DOCUMENT_START_EVENT:
        if (++documents_ > 1) return "";  // counted, reported by the caller
        return std::nullopt;
      case YAML_ALIAS_EVENT: {
        auto it = anchors_.find(AnchorOf(e.data.alias.anchor));
        if (it == anchors_.end()) return "alias to an unknown anchor";
        return Add(it->second);
      }
      case YAML_SCALAR_EVENT: {
        Node* n = New();
        if (n == nullptr) return TooMany();
        if (!IsPlainNull(e)) {
          n->kind = Node::Kind::kScalar;
          n->scalar.assign(reinterpret_cast<const char*>(e.data.scalar.value),
                           e.data.scalar.length);
        }
        Anchor(e.data.scalar.anchor, n);
        return Add(n);
      }
      case YAML_SEQUENCE_START_EVENT:
      case YAML_MAPPING_START_EVENT: {
        if (open_.size() >= static_cast<size_t>(kMaxDepth)) {
          return "nested deeper than " + std::to_string(kMaxDepth) + " levels";
        }
        Node* n = New();
        if (n == nullptr) return TooMany();
        const bool seq = e.type == YAML_SEQUENCE_START_EVENT;
        n->kind = seq ? Node::Kind::kSequence : Node::Kind::kMapping;
        if (auto why = Add(n)) return why;
        open_.push_back({n, nullptr,
                         AnchorOf(seq ? e.data.sequence_start.anchor
                                      : e.data.mapping_start.anchor)});
        return std::nullopt;
      }
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT: {
        Open done = open_.back();
        open_.pop_back();
        if (!done.anchor.empty()) anchors_[done.anchor] = done.node;
        return std::nullopt;
      }
      default:
        return std::nullopt;
    }
  }

  const Node* root() const { return root_; }
  int documents() const { return documents_; }

 private:
  struct Open {
    Node* node;
    const Node* key;  // a mapping's key awaiting its value
    std::string anchor;
  };

  Node* New() {
    if (nodes_.size() >= kMaxNodes) return nullptr;
    return &nodes_.emplace_back();
  }
  static std::string TooMany() {
    return "more than " + std::to_string(kMaxNodes) + " values";
  }
  void Anchor(const yaml_char_t* anchor, const Node* n) {
    if (anchor != nullptr) anchors_[AnchorOf(anchor)] = n;
  }

  std::optional<std::string> Add(const Node* n) {
    if (open_.empty()) {
      root_ = n;
      return std::nullopt;
    }
    Open& top = open_.back();
    if (top.node->kind == Node::Kind::kSequence) {
      top.node->items.push_back(n);
    } else if (top.key == nullptr) {
      top.key = n;
    } else {
      top.node->map.emplace_back(top.key, n);
      top.key = nullptr;
    }
    return std::nullopt;
  }

  std::deque<Node>& nodes_;
  std::vector<Open> open_;
  std::map<std::string, const Node*> anchors_;
  const Node* root_ = nullptr;
  int documents_ = 0;
};

}  // namespace

absl::StatusOr<std::string> ReadInputFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(net::Quote(path) + ": cannot be read");
  }
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxInputBytes) {
      return absl::InvalidArgumentError(net::Quote(path) +
                                        ": larger than 64 MiB");
    }
  }
  return text;
}

const Node* Walker::Load(std::string_view text, std::string_view file) {
  if (text.size() > kMaxInputBytes) {
    Error(file, "larger than 64 MiB");
    return nullptr;
  }
  yaml_parser_t parser;
  if (yaml_parser_initialize(&parser) == 0) {
    Error(file, "cannot start the YAML parser (out of memory)");
    return nullptr;
  }
  yaml_parser_set_input_string(
      &parser, reinterpret_cast<const unsigned char*>(text.data()), text.size());
  Builder builder(nodes_);
  std::optional<std::string> problem;
  std::string where;
  for (bool done = false; !done && !problem;) {
    yaml_event_t event;
    if (yaml_parser_parse(&parser, &event) == 0) {
      problem = text::EscapeControl(parser.problem ? parser.problem : "syntax error");
      if (parser.error == YAML_READER_ERROR) {
        // The reader (encoding, control characters) knows the byte, not
        // the line.
        where = "byte " + std::to_string(parser.problem_offset);
        if (parser.problem_value >= 0) {
          *problem += " (" + text::EscapeControl(std::string(
                                 1, static_cast<char>(parser.problem_value))) +
                      ")";
        }
      } else {
        where = At(parser.problem_mark);
        if (parser.context != nullptr) {
          *problem += " " + text::EscapeControl(parser.context);
        }
      }
      break;
    }
    done = event.type == YAML_STREAM_END_EVENT;
    problem = builder.Take(event);
    where = At(event.start_mark);
    yaml_event_delete(&event);
  }
  yaml_parser_delete(&parser);
  if (builder.documents() > 1) {
    Error(file, "has more than one YAML document; expected one");
    return nullptr;
  }
  if (problem) {
    Error(file, "invalid YAML at " + where + ": " + *problem);
    return nullptr;
  }
  if (builder.root() == nullptr) return &nodes_.emplace_back();  // empty: null
  return builder.root();
}

void Walker::Error(std::string_view path, std::string_view why) {
  std::string line = origin_ + " " + net::Quote(path) + ": " + std::string(why);
  // One problem repeated (an alias, say) is reported once.
  if (std::find(errors_->begin(), errors_->end(), line) == errors_->end()) {
    errors_->push_back(std::move(line));
  }
}

std::string Walker::Child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string Walker::Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

std::optional<std::vector<std::pair<std::string, const Node*>>> Walker::Mapping(
    const Node& node, const std::string& path,
    const std::vector<std::string_view>& allowed, std::string_view unknown_hint) {
  if (!node.IsMap()) return std::nullopt;
  std::vector<std::pair<std::string, const Node*>> out;
  for (const auto& [k, v] : node.map) {
    if (!k->IsScalar()) {
      Error(path, "has a key that is not a string");
      continue;
    }
    const std::string& key = k->scalar;
    const std::string where = Child(path, key);
    if (!allowed.empty() &&
        std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string why = "unknown key";
      why += unknown_hint.empty() ? "; valid: " + QuotedList(allowed)
                                  : "; " + std::string(unknown_hint);
      Error(where, why);
      continue;
    }
    if (std::any_of(out.begin(), out.end(),
                    [&key](const auto& e) { return e.first == key; })) {
      Error(where, "duplicate key");
      continue;
    }
    out.emplace_back(key, v);
  }
  return out;
}

std::optional<std::vector<Located>> Walker::Strings(const Node& node,
                                                    const std::string& path,
                                                    bool scalar_ok) {
  if (scalar_ok && node.IsScalar()) {
    return std::vector<Located>{{path, node.scalar}};
  }
  if (!node.IsSequence()) {
    Error(path, scalar_ok ? "must be a string or a list of strings"
                          : "must be a list");
    return std::nullopt;
  }
  std::vector<Located> out;
  out.reserve(node.items.size());
  for (size_t i = 0; i < node.items.size(); ++i) {
    const Node& item = *node.items[i];
    if (!item.IsScalar()) {
      Error(Index(path, i), item.IsNull() ? "is empty" : "must be a string");
      continue;
    }
    out.push_back({Index(path, i), item.scalar});
  }
  return out;
}

std::optional<std::string> Walker::String(const Node& node,
                                          const std::string& path) {
  if (!node.IsScalar()) {
    Error(path, "must be a string");
    return std::nullopt;
  }
  return node.scalar;
}

std::optional<bool> Walker::Bool(const Node& node, const std::string& path) {
  if (node.IsScalar()) {
    const std::string v = text::Lower(node.scalar);
    if (v == "true") return true;
    if (v == "false") return false;
    Error(path, "must be true or false, not " + net::Quote(node.scalar));
    return std::nullopt;
  }
  Error(path, "must be true or false");
  return std::nullopt;
}

}  // namespace egressd::policy::yaml
