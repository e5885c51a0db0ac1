#include "userspace/policy/names.h"

#include <algorithm>

#include "absl/status/status.h"
#include "userspace/policy/text.h"
#include "userspace/net/ip.h"
#include "userspace/policy/idn.h"

namespace egressd::policy {
namespace {

bool IsLdh(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
}

absl::Status Invalid(std::string why) {
  return absl::InvalidArgumentError(std::move(why));
}

absl::Status CheckLabels(std::string_view name) {
  const std::vector<std::string_view> labels = text::Split(name, '.');
  for (size_t i = 0; i < labels.size(); ++i) {
    const std::string_view l = labels[i];
    if (l.empty()) {
      if (i == 0) {
        return Invalid(
            "starts with a dot; to allow every name under a domain write "
            "\"*.example.com\"");
      }
      return Invalid("has an empty label (two dots in a row)");
    }
    if (l.size() > kMaxLabel) {
      return Invalid("has a label of " + std::to_string(l.size()) +
                     " characters; a label has at most 63");
    }
    for (char c : l) {
      if (!IsLdh(c)) {
        return Invalid("contains " + net::Quote(std::string_view(&c, 1)) +
                       "; a name has letters, digits, hyphens and dots");
      }
    }
    if (l.front() == '-' || l.back() == '-') {
      return Invalid("has a label that starts or ends with a hyphen");
    }
  }
  if (AllDigits(labels.back())) {
    return Invalid(
        "is neither an IP address nor a name (its last label is all digits)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> CanonicalName(std::string_view text) {
  if (!text.empty() && text.back() == '.') text.remove_suffix(1);
  if (text.empty()) return Invalid("is not a name (empty)");
  const bool non_ascii = std::any_of(text.begin(), text.end(), [](char c) {
    return static_cast<unsigned char>(c) >= 0x80;
  });
  std::string name;
  // ASCII names skip libidn2 (it would also refuse legal names with "--" in
  // the third and fourth places), except A-labels, which it decodes to check
  // they are real punycode.
  if (non_ascii || text::Lower(text).find("xn--") != std::string::npos) {
    auto ascii = IdnToAscii(text);
    if (!ascii.ok()) return ascii.status();
    name = *std::move(ascii);
  } else {
    name = std::string(text);
  }
  name = text::Lower(name);
  if (name.size() > kMaxName) {
    return Invalid("is " + std::to_string(name.size()) +
                   " characters long; a name has at most 253");
  }
  if (auto st = CheckLabels(name); !st.ok()) return st;
  return name;
}

bool IsSingleLabel(std::string_view canonical) {
  return canonical.find('.') == std::string_view::npos;
}

bool WildcardMatches(std::string_view suffix, std::string_view name) {
  return name.size() > suffix.size() + 1 && name.ends_with(suffix) &&
         name[name.size() - suffix.size() - 1] == '.';
}

std::string CanonicalQueryName(std::string_view qname) {
  if (!qname.empty() && qname.back() == '.') qname.remove_suffix(1);
  return text::Lower(qname);
}

bool NameAllowed(const CompiledPolicy& policy, std::string_view qname) {
  const std::string q = CanonicalQueryName(qname);
  // No wire-format name has an empty label; refusing them keeps this in step
  // with WildcardMatches.
  if (q.empty() || q.front() == '.' || q.find("..") != std::string::npos) return false;
  auto less = [](const NameRule& r, std::string_view v) { return r.name < v; };
  auto contains = [&](const std::vector<NameRule>& rules, std::string_view v) {
    auto it = std::lower_bound(rules.begin(), rules.end(), v, less);
    return it != rules.end() && it->name == v;
  };
  if (contains(policy.names, q)) return true;
  // Each proper suffix that starts after a dot: O(labels x log n).
  for (size_t dot = q.find('.'); dot != std::string::npos;
       dot = q.find('.', dot + 1)) {
    if (contains(policy.wildcard_suffixes, std::string_view(q).substr(dot + 1))) {
      return true;
    }
  }
  return false;
}

}  // namespace egressd::policy
