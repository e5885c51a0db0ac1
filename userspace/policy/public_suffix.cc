#include "userspace/policy/public_suffix.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "userspace/policy/names.h"
#include "userspace/policy/text.h"

namespace egressd::policy {

PublicSuffixList PublicSuffixList::Parse(std::string_view text) {
  PublicSuffixList psl;
  for (std::string_view line : text::Split(text, '\n')) {
    const size_t start = line.find_first_not_of(" \t\r");
    if (start == std::string_view::npos) continue;
    line.remove_prefix(start);
    line = line.substr(0, line.find_first_of(" \t\r"));
    if (line.empty() || line.starts_with("//")) continue;
    absl::flat_hash_set<std::string>* set = &psl.exact_;
    if (line.starts_with("!")) {
      line.remove_prefix(1);
      set = &psl.exception_;
    } else if (line.starts_with("*.")) {
      line.remove_prefix(2);
      set = &psl.wildcard_;
    }
    // The list's own entries go through the same canonical form as rules do,
    // so "公司.cn" in the list meets "xn--55qx5d.cn" in a declaration.
    auto name = CanonicalName(line);
    if (name.ok()) set->insert(*std::move(name));
  }
  return psl;
}

absl::StatusOr<PublicSuffixList> PublicSuffixList::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError("cannot read the public suffix list " + path);
  }
  std::ostringstream text;
  text << in.rdbuf();
  return Parse(text.str());
}

bool PublicSuffixList::IsPublicSuffix(std::string_view name) const {
  // The sets look up absl::string_view without a copy; std::string_view is a
  // different type in this Abseil.
  const absl::string_view n(name.data(), name.size());
  if (exception_.contains(n)) return false;
  if (exact_.contains(n)) return true;
  const size_t dot = n.find('.');
  return dot != absl::string_view::npos && wildcard_.contains(n.substr(dot + 1));
}

const PublicSuffixList* LazyPublicSuffixList::Get() const {
  std::call_once(once_, [this] {
    auto psl = PublicSuffixList::Load(path_);
    if (psl.ok()) list_ = *std::move(psl);
    read_ = true;  // after list_, so unreadable() never sees a half state
  });
  return list_ ? &*list_ : nullptr;
}

bool LazyPublicSuffixList::IsPublicSuffix(std::string_view name) const {
  const PublicSuffixList* psl = Get();
  return psl != nullptr && psl->IsPublicSuffix(name);
}

bool LazyPublicSuffixList::was_read() const { return read_; }

bool LazyPublicSuffixList::unreadable() const { return read_ && !list_; }

}  // namespace egressd::policy
