#include "userspace/policy/compiler.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "userspace/net/ip.h"
#include "userspace/policy/reach.h"
#include "userspace/policy/targets.h"
#include "userspace/policy/text.h"

namespace egressd::policy {
namespace {

constexpr std::string_view kGrant = "orchestrator grant";
constexpr size_t kNamesListed = 3;

absl::StatusOr<uint16_t> ParsePort(std::string_view s) {
  uint32_t v = 0;
  // Digits only: no sign, no whitespace, no leading zero.
  const bool digits = !s.empty() && s.size() <= 5 && s[0] != '0' &&
                      std::all_of(s.begin(), s.end(), text::IsDigit);
  for (char c : s) v = digits ? v * 10 + static_cast<uint32_t>(c - '0') : 0;
  if (!digits || v < 1 || v > 65535) {
    return absl::InvalidArgumentError("port " + net::Quote(s) +
                                      " is not a number 1-65535");
  }
  return static_cast<uint16_t>(v);
}

absl::StatusOr<std::vector<PortRange>> ParsePorts(std::string_view text) {
  std::vector<PortRange> out;
  for (std::string_view part : text::Split(text, ',')) {
    const size_t dash = part.find('-');
    auto first = ParsePort(part.substr(0, dash));
    if (!first.ok()) return first.status();
    uint16_t last = *first;
    if (dash != std::string_view::npos) {
      auto l = ParsePort(part.substr(dash + 1));
      if (!l.ok()) return l.status();
      if (*l < *first) {
        return absl::InvalidArgumentError("port range " + net::Quote(part) +
                                          " ends before it starts");
      }
      last = *l;
    }
    out.push_back({*first, last});
  }
  // Sorted and merged, so two spellings of one grant compile alike.
  std::sort(out.begin(), out.end());
  std::vector<PortRange> merged;
  for (const PortRange& r : out) {
    if (!merged.empty() && static_cast<int>(r.first) <= merged.back().last + 1) {
      merged.back().last = std::max(merged.back().last, r.last);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

std::string NamesWarning(const CompiledPolicy& p) {
  std::vector<std::string> shown;
  for (const NameRule& n : p.names) {
    if (shown.size() == kNamesListed) break;
    shown.push_back(net::Quote(n.name));
  }
  for (const NameRule& w : p.wildcard_suffixes) {
    if (shown.size() == kNamesListed) break;
    shown.push_back(net::Quote("*." + w.name));
  }
  const size_t total = p.names.size() + p.wildcard_suffixes.size();
  std::string list = absl::StrJoin(shown, ", ");
  if (total > shown.size()) {
    list += " and " + std::to_string(total - shown.size()) + " more";
  }
  return "names are resolved only by egressd's DNS proxy: " + list +
         (total == 1 ? " reaches" : " reach") +
         " nothing from a sandbox whose DNS it does not serve (egressctl run "
         "serves its own; sandbox add needs --dns-endpoint4/6 and egressctl "
         "dns serve); addresses and CIDRs are enforced either way";
}

}  // namespace

absl::StatusOr<WorkloadKind> ParseWorkloadKind(std::string_view text) {
  if (auto k = kWorkloadKindNames.Find(text)) return *k;
  return absl::InvalidArgumentError("invalid workload kind " + net::Quote(text) +
                                    "; valid: " + kWorkloadKindNames.Join("\"", "\"", ", "));
}

std::string_view ToString(WorkloadKind kind) { return kWorkloadKindNames.Name(kind); }

absl::StatusOr<Grant> ParseGrant(std::string_view text) {
  const std::string head = std::string(kGrant) + " " + net::Quote(text) + ": ";
  std::string_view target, ports;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find("]:");
    if (close == std::string_view::npos) {
      return absl::InvalidArgumentError(head + "expected [ADDRESS]:PORTS");
    }
    target = text.substr(1, close - 1);
    ports = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return absl::InvalidArgumentError(
          head + "expected ADDRESS:PORTS (a grant names its ports)");
    }
    target = text.substr(0, colon);
    if (target.find(':') != std::string_view::npos) {
      return absl::InvalidArgumentError(
          head + "write an IPv6 grant in brackets, [ADDRESS]:PORTS");
    }
    ports = text.substr(colon + 1);
  }
  auto parsed = ParsePorts(ports);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(head +
                                      std::string(parsed.status().message()));
  }
  return Grant{std::string(target), *std::move(parsed)};
}

absl::StatusOr<CompiledPolicy> Compile(const DeploymentConfig& deployment,
                                       const SandboxInputs& in,
                                       const CompileOptions& options) {
  std::vector<std::string> errors;
  CompiledPolicy out;
  out.deny_action = deployment.deny_action;
  out.protected_cidrs = deployment.protected_cidrs;
  out.warnings = deployment.warnings;
  ReachContext ctx;
  ctx.protected_cidrs = &out.protected_cidrs;
  ctx.public_suffixes = options.public_suffixes;
  ctx.airgapped = deployment.airgapped;
  ctx.errors = &errors;
  ctx.warnings = &out.warnings;

  const std::string kind(ToString(in.kind));
  if (in.runtime && in.kind != WorkloadKind::kRuntime) {
    errors.push_back(
        "runtime \"sandbox.egress\": a runtime's declaration governs only "
        "that runtime's own sandbox, not this " + kind + " sandbox");
  }
  if (in.task && in.kind == WorkloadKind::kRuntime) {
    errors.push_back(
        "task \"egress\": a task's declaration governs its evaluations' agent "
        "and task sandboxes, not a runtime");
  }
  if (in.ships_services && in.kind != WorkloadKind::kTask) {
    errors.push_back(
        "orchestrator \"services\": only a task sandbox ships compose "
        "services, not this " + kind + " sandbox");
  }

  Reachable r;
  if (in.task) {
    r.cidrs.reserve(in.task->allow.size());
    for (const DeclaredTarget& t : in.task->allow) {
      AddTarget(ctx, SingleLabel::kReject, "task " + t.where, t.text, t.text,
                {}, "task", r);
    }
  }
  if (in.runtime) {
    for (const DeclaredTarget& t : in.runtime->allow) {
      AddTarget(ctx, SingleLabel::kReject, "runtime " + t.where, t.text,
                t.text, {}, "runtime", r);
    }
  }
  for (const std::string& t : in.run_targets) {
    AddTarget(ctx, SingleLabel::kReject, "run --egress", t, t, {},
              "run --egress", r);
  }
  for (const Grant& g : in.grants) {
    auto t = ParseTarget(g.target);
    if (t.ok() && t->kind != TargetKind::kCidr) {
      AddLine(&errors, std::string(kGrant) + " " + net::Quote(g.target) +
                           ": a grant is an address or a CIDR");
      continue;
    }
    AddTarget(ctx, SingleLabel::kReject, kGrant, g.target, g.target, g.ports,
              std::string(kGrant), r);
  }
  r.Append(deployment.always);
  if (in.ships_services && in.kind == WorkloadKind::kTask) {
    if (deployment.container_registry.cidrs.empty() &&
        deployment.container_registry.names.empty() &&
        deployment.container_registry.wildcards.empty()) {
      out.warnings.push_back(
          "the task ships compose services but the deployment names no "
          "platform.containerRegistry");
    }
    r.Append(deployment.container_registry);
  }
  if (!errors.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  }

  // Declaring anything, on any surface, states the whole scope; an agent
  // runtime is deny-all even when nothing is declared.
  const bool declared = in.task || in.runtime || !in.run_targets.empty();
  out.default_verdict =
      declared || in.kind == WorkloadKind::kAgent || deployment.airgapped
          ? Verdict::kDeny
          : Verdict::kAllow;
  MergeInto(std::move(r), out);
  if (!options.names_enforced && out.default_verdict == Verdict::kDeny &&
      (!out.names.empty() || !out.wildcard_suffixes.empty())) {
    out.warnings.push_back(NamesWarning(out));
  }
  return out;
}

}  // namespace egressd::policy
