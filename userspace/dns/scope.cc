#include "userspace/dns/scope.h"

#include <algorithm>

#include "userspace/policy/names.h"

namespace egressd::dns {

uint32_t NameId(std::string_view rule) {
  uint32_t h = 2166136261u;
  for (unsigned char c : rule) {
    h ^= c;
    h *= 16777619u;
  }
  return h == 0 ? 1 : h;
}

std::vector<uint32_t> RuleIds(const policy::CompiledPolicy& p) {
  std::vector<uint32_t> ids;
  for (const auto& r : p.names) ids.push_back(NameId(r.name));
  for (const auto& r : p.wildcard_suffixes) ids.push_back(NameId("*." + r.name));
  return ids;
}

std::map<uint32_t, uint32_t> ExactQuestionIds(const policy::CompiledPolicy& p, const QnameKey& key) {
  std::map<uint32_t, uint32_t> ids;
  for (const auto& r : p.names) {
    if (const uint32_t q = key.Id(r.name); q != 0) ids.emplace(q, NameId(r.name));
  }
  return ids;
}

NameScope::NameScope(const policy::CompiledPolicy& policy) {
  policy_.names = policy.names;
  policy_.wildcard_suffixes = policy.wildcard_suffixes;
  // The compiler sorts them; a record edited by hand might not be.
  std::sort(policy_.names.begin(), policy_.names.end());
  std::sort(policy_.wildcard_suffixes.begin(), policy_.wildcard_suffixes.end());
  for (auto& r : policy_.names) r.source.clear();
  for (auto& r : policy_.wildcard_suffixes) r.source.clear();
}

std::vector<std::string> NameScope::Rules() const {
  std::vector<std::string> out;
  for (const auto& r : policy_.names) out.push_back(r.name);
  for (const auto& r : policy_.wildcard_suffixes) out.push_back("*." + r.name);
  return out;
}

std::optional<ScopeMatch> NameScope::Match(std::string_view qname) const {
  // The policy layer's own judgement first, so the two can never disagree.
  if (!policy::NameAllowed(policy_, qname)) return std::nullopt;
  const std::string q = policy::CanonicalQueryName(qname);
  auto has = [](const std::vector<policy::NameRule>& rules, std::string_view v) {
    auto it = std::lower_bound(rules.begin(), rules.end(), v,
                               [](const policy::NameRule& r, std::string_view x) { return r.name < x; });
    return it != rules.end() && it->name == v;
  };
  if (has(policy_.names, q)) return ScopeMatch{q, NameId(q)};
  for (size_t dot = q.find('.'); dot != std::string::npos; dot = q.find('.', dot + 1)) {
    std::string_view suffix = std::string_view(q).substr(dot + 1);
    if (has(policy_.wildcard_suffixes, suffix)) {
      std::string rule = "*." + std::string(suffix);
      uint32_t id = NameId(rule);
      return ScopeMatch{std::move(rule), id};
    }
  }
  return std::nullopt;  // unreachable while NameAllowed agrees
}

}  // namespace egressd::dns
