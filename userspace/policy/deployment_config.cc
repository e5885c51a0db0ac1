#include "userspace/policy/deployment_config.h"

#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "userspace/net/ip.h"
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
};

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
  if (node.IsNull()) return;
  auto entries = w.Mapping(node, "sandboxExtraEnv", {}, "");
  if (!entries) {
    w.Error("sandboxExtraEnv", "must be a mapping of variable names to values");
    return;
  }
  for (const auto& [name, value_ptr] : *entries) {
    const yaml::Node& value = *value_ptr;
    const std::string path = yaml::Walker::Child("sandboxExtraEnv", name);
    if (value.IsNull()) continue;  // an empty variable names no host
    if (auto v = w.String(value, path)) {
      raw.env.emplace_back(name, yaml::Located{path, *v});
    }
  }
}

std::optional<Raw> ReadRaw(yaml::Walker& w, const yaml::Node& doc,
                           std::string_view file) {
  Raw raw;
  if (doc.IsNull()) return raw;
  auto top = w.Mapping(doc, "",
                       {"airgapped", "hostedEdge", "protected", "onDeny",
                        "platform", "sealedInstalls", "egressExtraAllow",
                        "sandboxExtraEnv"},
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

}  // namespace

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
  if (raw->on_deny) {
    auto a = ParseDenyAction(raw->on_deny->value);
    if (a.ok()) {
      d.deny_action = *a;
    } else {
      w.Error(raw->on_deny->path, std::string(a.status().message()));
    }
  }
  d.protected_cidrs = ResolveFloor(*raw, errors);

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
  if (!errors.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  }
  return d;
}

}  // namespace egressd::policy
