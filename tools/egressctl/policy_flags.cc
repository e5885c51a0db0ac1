#include "tools/egressctl/policy_flags.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "userspace/policy/floor.h"
#include "userspace/policy/run_targets.h"

namespace egressd::cli {

absl::StatusOr<policy::CompiledPolicy> CompileFlags(const PolicyFlags& flags) {
  std::vector<std::string> errors;
  policy::RunInputs in;
  in.egress_targets = flags.egress;
  if (auto f = policy::ParseFloor(flags.floor); f.ok()) {
    in.floor = *f;
  } else {
    errors.push_back(absl::StrCat("--floor ", f.status().message()));
  }
  if (auto a = policy::ParseDenyAction(flags.on_deny); a.ok()) {
    in.deny_action = *a;
  } else {
    errors.push_back(absl::StrCat("--on-deny ", a.status().message()));
  }
  // Compile even when a flag was bad, so every problem is reported at once.
  auto compiled = policy::CompileRun(in);
  if (errors.empty()) return compiled;
  if (!compiled.ok()) errors.push_back(std::string(compiled.status().message()));
  return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
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
