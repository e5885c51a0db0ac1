// The compiled egress policy of one sandbox: the single value that crosses
// from policy compilation to the BPF maps (and later to the DNS proxy and an
// nftables rendering), so every consumer judges the same thing.
#ifndef EGRESSD_USERSPACE_POLICY_COMPILED_POLICY_H_
#define EGRESSD_USERSPACE_POLICY_COMPILED_POLICY_H_

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/common/enum_names.h"
#include "userspace/net/ip.h"

namespace egressd::policy {

enum class Verdict { kDeny, kAllow };
enum class DenyAction { kReject, kDrop };

inline constexpr EnumNames<Verdict, 2> kVerdictNames{{{
    {Verdict::kDeny, "deny"},
    {Verdict::kAllow, "allow"},
}}};
static_assert(kVerdictNames.Unique());

inline constexpr EnumNames<DenyAction, 2> kDenyActionNames{{{
    {DenyAction::kReject, "reject"},
    {DenyAction::kDrop, "drop"},
}}};
static_assert(kDenyActionNames.Unique());

// Inclusive, host order (as in struct egr_port_range).
struct PortRange {
  uint16_t first;
  uint16_t last;
  auto operator<=>(const PortRange&) const = default;
};

struct AllowedCidr {
  net::Cidr cidr;
  std::vector<PortRange> ports;  // empty = every port
  std::string source;            // where it came from, e.g. "run --egress"
  auto operator<=>(const AllowedCidr&) const = default;
};

struct ProtectedCidr {
  net::Cidr cidr;
  std::string source;  // e.g. "floor connected"
  auto operator<=>(const ProtectedCidr&) const = default;
};

// An exact name, or the suffix of a wildcard ("*.example.com" is stored as
// "example.com"): lower-case ASCII (IDN in punycode), no trailing dot.
struct NameRule {
  std::string name;
  std::string source;  // where it came from, e.g. "task" or "run --egress"

  NameRule() = default;
  // Implicit, so a list of names can be written as {"a.example", ...}.
  NameRule(std::string n, std::string s = {})
      : name(std::move(n)), source(std::move(s)) {}
  NameRule(const char* n) : name(n) {}
  auto operator<=>(const NameRule&) const = default;
};

// How a sandbox's audit trail bears on its enforcement (docs/audit.md).  Set
// by the operator at registration, never by a declaration: CompileInputs
// takes it from PolicyInputs::audit, and refuses audit_only unless the
// deployment config allows it.
struct AuditMode {
  // The policy's own denials (nothing it allows matched) are let through
  // and recorded as would-deny; protected ranges and the structural
  // refusals stay denied.  Such a sandbox is not enforced.
  bool audit_only = false;
  // A connect or send whose audit event cannot be recorded is refused.
  bool strict = false;
  bool operator==(const AuditMode&) const = default;
};

struct CompiledPolicy {
  Verdict default_verdict = Verdict::kAllow;
  DenyAction deny_action = DenyAction::kReject;
  // Denied whatever else the policy says; checked first.
  std::vector<ProtectedCidr> protected_cidrs;
  // Sorted and deduplicated; one entry per (cidr, ports), its sources joined
  // with ", ".
  std::vector<AllowedCidr> allowed;
  // Exact names, sorted by name, one entry per name.  The kernel cannot judge
  // a name: the DNS proxy resolves these and fills egr_resolved_v2.
  std::vector<NameRule> names;
  // "*.example.com" stored as "example.com", sorted, one entry per suffix.
  std::vector<NameRule> wildcard_suffixes;
  // Part of what the kernel enforces (egr_policy_val.flags) and of the
  // content hash: an audit-only or strict sandbox never shares a policy id
  // with an enforced one.
  AuditMode audit;
  // What the compiler noticed but accepted (a wildcard over a public suffix,
  // an ignored single-label host...), one sentence each.  Not policy content:
  // neither hashed nor printed by ToJson/ToText.
  std::vector<std::string> warnings;

  // Identical policies share one BPF policy id, and the id outlives the
  // process in pinned maps, so the hash must be the same in every process and
  // build: FNV-1a over a canonical serialization.  `source` strings are
  // ignored because they explain an entry without changing what it allows;
  // list order is ignored because no consumer depends on it.
  uint64_t ContentHash() const;
  // One entry a line, for operators.  (JSON: compiled_policy_json.h.)
  std::string ToText() const;

  bool operator==(const CompiledPolicy&) const = default;
};

std::string_view ToString(Verdict v);
std::string_view ToString(DenyAction a);
// A name of kDenyActionNames, or an error naming the value and the valid ones.
absl::StatusOr<DenyAction> ParseDenyAction(std::string_view text);

// "443" or "8000-8100".
std::string ToString(const PortRange& r);

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_COMPILED_POLICY_H_
