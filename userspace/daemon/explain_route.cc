// GET /v1/sandboxes/{id}/explain?dest=ADDR&port=N&proto=tcp|udp: which rule
// of the sandbox's compiled policy allows or denies a destination, and why
// (userspace/policy/explain.h judges; this gathers what it judges over: the
// recorded policy, the learned address the kernel holds for that
// destination, the sandbox's and the node's DNS endpoints).
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "maps/dns_endpoints.h"
#include "maps/resolved_table.h"
#include "userspace/common/node.h"
#include "userspace/daemon/daemon.h"
#include "userspace/dns/scope.h"
#include "userspace/policy/compiled_policy_json.h"
#include "userspace/policy/explain.h"

namespace egressd::daemon {
namespace {

// application/x-www-form-urlencoded: %XX and '+'; nullopt for a broken escape.
std::optional<std::string> Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      const std::string hex(s.substr(i + 1, 2));
      char* end = nullptr;
      const long v = std::strtol(hex.c_str(), &end, 16);
      if (end != hex.c_str() + 2) return std::nullopt;
      out += static_cast<char>(v);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

nlohmann::json EndpointJson(const policy::DnsEndpoint& e) {
  return {{"addr", e.addr.ToString()}, {"port", e.port}};
}

nlohmann::json ExplanationJson(const policy::Explanation& e) {
  nlohmann::json j;
  j["verdict"] = e.allowed ? (e.would_deny ? "would_deny" : "allow") : "deny";
  j["allowed"] = e.allowed;
  j["rule"] = policy::kExplainStepNames.Name(e.step);
  j["why"] = e.why;
  j["judged"] = e.judged.ToString();
  if (!e.deny_action.empty()) j["deny_action"] = e.deny_action;
  if (e.cidr) j["cidr"] = e.cidr->ToString();
  if (e.embedded_v4) j["embedded_v4"] = e.embedded_v4->ToString();
  if (e.step == policy::ExplainStep::kAllowed) {
    nlohmann::json ports = nlohmann::json::array();
    for (const auto& r : e.ports) ports.push_back(policy::ToString(r));
    j["ports"] = ports;  // empty: every port
  }
  if (!e.source.empty()) j["source"] = e.source;
  if (e.learned) {
    j["learned"] = {{"addr", e.learned->addr.ToString()},
                    {"names", e.learned->rules},
                    {"expires_in_ms", e.learned->expires_in_ms},
                    {"expired", e.learned->expires_in_ms <= 0}};
  }
  if (e.endpoint) j["endpoint"] = EndpointJson(*e.endpoint);
  j["notes"] = e.notes;
  return j;
}

}  // namespace

Response Daemon::Explain(const std::string& id, const std::string& target) {
  if (absl::Status s = CheckSandboxId(id); !s.ok()) return FromStatus(s);
  const size_t mark = target.find('?');
  const std::string query = mark == std::string::npos ? "" : target.substr(mark + 1);
  std::map<std::string, std::string> args;
  for (absl::string_view part : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    const std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    auto key = Unescape(kv.first), value = Unescape(kv.second);
    if (!key || !value) {
      return ErrorResponse(400, "invalid_input", absl::StrCat("bad escape in query parameter ", net::Quote(std::string(part))));
    }
    if (*key != "dest" && *key != "port" && *key != "proto") {
      return ErrorResponse(400, "invalid_input",
                           absl::StrCat("unknown query parameter ", net::Quote(*key), "; valid: dest, port, proto"));
    }
    args[*key] = *value;
  }
  if (!args.contains("dest")) return ErrorResponse(400, "invalid_input", "missing query parameter dest");
  auto dest = policy::ParseDestination(args["dest"]);
  if (!dest.ok()) return FromStatus(dest.status());
  policy::ExplainQuery q;
  q.dest = dest->first;
  if (dest->second && args.contains("port")) {
    return ErrorResponse(400, "invalid_input",
                         absl::StrCat("dest ", net::Quote(args["dest"]), " has a port and port= gives another"));
  }
  if (args.contains("port")) {
    auto parsed = policy::ParseDestination(absl::StrCat("0.0.0.0:", args["port"]));
    if (!parsed.ok()) return ErrorResponse(400, "invalid_input", absl::StrCat("invalid port ", net::Quote(args["port"]), ": want 0-65535"));
    q.port = *parsed->second;
  } else {
    q.port = dest->second.value_or(0);
  }
  if (args.contains("proto")) {
    auto proto = policy::ParseProto(args["proto"]);
    if (!proto.ok()) return FromStatus(proto.status());
    q.proto = *proto;
  }

  auto record = Find(id);
  if (!record.ok()) return FromStatus(record.status());
  if (!*record) return ErrorResponse(404, "not_found", absl::StrCat("no sandbox ", net::Quote(id)));
  const control::SandboxRecord& r = **record;
  if (!r.current.policy) {
    return ErrorResponse(503, "unavailable",
                         absl::StrCat("sandbox ", net::Quote(id), ": its record holds no compiled policy (",
                                      r.note.empty() ? "reconciled from the maps" : r.note, ")"));
  }
  const policy::CompiledPolicy& p = *r.current.policy;

  if (auto ep = DnsEndpointOf(r)) {
    if (ep->addr4) q.dns4 = policy::DnsEndpoint{*ep->addr4, ep->port};
    if (ep->addr6) q.dns6 = policy::DnsEndpoint{*ep->addr6, ep->port};
  }
  auto endpoints = maps::DnsEndpoints::Open(options_.paths.pin_root);
  if (!endpoints.ok()) return FromStatus(endpoints.status());
  auto all = endpoints->List();
  if (!all.ok()) return FromStatus(all.status());
  for (const auto& e : *all) {
    for (const auto& a : {e.endpoint.addr4, e.endpoint.addr6}) {
      if (a) q.node_endpoints.push_back({*a, e.endpoint.port});
    }
  }
  if (r.netns_cookie != 0) {
    if (auto node = NetnsCookieOf(options_.paths.node_netns); node.ok()) q.own_netns = r.netns_cookie != *node;
  }

  // The learned address for this destination, as the kernel holds it.
  const net::IpAddr judged = policy::Explain(p, q).judged;
  maps::ResolvedTable table(*maps_);
  auto learned = table.Get(r.cgroup_id, judged);
  if (!learned.ok()) return FromStatus(learned.status());
  if (*learned) {
    std::map<uint32_t, std::string> rules;
    for (const auto& n : p.names) rules[dns::NameId(n.name)] = n.name;
    for (const auto& w : p.wildcard_suffixes) rules[dns::NameId("*." + w.name)] = "*." + w.name;
    policy::LearnedAddress l{judged, {}, 0};
    for (uint32_t nid : (*learned)->name_ids) {
      if (nid == 0) continue;
      auto it = rules.find(nid);
      l.rules.push_back(it != rules.end() ? it->second : absl::StrCat("a rule no longer in the policy (id ", nid, ")"));
    }
    const uint64_t now = maps::BootClockNs();
    const uint64_t until = (*learned)->expires_boot_ns;
    l.expires_in_ms = until > now ? static_cast<int64_t>((until - now) / 1'000'000) + 1 : 0;
    q.learned.push_back(l);
  }

  const policy::Explanation e = policy::Explain(p, q);
  nlohmann::json j = ExplanationJson(e);
  j["sandbox"] = id;
  j["dest"] = q.dest.ToString();
  j["port"] = q.port;
  j["proto"] = policy::kProtoNames.Name(q.proto);
  j["policy_id"] = r.current.policy_id;
  j["text"] = e.ToText();
  return Response{200, std::move(j)};
}

}  // namespace egressd::daemon
