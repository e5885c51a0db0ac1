// The body of PUT /v1/sandboxes/{id}: egressctl sandbox add's inputs as
// JSON (docs/api.md), checked field by field before anything is compiled.
// Every problem is reported at once, each naming its field; a field the API
// does not know is a problem too (a typo must never pass as "no setting").
// What the deployment decides (floor, config, protected ranges) is no field:
// no request can lower the daemon's floor.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "userspace/control/sandbox_record.h"
#include "userspace/policy/policy_inputs.h"

namespace egressd::daemon {

// The label the daemon records a sandbox's API id under; requests may not
// set labels under "egressd/".
inline constexpr char kIdLabel[] = "egressd/id";

// The API id a record was registered under (its kIdLabel), if any.
inline std::optional<std::string> ApiIdOf(const control::SandboxRecord& r) {
  auto it = r.labels.find(kIdLabel);
  if (it == r.labels.end()) return std::nullopt;
  return it->second;
}

struct SandboxRequest {
  std::string cgroup;                 // cgroup v2 directory (absolute path), or
  std::string pod_uid;                // a Kubernetes pod UID (pod_cgroup.h): at most one of the two,
                                      // none only with interface/interface_netns (an interface-only sandbox)
  control::Labels labels;             // pod, namespace, task, run, ...
  std::optional<std::string> task;    // task declaration (YAML or JSON text)
  std::optional<std::string> runtime; // runtime declaration
  std::optional<std::string> kind;
  std::vector<std::string> egress;    // run targets
  std::vector<std::string> grants;    // "ADDR:PORTS"
  bool compose = false;
  std::optional<std::string> on_deny;
  bool audit_only = false;
  bool strict_audit = false;
  std::string dns_endpoint4, dns_endpoint6;  // empty: the config's dns.endpoint4/6
  bool require_socket_containment = false;   // refuse even where the daemon accepts uncontained
  // Judged at the node end of its pod's veth too (issue 17): by name, or the
  // one veth of this netns; at most one of the two.
  std::string interface, interface_netns;
  // The runtime running it (control/sandbox_runtime.h): one that sends from
  // its own stack (gvisor, kata, firecracker) needs interface/interface_netns.
  std::string sandbox_runtime;
  // The pod's Kubernetes RuntimeClass (issue 17), which the deployment's
  // runtimeClasses map to a runtime: ResolveRuntimeClass sets
  // sandbox_runtime from it.
  std::string runtime_class;
  bool by_interface() const { return !interface.empty() || !interface_netns.empty(); }
  bool interface_only() const { return cgroup.empty() && pod_uid.empty() && by_interface(); }
};

// A sandbox id: 1 to 63 of [A-Za-z0-9._-], starting with a letter or digit
// (a pod name, a Kubernetes UID).  InvalidArgument naming it otherwise.
absl::Status CheckSandboxId(const std::string& id);

// InvalidArgument listing every problem, one a line.
absl::StatusOr<SandboxRequest> ParseSandboxRequest(const std::string& body);

// runtime_class through the deployment's runtimeClasses (class -> runtime):
// sets sandbox_runtime, then holds the registration to that runtime as
// sandbox_runtime is held.  InvalidArgument naming the field and the value
// for a class the deployment does not map, a sandbox_runtime that says
// otherwise, or a registration the runtime cannot be enforced with.  No
// runtime_class: OK, nothing changes.
absl::Status ResolveRuntimeClass(SandboxRequest& req, const std::map<std::string, std::string>& classes);

// The compiler's inputs: the daemon's deployment config text (`config`;
// nullopt: the embedded default), then the request's fields under their
// JSON names.
policy::PolicyInputs ToPolicyInputs(const SandboxRequest& r, const std::optional<policy::InputText>& config,
                                    bool dns_served);

// The request as JSON (egressctl sandbox apply builds it this way).
nlohmann::json ToJson(const SandboxRequest& r);

}  // namespace egressd::daemon
