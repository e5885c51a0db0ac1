#include "userspace/policy/deployment_config.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "userspace/net/ip.h"
#include "userspace/policy/runtime_kind.h"
#include "userspace/policy/targets.h"
#include "userspace/policy/urls.h"
#include "userspace/policy/yaml_walk.h"

namespace egressd::policy {
namespace {

constexpr std::string_view kOrigin = "deployment setting";

// The settings as written, before any target is judged: the floor has to be
// known before the first platform host is checked against it, and YAML keys
// come in any order.
struct Raw {
  bool airgapped = false;
  bool hosted_edge = false;
  bool sealed_installs = false;
  std::optional<yaml::Located> on_deny;
  std::vector<yaml::Located> protected_cidrs;
  // (setting, values): "platform.api" -> its URLs or targets.
  std::vector<std::pair<std::string, std::vector<yaml::Located>>> platform;
  std::vector<yaml::Located> extra_allow;
  std::vector<std::pair<std::string, yaml::Located>> env;  // (name, value)
  // dns: (issue 11)
  std::optional<std::vector<yaml::Located>> dns_upstreams;
  std::optional<yaml::Located> dns_endpoint4, dns_endpoint6;
  std::optional<yaml::Located> dns_min_ttl, dns_grace;  // (issue 12)
  std::optional<yaml::Located> dns_per_sandbox, dns_per_name;  // issue 12's bounds
  bool allow_audit_only = false;
  std::vector<yaml::Located> limits;  // limits.* (issue 14), as written
  std::vector<yaml::Located> flows;   // flows.* (issue 17), as written
  std::vector<yaml::Located> contained_roots;  // containedRoots (issue 14)
  std::optional<yaml::Located> metrics_address;
  std::vector<std::pair<std::string, yaml::Located>> runtime_classes;  // (class, runtime)
};

// ---- dns ----
void ReadDns(yaml::Walker& w, const yaml::Node& node, Raw& raw) {
  if (node.IsNull()) return;
  auto entries = w.Mapping(node, "dns",
                           {"upstreams", "endpoint4", "endpoint6", "minTtlSeconds", "graceSeconds",
                            "maxAddressesPerSandbox", "maxAddressesPerName"},
                           "");
  if (!entries) {
    w.Error("dns", "must be a mapping (upstreams, endpoint4, endpoint6, minTtlSeconds, graceSeconds, "
                   "maxAddressesPerSandbox, maxAddressesPerName)");
    return;
  }
  for (const auto& [key, value_ptr] : *entries) {
    const yaml::Node& value = *value_ptr;
    const std::string path = yaml::Walker::Child("dns", key);
    if (value.IsNull()) continue;
    if (key == "upstreams") {
      const size_t errors_before = w.error_count();
      auto v = w.Strings(value, path, /*scalar_ok=*/true);
      // An item that is no string was reported already; only a list written
      // empty is "empty".
      if (v && (!v->empty() || w.error_count() == errors_before)) raw.dns_upstreams = *std::move(v);
    } else if (key == "maxAddressesPerSandbox" || key == "maxAddressesPerName") {
      if (auto v = w.String(value, path)) {
        (key == "maxAddressesPerSandbox" ? raw.dns_per_sandbox : raw.dns_per_name) = yaml::Located{path, *v};
      }
    } else if (auto v = w.String(value, path)) {
      auto& into = key == "endpoint4"       ? raw.dns_endpoint4
                   : key == "endpoint6"     ? raw.dns_endpoint6
                   : key == "minTtlSeconds" ? raw.dns_min_ttl
                                            : raw.dns_grace;
      into = yaml::Located{path, *v};
    }
  }
}

DnsSettings ResolveDns(const Raw& raw, std::vector<std::string>& errors) {
  DnsSettings out;
  auto head = [](const yaml::Located& v) {
    return std::string(kOrigin) + " " + v.path + " " + net::Quote(v.value) + ": ";
  };
  if (raw.dns_upstreams) {
    if (raw.dns_upstreams->empty()) {
      AddLine(&errors, std::string(kOrigin) + " dns.upstreams: an empty list names no resolver (leave the key out)");
    }
    for (const yaml::Located& v : *raw.dns_upstreams) {
      auto u = ParseDnsUpstream(v.value);
      if (!u.ok()) {
        AddLine(&errors, head(v) + std::string(u.status().message()));
      } else if (std::find(out.upstreams.begin(), out.upstreams.end(), *u) != out.upstreams.end()) {
        AddLine(&errors, head(v) + "named twice (each upstream is asked once per round)");
      } else {
        out.upstreams.push_back(*u);
      }
    }
  }
  auto endpoint = [&](const std::optional<yaml::Located>& v, bool v4, std::optional<net::IpAddr>& into) {
    if (!v) return;
    auto a = net::IpAddr::Parse(v->value);
    if (!a.ok() || a->is_v4() != v4 || a->bytes() == std::array<uint8_t, 16>{}) {
      AddLine(&errors, head(*v) + (v4 ? "is not an IPv4 unicast address" : "is not an IPv6 unicast address"));
      return;
    }
    into = *a;
  };
  endpoint(raw.dns_endpoint4, true, out.endpoint4);
  endpoint(raw.dns_endpoint6, false, out.endpoint6);
  auto seconds = [&](const std::optional<yaml::Located>& v, uint32_t max, std::optional<uint32_t>& into) {
    if (!v) return;
    uint32_t n = 0;
    if (!absl::SimpleAtoi(v->value, &n) || n > max || v->value.empty() || v->value[0] == '+' || v->value[0] == '-') {
      AddLine(&errors, head(*v) + absl::StrCat("is not a whole number of seconds from 0 to ", max));
      return;
    }
    into = n;
  };
  seconds(raw.dns_min_ttl, kMaxMinTtlSeconds, out.min_ttl_s);
  seconds(raw.dns_grace, kMaxGraceSeconds, out.grace_s);
  auto count = [&](const std::optional<yaml::Located>& v, uint32_t& into) {
    if (!v) return true;
    uint32_t n = 0;
    if (!absl::SimpleAtoi(v->value, &n) || n == 0 || n > kMaxLearnedAddresses) {
      AddLine(&errors, head(*v) + "must be a whole number 1-" + std::to_string(kMaxLearnedAddresses) +
                           " (the node-wide map's capacity)");
      return false;
    }
    into = n;
    return true;
  };
  if (count(raw.dns_per_sandbox, out.max_addresses_per_sandbox) && count(raw.dns_per_name, out.max_addresses_per_name) &&
      out.max_addresses_per_name > out.max_addresses_per_sandbox) {
    AddLine(&errors, std::string(kOrigin) + " dns.maxAddressesPerName " + std::to_string(out.max_addresses_per_name) +
                         ": is more than dns.maxAddressesPerSandbox " + std::to_string(out.max_addresses_per_sandbox) +
                         " (a name's addresses count in its sandbox's quota)");
  }
  return out;
}
// ---- end dns ----


void ReadAudit(yaml::Walker& w, const yaml::Node& node, Raw& raw) {
  if (node.IsNull()) return;
  auto entries = w.Mapping(node, "audit", {"allowAuditOnly"}, "");
  if (!entries) {
    w.Error("audit", "must be a mapping");
    return;
  }
  for (const auto& [key, value_ptr] : *entries) {
    if (key == "allowAuditOnly") raw.allow_audit_only = w.Bool(*value_ptr, "audit.allowAuditOnly").value_or(false);
  }
}

// ---- limits ----
void ReadLimits(yaml::Walker& w, const yaml::Node& node, Raw& raw) {
  if (node.IsNull()) return;
  auto entries = w.Mapping(node, "limits", {"maxCidrEntriesPerSandbox", "maxCidr6EntriesPerSandbox", "maxNamesPerSandbox"}, "");
  if (!entries) {
    w.Error("limits", "must be a mapping (maxCidrEntriesPerSandbox, maxCidr6EntriesPerSandbox, maxNamesPerSandbox)");
    return;
  }
  for (const auto& [key, value_ptr] : *entries) {
    if (value_ptr->IsNull()) continue;
    const std::string path = yaml::Walker::Child("limits", key);
    if (auto v = w.String(*value_ptr, path)) raw.limits.push_back(yaml::Located{path, *v});
  }
}

SandboxLimits ResolveLimits(const Raw& raw, std::vector<std::string>& errors) {
  SandboxLimits out;
  for (const yaml::Located& v : raw.limits) {
    const bool v4 = v.path == "limits.maxCidrEntriesPerSandbox", v6 = v.path == "limits.maxCidr6EntriesPerSandbox";
    // A cap past the map's capacity would let one sandbox fill it.
    const uint32_t max = v4 ? kAllow4Capacity : v6 ? kAllow6Capacity : kMaxNamesPerSandbox;
    const char* what = v4 ? " (the IPv4 allow map's capacity)" : v6 ? " (the IPv6 allow map's capacity)" : "";
    uint32_t n = 0;
    if (v.value.empty() || v.value[0] == '+' || v.value[0] == '-' || !absl::SimpleAtoi(v.value, &n) || n == 0 ||
        n > max) {
      AddLine(&errors, std::string(kOrigin) + " " + v.path + " " + net::Quote(v.value) +
                           ": must be a whole number 1-" + std::to_string(max) + what);
      continue;
    }
    (v4 ? out.max_cidr4_entries : v6 ? out.max_cidr6_entries : out.max_names) = n;
  }
  return out;
}
// ---- end limits ----

// ---- flows: the tc flow table (issue 17) ----
void ReadFlows(yaml::Walker& w, const yaml::Node& node, Raw& raw) {
  if (node.IsNull()) return;
  auto entries =
      w.Mapping(node, "flows", {"maxPerSandbox", "tcpIdleSeconds", "tcpTransitorySeconds", "udpIdleSeconds"}, "");
  if (!entries) {
    w.Error("flows", "must be a mapping (maxPerSandbox, tcpIdleSeconds, tcpTransitorySeconds, udpIdleSeconds)");
    return;
  }
  for (const auto& [key, value_ptr] : *entries) {
    if (value_ptr->IsNull()) continue;
    const std::string path = yaml::Walker::Child("flows", key);
    if (auto v = w.String(*value_ptr, path)) raw.flows.push_back(yaml::Located{path, *v});
  }
}

FlowSettings ResolveFlows(const Raw& raw, std::vector<std::string>& errors) {
  FlowSettings out;
  for (const yaml::Located& v : raw.flows) {
    const bool quota = v.path == "flows.maxPerSandbox";
    // A quota past the map's capacity would let one sandbox fill it.
    const uint32_t max = quota ? kFlowCapacity : kMaxFlowTimeoutSeconds;
    const char* what = quota ? " (the node-wide flow map's capacity)" : " seconds";
    uint32_t n = 0;
    if (v.value.empty() || v.value[0] == '+' || v.value[0] == '-' || !absl::SimpleAtoi(v.value, &n) || n == 0 ||
        n > max) {
      AddLine(&errors, std::string(kOrigin) + " " + v.path + " " + net::Quote(v.value) +
                           ": must be a whole number 1-" + std::to_string(max) + what);
      continue;
    }
    (quota                                   ? out.max_per_sandbox
     : v.path == "flows.tcpIdleSeconds"      ? out.tcp_idle_s
     : v.path == "flows.tcpTransitorySeconds" ? out.tcp_transitory_s
                                              : out.udp_idle_s) = n;
  }
  return out;
}
// ---- end flows ----
// A mapping of names to strings (sandboxExtraEnv, runtimeClasses): each
// (name, value at its path); not a mapping is "SETTING: must be a mapping of
// WHAT"; a value that is no string is an error naming its path, a null one
// too unless `skip_null`.
std::vector<std::pair<std::string, yaml::Located>> ReadNamedStrings(yaml::Walker& w, const yaml::Node& node,
                                                                    const std::string& setting,
                                                                    const std::string& what, bool skip_null) {
  std::vector<std::pair<std::string, yaml::Located>> out;
  if (node.IsNull()) return out;
  auto entries = w.Mapping(node, setting, {}, "");
  if (!entries) {
    w.Error(setting, "must be a mapping of " + what);
    return out;
  }
  for (const auto& [name, value_ptr] : *entries) {
    if (skip_null && value_ptr->IsNull()) continue;
    const std::string path = yaml::Walker::Child(setting, name);
    if (auto v = w.String(*value_ptr, path)) out.emplace_back(name, yaml::Located{path, *v});
  }
  return out;
}

// ---- runtimeClasses: Kubernetes RuntimeClass name -> runtime (issue 17) ----
void ReadRuntimeClasses(yaml::Walker& w, const yaml::Node& node, Raw& raw) {
  raw.runtime_classes = ReadNamedStrings(w, node, "runtimeClasses", "RuntimeClass names to runtimes",
                                         /*skip_null=*/false);
}

// A RuntimeClass's name is a DNS-1123 subdomain (what the API server accepts).
bool IsRuntimeClassName(const std::string& n) {
  if (n.empty() || n.size() > 253 || n.front() == '-' || n.front() == '.' || n.back() == '-' || n.back() == '.') {
    return false;
  }
  return std::all_of(n.begin(), n.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'; });
}

std::map<std::string, std::string> ResolveRuntimeClasses(const Raw& raw, std::vector<std::string>& errors) {
  std::map<std::string, std::string> out;
  for (const auto& [name, v] : raw.runtime_classes) {
    const std::string head = std::string(kOrigin) + " " + v.path + " " + net::Quote(v.value) + ": ";
    if (!IsRuntimeClassName(name)) {
      AddLine(&errors, head + net::Quote(name) + " is not a RuntimeClass name (lower-case letters, digits, '-' and "
                                                 "'.', starting and ending with a letter or digit)");
    } else if (!RuntimeStackOf(v.value)) {
      AddLine(&errors, head + "not a runtime egressd knows: " + std::string(kKnownRuntimes));
    } else {
      out[name] = v.value;
    }
  }
  return out;
}
// ---- end runtimeClasses ----
void ReadMetrics(yaml::Walker& w, const yaml::Node& node, Raw& raw) {
  if (node.IsNull()) return;
  auto entries = w.Mapping(node, "metrics", {"address"}, "");
  if (!entries) {
    w.Error("metrics", "must be a mapping (address)");
    return;
  }
  for (const auto& [key, value_ptr] : *entries) {
    if (key == "address" && !value_ptr->IsNull()) {
      if (auto v = w.String(*value_ptr, "metrics.address")) raw.metrics_address = yaml::Located{"metrics.address", *v};
    }
  }
}

void ReadPlatform(yaml::Walker& w, const yaml::Node& node, Raw& raw) {
  if (node.IsNull()) return;
  auto entries = w.Mapping(
      node, "platform",
      {"api", "modelGateway", "objectStorage", "packageIndices",
       "containerRegistry"},
      "");
  if (!entries) {
    w.Error("platform", "must be a mapping");
    return;
  }
  for (const auto& [key, value_ptr] : *entries) {
    const yaml::Node& value = *value_ptr;
    const std::string setting = "platform." + key;
    if (value.IsNull()) continue;
    if (auto v = w.Strings(value, setting, /*scalar_ok=*/true)) {
      raw.platform.emplace_back(setting, *std::move(v));
    }
  }
}

void ReadEnv(yaml::Walker& w, const yaml::Node& node, Raw& raw) {
  // An empty variable names no host.
  raw.env = ReadNamedStrings(w, node, "sandboxExtraEnv", "variable names to values", /*skip_null=*/true);
}

std::optional<Raw> ReadRaw(yaml::Walker& w, const yaml::Node& doc,
                           std::string_view file) {
  Raw raw;
  if (doc.IsNull()) return raw;
  auto top = w.Mapping(doc, "",
                       {"airgapped", "hostedEdge", "protected", "onDeny",
                        "platform", "sealedInstalls", "egressExtraAllow",
                        "sandboxExtraEnv", "dns", "audit", "limits", "flows", "containedRoots", "metrics",
                        "runtimeClasses"},
                       "");
  if (!top) {
    w.Error(file, "must be a mapping of settings");
    return std::nullopt;
  }
  for (const auto& [key, value_ptr] : *top) {
    const yaml::Node& value = *value_ptr;
    if (key == "airgapped") {
      raw.airgapped = w.Bool(value, key).value_or(false);
    } else if (key == "hostedEdge") {
      raw.hosted_edge = w.Bool(value, key).value_or(false);
    } else if (key == "sealedInstalls") {
      raw.sealed_installs = w.Bool(value, key).value_or(false);
    } else if (key == "onDeny") {
      if (auto v = w.String(value, key)) raw.on_deny = yaml::Located{key, *v};
    } else if (key == "protected") {
      if (!value.IsNull()) {
        if (auto v = w.Strings(value, key, false)) raw.protected_cidrs = *v;
      }
    } else if (key == "egressExtraAllow") {
      if (!value.IsNull()) {
        if (auto v = w.Strings(value, key, false)) raw.extra_allow = *v;
      }
    } else if (key == "platform") {
      ReadPlatform(w, value, raw);
    } else if (key == "sandboxExtraEnv") {
      ReadEnv(w, value, raw);
    } else if (key == "dns") {
      ReadDns(w, value, raw);
    } else if (key == "audit") {
      ReadAudit(w, value, raw);
    } else if (key == "limits") {
      ReadLimits(w, value, raw);
    } else if (key == "flows") {
      ReadFlows(w, value, raw);
    } else if (key == "containedRoots") {
      if (!value.IsNull()) {
        if (auto v = w.Strings(value, key, false)) raw.contained_roots = *v;
      }
    } else if (key == "metrics") {
      ReadMetrics(w, value, raw);
    } else if (key == "runtimeClasses") {
      ReadRuntimeClasses(w, value, raw);
    }
  }
  return raw;
}

std::vector<ProtectedCidr> ResolveFloor(const Raw& raw,
                                        std::vector<std::string>& errors) {
  std::vector<ProtectedCidr> out;
  const std::string floor =
      raw.airgapped ? "floor airgapped" : "floor connected";
  for (const net::Cidr& c : CredentialEndpoints()) out.push_back({c, floor});
  if (raw.hosted_edge) {
    for (const net::Cidr& c : HostedEdgeRanges()) {
      out.push_back({c, std::string(kOrigin) + " hostedEdge"});
    }
  }
  for (const yaml::Located& p : raw.protected_cidrs) {
    const std::string head = std::string(kOrigin) + " " + p.path + " " +
                             net::Quote(p.value) + ": ";
    auto t = ParseTarget(p.value);
    if (!t.ok()) {
      AddLine(&errors, head + std::string(t.status().message()));
    } else if (t->kind != TargetKind::kCidr) {
      AddLine(&errors, head + "protected takes addresses and CIDRs (the "
                              "kernel judges addresses, never names)");
    } else {
      out.push_back({t->cidr, std::string(kOrigin) + " protected"});
    }
  }
  return out;
}

// One URL-or-target value of a setting.  A URL stands for its host.
void AddSettingValue(const ReachContext& ctx, SingleLabel single_label,
                     const std::string& path, const std::string& value,
                     const std::string& source, Reachable& into) {
  const std::string where = std::string(kOrigin) + " " + path;
  if (!LooksLikeUrl(value)) {
    AddTarget(ctx, single_label, where, value, value, {}, source, into);
    return;
  }
  const std::string shown = RedactUrl(value);
  auto host = UrlHost(value);
  if (!host.ok()) {
    AddLine(ctx.errors, where + " " + net::Quote(shown) + ": " +
                            std::string(host.status().message()));
    return;
  }
  if (host->empty()) {
    AddLine(ctx.errors, where + " " + net::Quote(shown) + ": has no host");
    return;
  }
  AddTarget(ctx, single_label, where, shown, *host, {}, source, into);
}

// containedRoots: absolute cgroup directory paths, written plainly (no
// ".", "..", empty or trailing components), each once.  Whether the
// directory exists is the daemon's to judge when it applies them.
std::vector<std::string> ResolveContainedRoots(const std::vector<yaml::Located>& values,
                                               std::vector<std::string>& errors) {
  std::vector<std::string> out;
  for (const yaml::Located& v : values) {
    const std::string head = std::string(kOrigin) + " " + v.path + " " + net::Quote(v.value) + ": ";
    bool plain = v.value.size() > 1 && v.value.front() == '/' && v.value.back() != '/';
    const std::string rest = v.value.substr(plain ? 1 : 0);
    for (absl::string_view part : absl::StrSplit(rest, '/')) {
      if (part.empty() || part == "." || part == "..") plain = false;
    }
    if (!plain) {
      AddLine(&errors, head + "not an absolute path of a cgroup v2 directory (written without \".\", \"..\" or "
                              "empty parts, e.g. /sys/fs/cgroup/kubepods.slice)");
    } else if (std::find(out.begin(), out.end(), v.value) != out.end()) {
      AddLine(&errors, head + "named twice");
    } else {
      out.push_back(v.value);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<DnsUpstreamSetting> ParseDnsUpstream(std::string_view text) {
  auto bad = [](std::string_view why) { return absl::InvalidArgumentError(std::string(why)); };
  std::string_view host = text, port_text;
  bool has_port = false;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return bad("no closing ] ([IPv6]:PORT)");
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return bad("expected :PORT after ]");
      port_text = rest.substr(1);
      has_port = true;
    }
  } else if (std::count(text.begin(), text.end(), ':') == 1) {
    const size_t colon = text.find(':');
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
    has_port = true;
  }
  auto ip = net::IpAddr::Parse(host);
  if (!ip.ok()) return bad("not an IP address (IP[:PORT], [IPv6]:PORT)");
  if (ip->bytes() == std::array<uint8_t, 16>{}) return bad("the unspecified address names no resolver");
  DnsUpstreamSetting s{*ip, 53};
  if (has_port) {
    uint32_t p = 0;
    if (!absl::SimpleAtoi(absl::string_view(port_text.data(), port_text.size()), &p) || p == 0 || p > 65535) return bad("port is not 1-65535");
    s.port = static_cast<uint16_t>(p);
  }
  return s;
}

absl::StatusOr<DnsUpstreamSetting> ParseMetricsAddress(std::string_view text) {
  const std::string value(text);
  const std::string head = absl::StrCat("metrics.address \"", value, "\": ");
  auto a = ParseDnsUpstream(value);
  if (!a.ok()) return absl::InvalidArgumentError(head + std::string(a.status().message()));
  if (value.back() == ']' || value.find(':') == std::string::npos ||
      (value.front() != '[' && std::count(value.begin(), value.end(), ':') != 1)) {
    return absl::InvalidArgumentError(head + "needs a port (IP:PORT or [IPv6]:PORT)");
  }
  if (a->addr.bytes() == std::array<uint8_t, 16>{} || a->addr.ToString() == "0.0.0.0") {
    return absl::InvalidArgumentError(
        head + "must be one address of the node and a port, not a wildcard (the kernel guards exactly it from every "
               "sandbox; in Kubernetes pass the node's IP: --metrics-address $(NODE_IP):PORT)");
  }
  return *a;
}

DeploymentConfig DeploymentForFloor(Floor floor, DenyAction action) {
  DeploymentConfig d;
  d.airgapped = floor == Floor::kAirgapped;
  d.deny_action = action;
  d.protected_cidrs = FloorProtected(floor);
  return d;
}

absl::StatusOr<DeploymentConfig> ParseDeploymentConfig(
    std::string_view text, std::string_view file, const PublicSuffixes* psl) {
  std::vector<std::string> errors;
  yaml::Walker w(std::string(kOrigin), &errors);
  auto doc = w.Load(text, file);
  std::optional<Raw> raw;
  if (doc) raw = ReadRaw(w, *doc, file);
  if (!raw) return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));

  DeploymentConfig d;
  d.airgapped = raw->airgapped;
  d.allow_audit_only = raw->allow_audit_only;
  if (raw->metrics_address) {
    auto a = ParseMetricsAddress(raw->metrics_address->value);
    if (a.ok()) {
      d.metrics_address = *a;
    } else {
      errors.push_back(absl::StrCat(std::string(kOrigin), " ", std::string(a.status().message())));
    }
  }
  if (raw->on_deny) {
    auto a = ParseDenyAction(raw->on_deny->value);
    if (a.ok()) {
      d.deny_action = *a;
    } else {
      w.Error(raw->on_deny->path, std::string(a.status().message()));
    }
  }
  d.protected_cidrs = ResolveFloor(*raw, errors);
  d.dns = ResolveDns(*raw, errors);
  d.limits = ResolveLimits(*raw, errors);
  d.flows = ResolveFlows(*raw, errors);
  d.runtime_classes = ResolveRuntimeClasses(*raw, errors);

  ReachContext ctx;
  ctx.protected_cidrs = &d.protected_cidrs;
  ctx.public_suffixes = psl;
  ctx.airgapped = raw->airgapped;
  ctx.errors = &errors;
  ctx.warnings = &d.warnings;
  Reachable sealed_away;  // validated like the rest, then left out
  for (const auto& [setting, values] : raw->platform) {
    Reachable* into = &d.always;
    if (setting == "platform.containerRegistry") into = &d.container_registry;
    if (setting == "platform.packageIndices" && raw->sealed_installs) {
      into = &sealed_away;
    }
    const std::string source = std::string(kOrigin) + " " + setting;
    for (const yaml::Located& v : values) {
      AddSettingValue(ctx, SingleLabel::kPlatform, v.path, v.value, source,
                      *into);
    }
  }
  for (const yaml::Located& v : raw->extra_allow) {
    AddTarget(ctx, SingleLabel::kIgnoreWarn,
              std::string(kOrigin) + " " + v.path, v.value, v.value, {},
              std::string(kOrigin) + " egressExtraAllow", d.always);
  }
  for (const auto& [name, v] : raw->env) {
    const std::string source = std::string(kOrigin) + " " + v.path;
    for (const std::string& url : UrlsInEnvValue(name, v.value)) {
      auto host = UrlHost(url);
      // A URL with no host ("file:///...") names nothing to reach.
      if (host.ok() && host->empty()) continue;
      AddSettingValue(ctx, SingleLabel::kIgnoreWarn, v.path, url, source,
                      d.always);
    }
  }
  d.contained_roots = ResolveContainedRoots(raw->contained_roots, errors);
  if (!errors.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  }
  return d;
}

}  // namespace egressd::policy
