// The public suffix list (publicsuffix.org), read from Debian's
// `publicsuffix` package at run time: a wildcard over a public suffix
// ("*.github.io") reaches every site anyone registers there, which is worth
// a warning even though it is a legal scope.
#ifndef EGRESSD_USERSPACE_POLICY_PUBLIC_SUFFIX_H_
#define EGRESSD_USERSPACE_POLICY_PUBLIC_SUFFIX_H_

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"

namespace egressd::policy {

// What the compiler asks of a public suffix list.
class PublicSuffixes {
 public:
  virtual ~PublicSuffixes() = default;
  // Whether canonical `name` is itself a public suffix.
  virtual bool IsPublicSuffix(std::string_view name) const = 0;
};

class PublicSuffixList : public PublicSuffixes {
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
  bool IsPublicSuffix(std::string_view name) const override;
  size_t size() const { return exact_.size() + wildcard_.size(); }

 private:
  absl::flat_hash_set<std::string> exact_;
  absl::flat_hash_set<std::string> wildcard_;   // "ck" for "*.ck"
  absl::flat_hash_set<std::string> exception_;  // "www.ck" for "!www.ck"
};

// The list in a file, read on the first question and never again: most
// policies have no wildcard, and the list is 230 KB to parse.  An unreadable
// file answers "not a public suffix" (the list only ever adds a warning).
class LazyPublicSuffixList : public PublicSuffixes {
 public:
  explicit LazyPublicSuffixList(std::string path) : path_(std::move(path)) {}
  LazyPublicSuffixList(const LazyPublicSuffixList&) = delete;
  LazyPublicSuffixList& operator=(const LazyPublicSuffixList&) = delete;

  bool IsPublicSuffix(std::string_view name) const override;

  const std::string& path() const { return path_; }
  // Whether a question made it read the file.
  bool was_read() const;
  // Whether it was read and could not be (so nothing was flagged).
  bool unreadable() const;

 private:
  const PublicSuffixList* Get() const;

  std::string path_;
  mutable std::once_flag once_;
  mutable std::optional<PublicSuffixList> list_;  // set once; nullopt: unreadable
  mutable std::atomic<bool> read_ = false;
};

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_PUBLIC_SUFFIX_H_
