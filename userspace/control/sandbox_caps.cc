#include "userspace/control/sandbox_caps.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "maps/egressd_abi.h"
#include "maps/lpm_keys.h"
#include "maps/map_census.h"
#include "userspace/common/errors.h"

namespace egressd::control {

absl::StatusOr<CapUse> CountCapUse(const policy::CompiledPolicy& p) {
  EGR_ASSIGN_OR_RETURN(auto entries, maps::BuildAllowEntries(p.allowed));
  CapUse u;
  for (const auto& e : entries) (e.cidr.addr().is_v4() ? u.cidr4_entries : u.cidr6_entries)++;
  u.names = p.names.size() + p.wildcard_suffixes.size();
  return u;
}

std::vector<CapExceeded> ExceededCaps(const CapUse& use, const policy::SandboxLimits& limits) {
  std::vector<CapExceeded> out;
  auto check = [&](const char* cap, uint64_t limit, uint64_t count, const char* what) {
    if (count <= limit) return;
    out.push_back(CapExceeded{cap, limit, count,
                              absl::StrCat("deployment limit ", cap, " ", limit, ": the policy has ", count, " ",
                                           what, " (", count - limit, " over)")});
  };
  check("limits.maxCidrEntriesPerSandbox", limits.max_cidr4_entries, use.cidr4_entries,
        "IPv4 CIDR entries after folding");
  check("limits.maxCidr6EntriesPerSandbox", limits.max_cidr6_entries, use.cidr6_entries,
        "IPv6 CIDR entries after folding");
  check("limits.maxNamesPerSandbox", limits.max_names, use.names, "names and wildcard rules");
  return out;
}

absl::Status CheckSandboxCaps(const policy::CompiledPolicy& p, const policy::SandboxLimits& limits) {
  EGR_ASSIGN_OR_RETURN(CapUse use, CountCapUse(p));
  const auto over = ExceededCaps(use, limits);
  if (over.empty()) return absl::OkStatus();
  std::vector<std::string> lines;
  for (const auto& c : over) lines.push_back(c.message);
  lines.push_back("nothing was changed");
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

nlohmann::json CapsJson(const CapUse& use, const policy::SandboxLimits& limits, uint32_t learned_limit,
                        std::optional<uint64_t> learned_count) {
  nlohmann::json j = {{"cidr4_entries", {{"count", use.cidr4_entries}, {"limit", limits.max_cidr4_entries}}},
                      {"cidr6_entries", {{"count", use.cidr6_entries}, {"limit", limits.max_cidr6_entries}}},
                      {"names", {{"count", use.names}, {"limit", limits.max_names}}},
                      {"learned_addresses", {{"limit", learned_limit}}}};
  if (learned_count) j["learned_addresses"]["count"] = *learned_count;
  return j;
}

absl::StatusOr<std::vector<SharedMapUse>> SharedMapsUse(const Paths& paths) {
  EGR_ASSIGN_OR_RETURN(auto census, maps::CountPinnedMaps(paths.pin_root));
  static const std::pair<const char*, const char*> kShared[] = {
      {"allow4", EGR_MAP_ALLOW4},     {"allow6", EGR_MAP_ALLOW6},     {"prot4", EGR_MAP_PROT4},
      {"prot6", EGR_MAP_PROT6},       {"resolved", EGR_MAP_RESOLVED}, {"cgroups", EGR_MAP_CGROUPS},
      {"policies", EGR_MAP_POLICY},   {"dns_endpoints", EGR_MAP_DNS},
  };
  std::vector<SharedMapUse> out;
  for (const auto& [what, name] : kShared) {
    for (const auto& mc : census) {
      if (mc.name != name || !mc.entries) continue;
      out.push_back(SharedMapUse{what, mc.name, mc.max_entries, *mc.entries});
    }
  }
  return out;
}

uint64_t DeclaredNames(const std::vector<SandboxRecord>& records) {
  uint64_t n = 0;
  for (const auto& r : records) {
    if (r.current.policy) n += r.current.policy->names.size() + r.current.policy->wildcard_suffixes.size();
  }
  return n;
}

}  // namespace egressd::control
