// egressctl audit suggest: the smallest task declaration that would have
// allowed a stream's denials (userspace/audit/suggest.h), checked with the
// compiler against the same deployment config as `policy check` takes it, so
// every entry it prints passes `egressctl policy check`.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/egressctl/commands.h"
#include "tools/egressctl/policy_flags.h"
#include "userspace/audit/suggest.h"
#include "userspace/audit/trail.h"
#include "userspace/policy/policy_inputs.h"

namespace egressd::cli {
namespace {

std::string Fragment(const std::string& target) { return absl::StrCat("egress:\n  allow:\n    - '", target, "'\n"); }

// The policy the flags give with `yaml` as the task's declaration.
absl::StatusOr<policy::CompiledPolicy> CompileWith(const PolicyFlags& flags, const std::string& yaml) {
  policy::PolicyInputs in = ToPolicyInputs(flags);
  in.task = policy::InputText::Inline("suggestion", yaml);
  in.dns_served = true;
  return policy::CompileInputs(in);
}

}  // namespace

int CmdAuditSuggest(const Paths& paths, const SuggestFlags& sf, const PolicyFlags& flags) {
  audit::SuggestOptions o;
  if (!sf.sandbox.empty()) {
    uint64_t id = 0;
    if (!absl::SimpleAtoi(sf.sandbox, &id) || id == 0) {
      std::fprintf(stderr, "egressctl: --sandbox \"%s\": not a sandbox id (its cgroup id)\n", sf.sandbox.c_str());
      return kExitBadInput;
    }
    o.sandbox = id;
  }
  if (!flags.policy.empty() || !flags.runtime.empty()) {
    std::fprintf(stderr, "egressctl: audit suggest writes the task declaration itself: give the deployment "
                         "(--config or --floor), not --policy or --runtime\n");
    return kExitBadInput;
  }
  // The deployment's floor, as policy check reads it.
  auto base = CompileFlags(flags, /*dns_served=*/true);
  if (!base.ok()) return Report(base.status());
  o.protected_cidrs = base->protected_cidrs;
  const char* psl_env = std::getenv("EGRESSD_PUBLIC_SUFFIX_LIST");
  policy::LazyPublicSuffixList psl(psl_env != nullptr && *psl_env != '\0' ? psl_env
                                                                          : std::string(policy::PublicSuffixList::kDebianPath));
  o.public_suffixes = &psl;

  std::vector<nlohmann::json> records;
  int bad = 0;
  auto take = [&](const std::string& line) {
    if (line.empty()) return;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      ++bad;
    } else {
      records.push_back(std::move(j));
    }
  };
  std::string input_name = sf.input;
  if (sf.input == "-") {
    std::string line;
    while (std::getline(std::cin, line)) take(line);
    input_name = "stdin";
  } else if (!sf.input.empty()) {
    std::ifstream in(sf.input);
    if (!in) {
      std::fprintf(stderr, "egressctl: --input %s: cannot open\n", sf.input.c_str());
      return kExitBadInput;
    }
    std::string line;
    while (std::getline(in, line)) take(line);
  } else {
    // What the kernel's trail holds now, as `egressctl audit` prints it.
    audit::TrailOptions t;
    t.sandbox_id = o.sandbox.value_or(0);
    bool once = false;
    absl::Status s = audit::ReadTrail(paths, t, take, [&] { return std::exchange(once, true); });
    if (!s.ok()) {
      std::fprintf(stderr, "egressctl: audit suggest: %s\n", s.ToString().c_str());
      return kExitFailure;
    }
    input_name = "the audit trail";
  }
  if (bad) {
    std::fprintf(stderr, "egressctl: --input %s: %d lines were not JSON\n", sf.input.c_str(), bad);
    return kExitBadInput;
  }

  audit::SuggestResult r = audit::Suggest(records, o);
  // Each entry through the compiler on its own: one it refuses (or warns
  // reaches every site of a public suffix) is listed as not suggested.
  std::vector<audit::Suggestion> kept;
  for (auto& s : r.allow) {
    auto p = CompileWith(flags, Fragment(s.target));
    std::string refused;
    if (!p.ok()) {
      refused = std::string(p.status().message());
    } else {
      for (const std::string& w : p->warnings) {
        if (absl::StrContains(w, "public suffix")) refused = w;
      }
    }
    if (refused.empty()) {
      kept.push_back(std::move(s));
    } else {
      r.not_suggested.push_back({s.target, refused});
    }
  }
  r.allow = std::move(kept);
  const std::string yaml = audit::RenderTaskYaml(r, input_name);
  if (auto whole = CompileWith(flags, yaml); !whole.ok()) {
    std::fprintf(stderr, "egressctl: audit suggest: the suggestion does not compile: %s\n",
                 std::string(whole.status().message()).c_str());
    return kExitFailure;
  }
  std::fputs(yaml.c_str(), stdout);
  return kExitOk;
}

}  // namespace egressd::cli
