#include "tools/egressctl/policy_flags.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "userspace/net/ip.h"
#include "userspace/policy/compiler.h"
#include "userspace/policy/declarations.h"
#include "userspace/policy/deployment_config.h"
#include "userspace/policy/floor.h"
#include "userspace/policy/public_suffix.h"
#include "userspace/policy/yaml_walk.h"

namespace egressd::cli {
namespace {

// Lines of an InvalidArgumentError, or the status itself as one line.
void AddErrors(std::vector<std::string>& errors, const absl::Status& s) {
  for (absl::string_view line : absl::StrSplit(s.message(), '\n')) {
    errors.emplace_back(line);
  }
}

// The file behind `flag`, or nullopt with the error recorded.
std::optional<std::string> ReadFlagFile(std::string_view flag,
                                        const std::string& path,
                                        std::vector<std::string>& errors) {
  auto text = policy::yaml::ReadInputFile(path);
  if (text.ok()) return *std::move(text);
  errors.push_back(std::string(flag) + " " + std::string(text.status().message()));
  return std::nullopt;
}

template <typename Parse>
std::optional<policy::Declaration> ReadDeclaration(
    std::string_view flag, const std::string& path, Parse parse,
    std::vector<std::string>& errors) {
  if (path.empty()) return std::nullopt;
  auto text = ReadFlagFile(flag, path, errors);
  if (!text) return std::nullopt;
  auto d = parse(*text, path);
  if (!d.ok()) {
    AddErrors(errors, d.status());
    return std::nullopt;
  }
  return *d;
}

// EGRESSD_PUBLIC_SUFFIX_LIST overrides Debian's path (tests use a fixture).
std::optional<policy::PublicSuffixList> LoadPublicSuffixes(std::string& path) {
  const char* env = std::getenv("EGRESSD_PUBLIC_SUFFIX_LIST");
  path = env != nullptr && *env != '\0'
             ? env
             : std::string(policy::PublicSuffixList::kDebianPath);
  auto psl = policy::PublicSuffixList::Load(path);
  if (!psl.ok()) return std::nullopt;
  return *std::move(psl);
}

}  // namespace

absl::StatusOr<policy::CompiledPolicy> CompileFlags(const PolicyFlags& flags) {
  std::vector<std::string> errors;
  std::string psl_path;
  const std::optional<policy::PublicSuffixList> psl =
      LoadPublicSuffixes(psl_path);
  const policy::PublicSuffixList* psl_ptr = psl ? &*psl : nullptr;

  // The deployment: a config file, or --floor as a one-machine config.
  std::optional<policy::DeploymentConfig> deployment;
  policy::Floor floor = policy::Floor::kConnected;
  if (auto f = policy::ParseFloor(flags.floor); f.ok()) {
    floor = *f;
  } else {
    errors.push_back(absl::StrCat("--floor ", f.status().message()));
  }
  auto action = policy::ParseDenyAction(flags.on_deny);
  if (!action.ok()) {
    errors.push_back(absl::StrCat("--on-deny ", action.status().message()));
  }
  if (!flags.config.empty()) {
    if (flags.floor_given) {
      errors.push_back(absl::StrCat(
          "--floor ", net::Quote(flags.floor),
          ": the deployment config sets the floor (airgapped, hostedEdge, "
          "protected); use one of --floor and --config"));
    }
    if (auto text = ReadFlagFile("--config", flags.config, errors)) {
      auto d = policy::ParseDeploymentConfig(*text, flags.config, psl_ptr);
      if (d.ok()) {
        deployment = *std::move(d);
      } else {
        AddErrors(errors, d.status());
      }
    }
  } else {
    deployment = policy::DeploymentForFloor(
        floor, action.ok() ? *action : policy::DenyAction::kReject);
  }
  if (deployment && flags.on_deny_given && action.ok()) {
    deployment->deny_action = *action;
  }

  policy::SandboxInputs in;
  in.task = ReadDeclaration("--policy", flags.policy,
                            policy::ParseTaskDeclaration, errors);
  in.runtime = ReadDeclaration("--runtime", flags.runtime,
                               policy::ParseRuntimeDeclaration, errors);
  in.run_targets = flags.egress;
  in.ships_services = flags.compose;
  if (!flags.kind.empty()) {
    auto k = policy::ParseWorkloadKind(flags.kind);
    if (k.ok()) {
      in.kind = *k;
    } else {
      errors.push_back(absl::StrCat("--kind ", k.status().message()));
    }
  } else if (!flags.runtime.empty()) {
    in.kind = policy::WorkloadKind::kRuntime;
  }
  for (const std::string& g : flags.grants) {
    auto grant = policy::ParseGrant(g);
    if (grant.ok()) {
      in.grants.push_back(*std::move(grant));
    } else {
      AddErrors(errors, grant.status());
    }
  }

  // Compile even when an input was bad, so every problem is reported at
  // once; without a usable deployment, against one that protects nothing,
  // which still finds every malformed target.
  policy::DeploymentConfig permissive;
  auto compiled = policy::Compile(deployment ? *deployment : permissive, in,
                                  {.public_suffixes = psl_ptr});
  if (!compiled.ok()) AddErrors(errors, compiled.status());
  if (!errors.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  }
  if (!psl && !compiled->wildcard_suffixes.empty()) {
    compiled->warnings.push_back(
        "the public suffix list " + net::Quote(psl_path) +
        " cannot be read (Debian package publicsuffix); wildcards over "
        "public suffixes are not flagged");
  }
  return compiled;
}

void PrintWarnings(const policy::CompiledPolicy& p) {
  for (const std::string& w : p.warnings) spdlog::warn("{}", w);
}

int Report(const absl::Status& s) {
  if (s.ok()) return kExitOk;
  std::string msg(s.message());
  if (s.code() == absl::StatusCode::kInvalidArgument) {
    std::fprintf(stderr, "egressctl: invalid input, nothing was changed:\n  %s\n",
                 absl::StrJoin(absl::StrSplit(msg, '\n'), "\n  ").c_str());
    return kExitBadInput;
  }
  std::fprintf(stderr, "egressctl: %s\n", msg.c_str());
  return kExitFailure;
}

}  // namespace egressd::cli
