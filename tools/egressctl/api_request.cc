#include "tools/egressctl/api_request.h"

#include "absl/strings/str_cat.h"
#include "userspace/policy/yaml_walk.h"

namespace egressd::cli {

daemon::SandboxRequest RequestFromFlags(const PolicyFlags& flags, const SandboxFlags& sandbox,
                                        const std::string& cgroup, std::vector<std::string>& bad) {
  daemon::SandboxRequest r;
  r.cgroup = cgroup;
  for (const auto& l : sandbox.labels) {
    if (absl::Status s = control::ParseLabel(l, r.labels); !s.ok()) bad.push_back(absl::StrCat("--label ", s.message()));
  }
  auto read = [&](const char* flag, const std::string& path, std::optional<std::string>& into) {
    if (path.empty()) return;
    auto text = policy::yaml::ReadInputFile(path);
    if (!text.ok()) {
      bad.push_back(absl::StrCat(flag, " ", text.status().message()));
    } else {
      into = *text;
    }
  };
  read("--policy", flags.policy, r.task);
  read("--runtime", flags.runtime, r.runtime);
  if (!flags.kind.empty()) r.kind = flags.kind;
  r.egress = flags.egress;
  r.grants = flags.grants;
  r.compose = flags.compose;
  if (flags.on_deny_given) r.on_deny = flags.on_deny;
  r.audit_only = sandbox.audit_only;
  r.strict_audit = sandbox.strict_audit;
  // Empty: the daemon's dns.endpoint4/6 (an address the daemon can bind).
  r.dns_endpoint4 = sandbox.dns_endpoint4;
  r.dns_endpoint6 = sandbox.dns_endpoint6;
  r.require_socket_containment = flags.require_socket_containment;
  r.interface = sandbox.interface;
  r.interface_netns = sandbox.interface_netns;
  r.sandbox_runtime = sandbox.runtime_hint;
  return r;
}

}  // namespace egressd::cli
