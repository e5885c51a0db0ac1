#include "userspace/policy/compiled_policy_json.h"

namespace egressd::policy {

nlohmann::json ToJson(const CompiledPolicy& p) {
  nlohmann::json j;
  j["default"] = std::string(ToString(p.default_verdict));
  j["on_deny"] = std::string(ToString(p.deny_action));
  if (p.audit.audit_only) j["audit_only"] = true;
  if (p.audit.strict) j["strict_audit"] = true;
  j["protected"] = nlohmann::json::array();
  for (const ProtectedCidr& pc : p.protected_cidrs) {
    j["protected"].push_back({{"cidr", pc.cidr.ToString()}, {"source", pc.source}});
  }
  j["allowed"] = nlohmann::json::array();
  for (const AllowedCidr& a : p.allowed) {
    nlohmann::json ports = nlohmann::json::array();
    for (const PortRange& r : a.ports) ports.push_back(ToString(r));
    j["allowed"].push_back(
        {{"cidr", a.cidr.ToString()}, {"ports", ports}, {"source", a.source}});
  }
  j["names"] = nlohmann::json::array();
  for (const NameRule& n : p.names) {
    j["names"].push_back({{"name", n.name}, {"source", n.source}});
  }
  j["wildcards"] = nlohmann::json::array();
  for (const NameRule& w : p.wildcard_suffixes) {
    j["wildcards"].push_back({{"wildcard", "*." + w.name}, {"source", w.source}});
  }
  return j;
}

}  // namespace egressd::policy
