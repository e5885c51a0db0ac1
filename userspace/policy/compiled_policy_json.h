// The compiled policy as JSON, for `egressctl policy compile -o json` and
// any API that returns a policy.  Apart from compiled_policy.h so that the
// units which only build or judge a policy do not compile nlohmann-json.
#ifndef EGRESSD_USERSPACE_POLICY_COMPILED_POLICY_JSON_H_
#define EGRESSD_USERSPACE_POLICY_COMPILED_POLICY_JSON_H_

#include "nlohmann/json.hpp"
#include "userspace/policy/compiled_policy.h"

namespace egressd::policy {

// {"default","on_deny","protected":[{"cidr","source"}],
//  "allowed":[{"cidr","ports":["443","8000-8100"],"source"}],
//  "names":[{"name","source"}],"wildcards":[{"wildcard":"*.x","source"}]}
// Warnings are not policy content and are left out.
nlohmann::json ToJson(const CompiledPolicy& p);

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_COMPILED_POLICY_JSON_H_
