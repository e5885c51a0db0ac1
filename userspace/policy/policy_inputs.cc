#include "userspace/policy/policy_inputs.h"

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "userspace/net/ip.h"
#include "userspace/policy/compiler.h"
#include "userspace/policy/declarations.h"
#include "userspace/policy/deployment_config.h"
#include "userspace/policy/floor.h"
#include "userspace/policy/text.h"
#include "userspace/policy/yaml_walk.h"

namespace egressd::policy {
namespace {

// Lines of an InvalidArgumentError.
void AddErrors(std::vector<std::string>& errors, const absl::Status& s) {
  const absl::string_view message = s.message();
  for (std::string_view line : text::Split({message.data(), message.size()}, '\n')) {
    errors.emplace_back(line);
  }
}

// The input's text, or nullopt with the error recorded under `label`.
std::optional<std::string> ReadInput(const std::string& label, const InputText& input,
                                     std::vector<std::string>& errors) {
  if (input.text) return *input.text;
  auto text = yaml::ReadInputFile(input.name);
  if (text.ok()) return *std::move(text);
  errors.push_back(label + " " + std::string(text.status().message()));
  return std::nullopt;
}

template <typename Parse>
std::optional<Declaration> ReadDeclaration(const std::string& label,
                                           const std::optional<InputText>& input,
                                           Parse parse, std::vector<std::string>& errors) {
  if (!input) return std::nullopt;
  auto text = ReadInput(label, *input, errors);
  if (!text) return std::nullopt;
  auto d = parse(*text, input->name);
  if (!d.ok()) {
    AddErrors(errors, d.status());
    return std::nullopt;
  }
  return *d;
}

// A named value, parsed, or nullopt with "<label> <why>" recorded.
template <typename T>
std::optional<T> ParseNamed(const std::string& label, const absl::StatusOr<T>& parsed,
                            std::vector<std::string>& errors) {
  if (parsed.ok()) return *parsed;
  errors.push_back(label + " " + std::string(parsed.status().message()));
  return std::nullopt;
}

}  // namespace

absl::StatusOr<CompiledPolicy> CompileInputs(const PolicyInputs& in) {
  const PolicyInputs::Labels& label = in.labels;
  std::vector<std::string> errors;
  LazyPublicSuffixList lazy_psl(in.public_suffix_path);
  const PublicSuffixes* psl = in.public_suffixes ? in.public_suffixes : &lazy_psl;

  // The deployment: a config, or the floor as a one-machine config.
  const Floor floor = in.floor ? ParseNamed(label.floor, ParseFloor(*in.floor), errors)
                                     .value_or(Floor::kConnected)
                               : Floor::kConnected;
  std::optional<DenyAction> action;
  if (in.on_deny) action = ParseNamed(label.on_deny, ParseDenyAction(*in.on_deny), errors);

  std::optional<DeploymentConfig> deployment;
  if (in.config) {
    if (in.floor) {
      errors.push_back(label.floor + " " + net::Quote(*in.floor) +
                       ": the deployment config sets the floor (airgapped, hostedEdge, "
                       "protected); use one of " + label.floor + " and " + label.config);
    }
    if (auto text = ReadInput(label.config, *in.config, errors)) {
      auto d = ParseDeploymentConfig(*text, in.config->name, psl);
      if (d.ok()) {
        deployment = *std::move(d);
      } else {
        AddErrors(errors, d.status());
      }
    }
  } else {
    deployment = DeploymentForFloor(floor, action.value_or(DenyAction::kReject));
  }
  if (deployment && action) deployment->deny_action = *action;
  if (in.audit.audit_only && deployment && !deployment->allow_audit_only) {
    errors.push_back(label.audit_only + ": the deployment config does not allow audit-only sandboxes (set " +
                     "audit: {allowAuditOnly: true} in " +
                     (in.config ? label.config + " " + net::Quote(in.config->name) : "a deployment config given with " + label.config) +
                     "); nothing is registered");
  }

  SandboxInputs sandbox;
  sandbox.task = ReadDeclaration(label.task, in.task, ParseTaskDeclaration, errors);
  sandbox.runtime = ReadDeclaration(label.runtime, in.runtime, ParseRuntimeDeclaration, errors);
  sandbox.run_targets = in.run_targets;
  sandbox.ships_services = in.ships_services;
  if (in.kind) {
    if (auto k = ParseNamed(label.kind, ParseWorkloadKind(*in.kind), errors)) sandbox.kind = *k;
  } else if (in.runtime) {
    sandbox.kind = WorkloadKind::kRuntime;
  }
  for (const std::string& g : in.grants) {
    auto grant = ParseGrant(g);
    if (grant.ok()) {
      sandbox.grants.push_back(*std::move(grant));
    } else {
      AddErrors(errors, grant.status());
    }
  }

  // Compile even when an input was bad, so every problem is reported at
  // once; without a usable deployment, against one that protects nothing,
  // which still finds every malformed target.
  const DeploymentConfig permissive;
  auto compiled = Compile(deployment ? *deployment : permissive, sandbox,
                          {.public_suffixes = psl, .names_enforced = in.dns_served});
  if (!compiled.ok()) AddErrors(errors, compiled.status());
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  compiled->audit = in.audit;
  if (lazy_psl.unreadable() && !compiled->wildcard_suffixes.empty()) {
    compiled->warnings.push_back(
        "the public suffix list " + net::Quote(lazy_psl.path()) +
        " cannot be read (Debian package publicsuffix); wildcards over "
        "public suffixes are not flagged");
  }
  return compiled;
}

}  // namespace egressd::policy
