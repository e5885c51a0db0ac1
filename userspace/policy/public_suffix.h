// The public suffix list (publicsuffix.org), read from Debian's
// `publicsuffix` package at run time: a wildcard over a public suffix
// ("*.github.io") reaches every site anyone registers there, which is worth
// a warning even though it is a legal scope.
#ifndef EGRESSD_USERSPACE_POLICY_PUBLIC_SUFFIX_H_
#define EGRESSD_USERSPACE_POLICY_PUBLIC_SUFFIX_H_

#include <string>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"

namespace egressd::policy {

class PublicSuffixList {
 public:
  static constexpr std::string_view kDebianPath =
      "/usr/share/publicsuffix/public_suffix_list.dat";

  // An empty list: nothing is a public suffix.
  PublicSuffixList() = default;

  // The list's text format: one rule a line (read up to the first
  // whitespace), "//" comments, "*.x" wildcard and "!x" exception rules.
  // Rules in Unicode are stored in punycode, as names are; a rule that does
  // not convert is skipped (it could never equal a canonical name).
  static PublicSuffixList Parse(std::string_view text);
  static absl::StatusOr<PublicSuffixList> Load(const std::string& path);

  // Whether canonical `name` is itself a public suffix: "co.uk",
  // "github.io", and with the rule "*.ck" any "x.ck" except an exception
  // such as "www.ck".
  bool IsPublicSuffix(std::string_view name) const;
  size_t size() const { return exact_.size() + wildcard_.size(); }

 private:
  absl::flat_hash_set<std::string> exact_;
  absl::flat_hash_set<std::string> wildcard_;   // "ck" for "*.ck"
  absl::flat_hash_set<std::string> exception_;  // "www.ck" for "!www.ck"
};

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_PUBLIC_SUFFIX_H_
