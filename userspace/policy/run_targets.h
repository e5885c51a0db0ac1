// The first `egressctl run` compiler: one machine, one sandbox, the --egress
// targets it was started with, addresses only.  egressctl now compiles with
// Compile() (compiler.h), which agrees with this on every address target
// (policy_conformance_test checks it); this stays for its callers.
#ifndef EGRESSD_USERSPACE_POLICY_RUN_TARGETS_H_
#define EGRESSD_USERSPACE_POLICY_RUN_TARGETS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/policy/compiled_policy.h"
#include "userspace/policy/floor.h"

namespace egressd::policy {

struct RunInputs {
  Floor floor = Floor::kConnected;
  DenyAction deny_action = DenyAction::kReject;
  std::vector<std::string> egress_targets;  // --egress values, in order
};

// Address and CIDR targets only: an FQDN or wildcard target is rejected
// saying this compiler takes no names (egressctl compiles names
// with Compile(), and its DNS proxy enforces them).
//
// No targets: the floor's default.  Any target: deny by default with the
// targets allowed, because a declaration states the whole scope.  A target
// the floor protects, or one spanning a protected range, fails rather than
// being dropped, so a sandbox never runs with less than it declared.  Every
// problem is reported at once, one line each, in one InvalidArgumentError.
absl::StatusOr<CompiledPolicy> CompileRun(const RunInputs& in);

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_RUN_TARGETS_H_
