// Adding targets to what a sandbox may reach, the one place where a target
// meets the floor and the per-surface rules (single-label names, public
// suffixes).  Shared by the deployment config and the sandbox compiler, so a
// target means the same whichever surface names it.
#ifndef EGRESSD_USERSPACE_POLICY_REACH_H_
#define EGRESSD_USERSPACE_POLICY_REACH_H_

#include <string>
#include <string_view>
#include <vector>

#include "userspace/policy/compiled_policy.h"
#include "userspace/policy/public_suffix.h"

namespace egressd::policy {

// Allowed entries before merging: in the order they were added, duplicates
// and all.
struct Reachable {
  std::vector<AllowedCidr> cidrs;
  std::vector<NameRule> names;
  std::vector<NameRule> wildcards;

  void Append(const Reachable& other);
};

// How a surface treats a single-label name ("minio", "localhost"), which no
// rule can match: the sandbox's resolver expands it through its search
// domains and asks for the longer name.
enum class SingleLabel {
  kReject,        // declarations, run targets
  kIgnoreWarn,    // egressExtraAllow, sandboxExtraEnv
  kPlatform,      // platform services: fatal when airgapped, else a warning
};

struct ReachContext {
  const std::vector<ProtectedCidr>* protected_cidrs = nullptr;
  const PublicSuffixes* public_suffixes = nullptr;  // may be null
  bool airgapped = false;
  std::vector<std::string>* errors = nullptr;
  std::vector<std::string>* warnings = nullptr;
};

// One target.  `where` says where it came from ("task egress.allow[2]");
// `shown` is what the message quotes (the target, or the URL it came from,
// credentials redacted); `ports` restrict an address target (empty: all).
// Problems become one line "<where> \"<shown>\": <why>" in ctx.errors or
// ctx.warnings; an accepted target is appended to `into` with `source`.
void AddTarget(const ReachContext& ctx, SingleLabel single_label,
               std::string_view where, std::string_view shown,
               std::string_view text, const std::vector<PortRange>& ports,
               const std::string& source, Reachable& into);

// Records `line` in `lines` unless it is there already (a repeated target is
// one problem).
void AddLine(std::vector<std::string>* lines, std::string line);

// Sorted, one entry per (cidr, ports) and per name, each with the sources
// that named it joined by ", " in the order they were added.
void MergeInto(Reachable r, CompiledPolicy& out);

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_REACH_H_
