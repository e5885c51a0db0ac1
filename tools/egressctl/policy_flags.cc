#include "tools/egressctl/policy_flags.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "loader/pin_check.h"
#include "userspace/policy/policy_inputs.h"

namespace egressd::cli {
namespace {

std::optional<policy::InputText> FileFlag(const std::string& path) {
  if (path.empty()) return std::nullopt;
  return policy::InputText::File(path);
}

}  // namespace

policy::PolicyInputs ToPolicyInputs(const PolicyFlags& flags) {
  policy::PolicyInputs in;
  in.labels = {.config = "--config",
               .floor = "--floor",
               .on_deny = "--on-deny",
               .task = "--policy",
               .runtime = "--runtime",
               .kind = "--kind"};
  in.config = FileFlag(flags.config);
  if (flags.floor_given) in.floor = flags.floor;
  if (flags.on_deny_given) in.on_deny = flags.on_deny;
  in.task = FileFlag(flags.policy);
  in.runtime = FileFlag(flags.runtime);
  if (!flags.kind.empty()) in.kind = flags.kind;
  in.run_targets = flags.egress;
  in.grants = flags.grants;
  in.ships_services = flags.compose;
  // EGRESSD_PUBLIC_SUFFIX_LIST overrides Debian's path (tests use a fixture).
  const char* psl = std::getenv("EGRESSD_PUBLIC_SUFFIX_LIST");
  if (psl != nullptr && *psl != '\0') in.public_suffix_path = psl;
  return in;
}

absl::StatusOr<policy::CompiledPolicy> CompileFlags(const PolicyFlags& flags, bool dns_served,
                                                    const SandboxFlags* sandbox) {
  policy::PolicyInputs in = ToPolicyInputs(flags);
  in.dns_served = dns_served;
  in.labels.audit_only = "--audit-only";
  if (sandbox != nullptr) in.audit = {.audit_only = sandbox->audit_only, .strict = sandbox->strict_audit};
  return policy::CompileInputs(in);
}

void PrintWarnings(const policy::CompiledPolicy& p) {
  for (const std::string& w : p.warnings) spdlog::warn("{}", w);
}

int Report(const absl::Status& s) {
  if (s.ok()) return kExitOk;
  std::string msg(s.message());
  if (s.code() == absl::StatusCode::kInvalidArgument) {
    std::fprintf(stderr, "egressctl: invalid input, nothing was changed:\n  %s\n",
                 absl::StrJoin(absl::StrSplit(msg, '\n'), "\n  ").c_str());
    return kExitBadInput;
  }
  // What is pinned on the node is not what this egressctl can adopt (a
  // map's layout, a newer schema: loader/pin_check.h); nothing was changed.
  // Beside commands.h's codes: 4.
  constexpr int kExitPinnedState = 4;
  if (IsPinnedStateError(s)) {
    std::fprintf(stderr, "egressctl: %s\n", msg.c_str());
    return kExitPinnedState;
  }
  std::fprintf(stderr, "egressctl: %s\n", msg.c_str());
  return kExitFailure;
}

}  // namespace egressd::cli
