#include "userspace/policy/reach.h"

#include <algorithm>

#include "userspace/net/ip.h"
#include "userspace/policy/floor.h"
#include "userspace/policy/names.h"
#include "userspace/policy/targets.h"

namespace egressd::policy {
namespace {

constexpr std::string_view kSingleLabelWhy =
    "a rule cannot match it (the sandbox's resolver expands it through its "
    "search domains)";

void AppendSource(std::string& sources, const std::string& s) {
  // Sources are short and few per entry; a linear scan of the joined text
  // keeps the entry a plain string.
  size_t pos = 0;
  while (pos <= sources.size()) {
    size_t end = sources.find(", ", pos);
    if (end == std::string::npos) end = sources.size();
    if (sources.compare(pos, end - pos, s) == 0) return;
    pos = end + 2;
  }
  sources += sources.empty() ? s : ", " + s;
}

void MergeNames(std::vector<NameRule> in, std::vector<NameRule>& out) {
  std::stable_sort(in.begin(), in.end(),
                   [](const NameRule& a, const NameRule& b) {
                     return a.name < b.name;
                   });
  for (NameRule& n : in) {
    if (!out.empty() && out.back().name == n.name) {
      AppendSource(out.back().source, n.source);
    } else {
      out.push_back(std::move(n));
    }
  }
}

}  // namespace

void Reachable::Append(const Reachable& other) {
  cidrs.insert(cidrs.end(), other.cidrs.begin(), other.cidrs.end());
  names.insert(names.end(), other.names.begin(), other.names.end());
  wildcards.insert(wildcards.end(), other.wildcards.begin(),
                   other.wildcards.end());
}

void AddLine(std::vector<std::string>* lines, std::string line) {
  if (std::find(lines->begin(), lines->end(), line) == lines->end()) {
    lines->push_back(std::move(line));
  }
}

void AddTarget(const ReachContext& ctx, SingleLabel single_label,
               std::string_view where, std::string_view shown,
               std::string_view text, const std::vector<PortRange>& ports,
               const std::string& source, Reachable& into) {
  // Built only for a message: quoting every address eagerly (here, in
  // net::ParseRaw and CheckPrefix) was 9% of a 100k-CIDR apply's
  // instructions (bench/results/2026-12-03-notes.md).
  auto head = [&] { return std::string(where) + " " + net::Quote(shown) + ": "; };
  auto target = ParseTarget(text);
  if (!target.ok()) {
    // When the target came out of a URL, say which part was wrong.
    const std::string part =
        shown == text ? "" : "its host " + net::Quote(text) + " ";
    AddLine(ctx.errors, head() + part + std::string(target.status().message()));
    return;
  }
  if (target->kind != TargetKind::kCidr && !ports.empty()) {
    AddLine(ctx.errors, head() + "a grant with ports is an address or a CIDR");
    return;
  }
  switch (target->kind) {
    case TargetKind::kCidr: {
      if (auto c = CheckFloor(target->cidr, *ctx.protected_cidrs)) {
        const ProtectedCidr& p = *c->entry;
        AddLine(ctx.errors,
                head() + (c->inside ? "denied by the floor (protected " +
                                        p.cidr.ToString() + ", " + p.source +
                                        ")"
                                  : "spans protected " + p.cidr.ToString() +
                                        " (" + p.source +
                                        "); declare narrower targets"));
        return;
      }
      into.cidrs.push_back({target->cidr, ports, source});
      return;
    }
    case TargetKind::kWildcard:
      if (ctx.public_suffixes != nullptr &&
          ctx.public_suffixes->IsPublicSuffix(target->name)) {
        AddLine(ctx.warnings,
                head() + "a wildcard over the public suffix " +
                    net::Quote(target->name) +
                    " reaches every site registered under it");
      }
      into.wildcards.push_back({target->name, source});
      return;
    case TargetKind::kName:
      break;
  }
  if (IsSingleLabel(target->name)) {
    const std::string what = shown == text
                                 ? std::string("single-label name")
                                 : "single-label host " + net::Quote(target->name);
    const std::string fix = "; use the fully qualified name";
    switch (single_label) {
      case SingleLabel::kReject:
        AddLine(ctx.errors, head() + "is a " + what + ": " +
                                std::string(kSingleLabelWhy) + fix);
        return;
      case SingleLabel::kIgnoreWarn:
        AddLine(ctx.warnings, head() + what + " ignored: " +
                                  std::string(kSingleLabelWhy) + fix);
        return;
      case SingleLabel::kPlatform:
        if (ctx.airgapped) {
          AddLine(ctx.errors,
                  head() + what + ": " + std::string(kSingleLabelWhy) +
                      ", so no sandbox of this airgapped deployment could "
                      "reach this platform service" + fix);
        } else {
          AddLine(ctx.warnings,
                  head() + what + " ignored: " + std::string(kSingleLabelWhy) +
                      ", so a sandbox with a declaration will not reach this "
                      "platform service" + fix);
        }
        return;
    }
  }
  into.names.push_back({target->name, source});
}

void MergeInto(Reachable r, CompiledPolicy& out) {
  std::stable_sort(r.cidrs.begin(), r.cidrs.end(),
                   [](const AllowedCidr& a, const AllowedCidr& b) {
                     return std::tie(a.cidr, a.ports) < std::tie(b.cidr, b.ports);
                   });
  for (AllowedCidr& a : r.cidrs) {
    if (!out.allowed.empty() && out.allowed.back().cidr == a.cidr &&
        out.allowed.back().ports == a.ports) {
      AppendSource(out.allowed.back().source, a.source);
    } else {
      out.allowed.push_back(std::move(a));
    }
  }
  MergeNames(std::move(r.names), out.names);
  MergeNames(std::move(r.wildcards), out.wildcard_suffixes);
}

}  // namespace egressd::policy
