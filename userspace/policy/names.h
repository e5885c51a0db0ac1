// Host names in egress rules: their canonical form and how a wildcard
// matches.  One definition, shared by the compiler and (later) the DNS proxy,
// so what `egressctl policy check` accepts is what the proxy enforces.
#ifndef EGRESSD_USERSPACE_POLICY_NAMES_H_
#define EGRESSD_USERSPACE_POLICY_NAMES_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::policy {

// RFC 1035: 63 octets a label, 255 on the wire, which is 253 characters of
// text without the trailing dot.
inline constexpr size_t kMaxLabel = 63;
inline constexpr size_t kMaxName = 253;

// The canonical form of a name as a user wrote it: case folded, one trailing
// dot dropped, Unicode converted to punycode, every label 1-63 letters,
// digits or hyphens (not at either end), at most 253 characters, and a last
// label that is not all digits (that is a mistyped address, not a name).
// The error message says why, without the name (the caller quotes it).
absl::StatusOr<std::string> CanonicalName(std::string_view text);

// "localhost", "minio": no dot in the canonical name.
bool IsSingleLabel(std::string_view canonical);

// Whether wildcard suffix `suffix` ("example.com" for "*.example.com")
// matches canonical `name`: one or more whole labels before the suffix.
// Never the suffix itself, never "evilexample.com".
bool WildcardMatches(std::string_view suffix, std::string_view name);

// A name as a resolver asks for it (already ASCII): case folded, one trailing
// dot dropped.
std::string CanonicalQueryName(std::string_view qname);

// Whether `qname` is one of the policy's names or under one of its wildcards.
// Relies on CompiledPolicy's sorted name lists.
bool NameAllowed(const CompiledPolicy& policy, std::string_view qname);

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_NAMES_H_
