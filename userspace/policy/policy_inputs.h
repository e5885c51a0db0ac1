// Everything a sandbox's policy is compiled from, as its caller has it:
// files named on egressctl's command line, or texts and strings from an API
// request.  One function turns them into the compiled policy, so egressctl
// and the daemon judge the same inputs alike, with the same messages.
//
//   PolicyInputs in;
//   in.config = InputText::File("/etc/egressd/egressd.yaml");
//   in.task = InputText::Inline("task.yaml", request_body);
//   in.run_targets = {"staging.example.com"};
//   in.kind = "agent";
//   auto policy = CompileInputs(in);  // the policy and its warnings, or every problem
#ifndef EGRESSD_USERSPACE_POLICY_POLICY_INPUTS_H_
#define EGRESSD_USERSPACE_POLICY_POLICY_INPUTS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/policy/compiled_policy.h"
#include "userspace/policy/public_suffix.h"

namespace egressd::policy {

// A YAML input: a file to read, or its text already in memory.  `name` is
// the path, or what the text is called in syntax errors ("task.yaml").
struct InputText {
  std::string name;
  std::optional<std::string> text;  // nullopt: read the file `name`

  static InputText File(std::string path) { return {std::move(path), std::nullopt}; }
  static InputText Inline(std::string name, std::string text) {
    return {std::move(name), std::move(text)};
  }
};

struct PolicyInputs {
  // What the caller calls each input, for the messages about the input
  // itself (a file that cannot be read, a value that is not a floor):
  // egressctl names its flags ("--floor"), an API its fields.  Messages about
  // what is inside an input name its place there ("task egress.allow[2]").
  struct Labels {
    std::string config = "config";
    std::string floor = "floor";
    std::string on_deny = "on_deny";
    std::string task = "task";
    std::string runtime = "runtime";
    std::string kind = "kind";
    std::string audit_only = "audit_only";
  };
  Labels labels;

  // The deployment config (egressd.yaml); nullopt: `floor` as a one-machine
  // deployment.  Giving both is an error: the config sets the floor.
  std::optional<InputText> config;
  std::optional<std::string> floor;    // a name of kFloorNames; nullopt: connected
  std::optional<std::string> on_deny;  // a name of kDenyActionNames; overrides the config's
  std::optional<InputText> task;       // task declaration (task.yaml)
  std::optional<InputText> runtime;    // runtime declaration (runtime.yaml)
  // A name of kWorkloadKindNames; nullopt: runtime when `runtime` is given,
  // else task.
  std::optional<std::string> kind;
  std::vector<std::string> run_targets;  // `--egress`, in order
  std::vector<std::string> grants;       // orchestrator grants, "ADDR:PORTS"
  bool ships_services = false;           // the task ships compose services
  bool dns_served = false;               // egressd's DNS proxy serves this sandbox (CompileOptions::names_enforced)
  // The operator's audit mode for the sandbox (never a declaration's):
  // audit_only is refused unless the deployment config allows it
  // (audit.allowAuditOnly; the one-machine floor deployment never does).
  AuditMode audit;

  // The public suffix list, read only if a wildcard is judged, and then once
  // per call.  `public_suffixes`, when set, is used instead of the file (a
  // daemon holds one list for every request).
  std::string public_suffix_path = std::string(PublicSuffixList::kDebianPath);
  const PublicSuffixes* public_suffixes = nullptr;
};

// The compiled policy with its warnings, or every problem with the inputs at
// once, one a line, in one InvalidArgumentError (nothing is applied).  A file
// that cannot be read is a problem with the input ("<label> \"<path>\":
// cannot be read").  An unreadable public suffix list is only a warning, and
// only when a wildcard needed it.
absl::StatusOr<CompiledPolicy> CompileInputs(const PolicyInputs& in);

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_POLICY_INPUTS_H_
