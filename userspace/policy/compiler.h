// The policy compiler: a deployment config and one sandbox's inputs to the
// CompiledPolicy that feeds the BPF maps (and later the DNS proxy).
//
//   auto deployment = ParseDeploymentConfig(yaml, "egressd.yaml", &psl);
//   SandboxInputs in;
//   in.kind = WorkloadKind::kAgent;
//   in.task = *ParseTaskDeclaration(task_yaml, "task.yaml");
//   in.run_targets = {"staging.example.com"};
//   auto policy = Compile(*deployment, in, {.public_suffixes = &psl});
#ifndef EGRESSD_USERSPACE_POLICY_COMPILER_H_
#define EGRESSD_USERSPACE_POLICY_COMPILER_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/common/enum_names.h"
#include "userspace/policy/compiled_policy.h"
#include "userspace/policy/declarations.h"
#include "userspace/policy/deployment_config.h"
#include "userspace/policy/public_suffix.h"

namespace egressd::policy {

// agent: an evaluation's agent runtime (deny-all unless declared);
// task: an evaluation's task environment; runtime: an interactive runtime.
enum class WorkloadKind { kAgent, kTask, kRuntime };

inline constexpr EnumNames<WorkloadKind, 3> kWorkloadKindNames{{{
    {WorkloadKind::kAgent, "agent"},
    {WorkloadKind::kTask, "task"},
    {WorkloadKind::kRuntime, "runtime"},
}}};
static_assert(kWorkloadKindNames.Unique());

// A name of kWorkloadKindNames, or an error naming the value and the valid
// ones.
absl::StatusOr<WorkloadKind> ParseWorkloadKind(std::string_view text);
std::string_view ToString(WorkloadKind kind);

// An orchestrator grant: an address or CIDR with the ports it may be reached
// on (an agent's paired environment's exposed ports).  Never from the task
// author: it does not turn the sandbox deny-by-default, and it is held to
// the floor like any target.
struct Grant {
  std::string target;             // address or CIDR, as given
  std::vector<PortRange> ports;   // sorted and merged; empty = every port
};

// "ADDR:PORTS", "CIDR:PORTS", "[V6ADDR]:PORTS" or "[V6CIDR]:PORTS", where
// PORTS is "443", "8000-8100" or a comma-separated list of them (1-65535).
absl::StatusOr<Grant> ParseGrant(std::string_view text);

struct SandboxInputs {
  WorkloadKind kind = WorkloadKind::kTask;
  // The task's declaration (nullopt: task.yaml has no `egress`).  Applies to
  // agent and task sandboxes.
  std::optional<Declaration> task;
  // The runtime's own declaration; governs a runtime sandbox only.
  std::optional<Declaration> runtime;
  // `--egress` targets, in order; they union with the declaration.
  std::vector<std::string> run_targets;
  std::vector<Grant> grants;
  // The task ships compose services: its sandbox reaches the deployment's
  // platform.containerRegistry.
  bool ships_services = false;
};

struct CompileOptions {
  const PublicSuffixes* public_suffixes = nullptr;  // null: no PSL warnings
  // True when egressd's DNS proxy serves this sandbox (egressctl run, or a
  // sandbox given a DNS endpoint): its names reach the addresses the proxy
  // learns.  Otherwise nothing resolves names for it, so a deny-by-default
  // sandbox that names hosts reaches none of them: say so.
  bool names_enforced = false;
};

// The sandbox's policy, or every problem at once (one line each:
// `<where> "<target>": <why>`, where is "task egress.allow[i]", "runtime
// sandbox.egress.allow[i]", "run --egress", "orchestrator grant" or
// "deployment setting NAME") in one InvalidArgumentError.
//
//  - Nothing declared on any surface: the deployment's default (deny when
//    airgapped), except an agent, which is deny-all.
//  - Anything declared (`allow: []` included, or a run target): deny by
//    default; the task's and the run's targets union (the run's alone when
//    the task declares nothing).
//  - Always reachable, on top: the deployment's `always` set, the grants, and
//    for a task shipping services the container registry.
//  - Every address target is held to the floor: one inside a protected
//    range, or spanning one, fails; it is never dropped or narrowed.
absl::StatusOr<CompiledPolicy> Compile(const DeploymentConfig& deployment,
                                       const SandboxInputs& in,
                                       const CompileOptions& options = {});

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_COMPILER_H_
