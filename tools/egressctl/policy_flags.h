#pragma once

#include "absl/status/statusor.h"
#include "tools/egressctl/commands.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::cli {

// --egress/--floor/--on-deny → a compiled policy, or every problem at once.
absl::StatusOr<policy::CompiledPolicy> CompileFlags(const PolicyFlags& flags);

// Prints "egressctl: <status>" and returns the exit code it maps to (2 for
// bad input, 1 otherwise).
int Report(const absl::Status& s);

}  // namespace egressd::cli
