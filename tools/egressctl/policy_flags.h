#pragma once

#include "absl/status/statusor.h"
#include "tools/egressctl/commands.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::cli {

// The policy inputs (--config/--floor/--on-deny, --policy, --runtime,
// --egress, --grant, --kind, --compose) → a compiled policy with its
// warnings, or every problem at once (nothing is applied).
absl::StatusOr<policy::CompiledPolicy> CompileFlags(const PolicyFlags& flags);

// Prints each of the policy's warnings as "egressctl: warning: ...".
void PrintWarnings(const policy::CompiledPolicy& p);

// Prints "egressctl: <status>" and returns the exit code it maps to (2 for
// bad input, 1 otherwise).
int Report(const absl::Status& s);

}  // namespace egressd::cli
