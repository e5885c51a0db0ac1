// Which question names a sandbox may ask: its policy's exact names and
// `*.suffix` wildcards, judged exactly as userspace/policy/names.h defines
// them (case-insensitive, one trailing dot ignored, a wildcard never matching
// its own apex), so what `egressctl policy check` accepts is what is answered.
#ifndef EGRESSD_USERSPACE_DNS_SCOPE_H_
#define EGRESSD_USERSPACE_DNS_SCOPE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "userspace/dns/qname_key.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::dns {

struct ScopeMatch {
  std::string rule;  // "api.example.com" or "*.example.com"
  uint32_t name_id;  // stable id of the rule, stored with learned addresses
};

// A stable 32-bit id of a rule's text (FNV-1a), never 0.
uint32_t NameId(std::string_view rule);
// NameId() of every rule of `p` a learned address can carry: its names, and
// "*." + each wildcard suffix (what NameScope::Match stores).
std::vector<uint32_t> RuleIds(const policy::CompiledPolicy& p);
// For a policy change (maps' ResolvedTable::KeepRules): the keyed id of
// each exact name of `p` as a question (QnameKey::Id) -> that name's rule
// id (NameId).  An address answered for one of these names stays learned
// whatever rule allowed it then.
std::map<uint32_t, uint32_t> ExactQuestionIds(const policy::CompiledPolicy& p, const QnameKey& key);

class NameScope {
 public:
  NameScope() = default;
  explicit NameScope(const policy::CompiledPolicy& policy);

  // The rule that puts `qname` (as a resolver asks it: any case, optional
  // trailing dot) in scope; nullopt when none does.  An exact name wins over
  // a wildcard, a longer wildcard over a shorter one.
  std::optional<ScopeMatch> Match(std::string_view qname) const;

  size_t size() const { return policy_.names.size() + policy_.wildcard_suffixes.size(); }
  // Every rule's text as Match() reports it: the exact names, then
  // "*." + each wildcard suffix (NameId() of these are RuleIds()).
  std::vector<std::string> Rules() const;

 private:
  policy::CompiledPolicy policy_;  // only the sorted name lists are kept
};

}  // namespace egressd::dns

#endif  // EGRESSD_USERSPACE_DNS_SCOPE_H_
