#pragma once

#include "absl/status/statusor.h"
#include "tools/egressctl/commands.h"
#include "userspace/policy/compiled_policy.h"
#include "userspace/policy/policy_inputs.h"

namespace egressd::cli {

// The policy flags (--config/--floor/--on-deny, --policy, --runtime,
// --egress, --grant, --kind, --compose) as the compiler's inputs, each named
// by its flag in messages; EGRESSD_PUBLIC_SUFFIX_LIST overrides the public
// suffix list's path.
policy::PolicyInputs ToPolicyInputs(const PolicyFlags& flags);

// policy::CompileInputs(ToPolicyInputs(flags)): the compiled policy with its
// warnings, or every problem at once (nothing is applied).  `dns_served`:
// egressd's DNS proxy serves the sandbox, so its names are enforced (no
// warning that they reach nothing).
// `sandbox`: run's and sandbox add's --audit-only/--strict-audit (the
// sandbox's audit mode); null for policy check/compile.
absl::StatusOr<policy::CompiledPolicy> CompileFlags(const PolicyFlags& flags, bool dns_served = false,
                                                    const SandboxFlags* sandbox = nullptr);

// Prints each of the policy's warnings as "egressctl: warning: ...".
void PrintWarnings(const policy::CompiledPolicy& p);

// Prints "egressctl: <status>" and returns the exit code it maps to (2 for
// bad input, 1 otherwise).
int Report(const absl::Status& s);

}  // namespace egressd::cli
