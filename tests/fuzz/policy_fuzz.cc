// libFuzzer target for the declaration and target parsers and the compiler.
// One input is read every way at once: as task.yaml, runtime.yaml and
// egressd.yaml, and line by line as targets, grants and URLs.  Beyond "no
// crash, no leak, no UB", it checks what users rely on:
//  - every error line names its offender in double quotes and carries no
//    control characters (a hostile value cannot forge log lines);
//  - an accepted name is canonical (canonicalizing it again changes nothing),
//    an accepted CIDR round-trips through its text;
//  - CompileInputs (the inputs as a request would give them) keeps the same
//    promises;
//  - nothing compiled allows an address the floor protects, and the lists
//    the kernel and the DNS proxy read are sorted and unique.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "userspace/net/ip.h"
#include "userspace/policy/compiler.h"
#include "userspace/policy/declarations.h"
#include "userspace/policy/deployment_config.h"
#include "userspace/policy/floor.h"
#include "userspace/policy/names.h"
#include "userspace/policy/policy_inputs.h"
#include "userspace/policy/public_suffix.h"
#include "userspace/policy/targets.h"
#include "userspace/policy/urls.h"

namespace {

using namespace egressd;
using namespace egressd::policy;

#define FUZZ_CHECK(cond)                                                  \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::fprintf(stderr, "check failed: %s (%s:%d)\n", #cond, \
                        __FILE__, __LINE__);                              \
      std::abort();                                                       \
    }                                                                     \
  } while (0)

const PublicSuffixList& Psl() {
  static const PublicSuffixList psl =
      PublicSuffixList::Parse("com\nio\ngithub.io\nco.uk\n*.ck\n!www.ck\n");
  return psl;
}

void CheckErrors(const absl::Status& s) {
  if (s.ok()) return;
  std::string_view msg(s.message().data(), s.message().size());
  size_t start = 0;
  while (start <= msg.size()) {
    size_t end = msg.find('\n', start);
    if (end == std::string_view::npos) end = msg.size();
    const std::string_view line = msg.substr(start, end - start);
    FUZZ_CHECK(!line.empty());
    FUZZ_CHECK(line.find('"') != std::string_view::npos);
    for (char c : line) {
      const unsigned char u = c;
      FUZZ_CHECK(u >= 0x20 && u != 0x7f);
    }
    start = end + 1;
  }
}

void CheckTarget(std::string_view text) {
  auto t = ParseTarget(text);
  if (!t.ok()) {
    FUZZ_CHECK(!t.status().message().empty());
    return;
  }
  if (t->kind == TargetKind::kCidr) {
    auto again = net::Cidr::Parse(t->cidr.ToString());
    FUZZ_CHECK(again.ok() && *again == t->cidr);
    return;
  }
  FUZZ_CHECK(t->name.size() <= kMaxName);
  auto again = CanonicalName(t->name);
  FUZZ_CHECK(again.ok() && *again == t->name);
  if (t->kind == TargetKind::kWildcard) {
    FUZZ_CHECK(!IsSingleLabel(t->name));
    FUZZ_CHECK(WildcardMatches(t->name, "x." + t->name));
    FUZZ_CHECK(!WildcardMatches(t->name, t->name));
  }
}

template <typename T>
bool SortedUnique(const std::vector<T>& v, auto key) {
  for (size_t i = 1; i < v.size(); ++i) {
    if (!(key(v[i - 1]) < key(v[i]))) return false;
  }
  return true;
}

void CheckPolicy(const absl::StatusOr<CompiledPolicy>& p) {
  if (!p.ok()) {
    CheckErrors(p.status());
    return;
  }
  for (const AllowedCidr& a : p->allowed) {
    FUZZ_CHECK(!CheckFloor(a.cidr, p->protected_cidrs).has_value());
  }
  FUZZ_CHECK(SortedUnique(p->allowed, [](const AllowedCidr& a) {
    return std::tie(a.cidr, a.ports);
  }));
  FUZZ_CHECK(SortedUnique(p->names, [](const NameRule& n) { return n.name; }));
  FUZZ_CHECK(SortedUnique(p->wildcard_suffixes,
                          [](const NameRule& n) { return n.name; }));
  for (const NameRule& n : p->names) FUZZ_CHECK(NameAllowed(*p, n.name));
  CompiledPolicy unsourced = *p;
  for (auto& a : unsourced.allowed) a.source.clear();
  for (auto& n : unsourced.names) n.source.clear();
  FUZZ_CHECK(unsourced.ContentHash() == p->ContentHash());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  DeploymentConfig hosted = DeploymentForFloor(Floor::kHosted, DenyAction::kReject);
  hosted.airgapped = true;
  const DeploymentConfig deployments[] = {DefaultDeployment(), hosted};

  auto task = ParseTaskDeclaration(input, "fuzz.yaml");
  CheckErrors(task.status());
  auto runtime = ParseRuntimeDeclaration(input, "fuzz.yaml");
  CheckErrors(runtime.status());
  auto config = ParseDeploymentConfig(input, "fuzz.yaml", &Psl());
  CheckErrors(config.status());

  SandboxInputs in;
  if (task.ok()) in.task = *task;
  for (const DeploymentConfig& d : deployments) {
    for (WorkloadKind k : {WorkloadKind::kAgent, WorkloadKind::kTask}) {
      in.kind = k;
      CheckPolicy(Compile(d, in, {.public_suffixes = &Psl()}));
    }
  }
  if (runtime.ok() && runtime->has_value()) {
    SandboxInputs rt;
    rt.kind = WorkloadKind::kRuntime;
    rt.runtime = *runtime;
    CheckPolicy(Compile(DefaultDeployment(), rt, {.public_suffixes = &Psl()}));
  }
  if (config.ok()) {
    CheckPolicy(Compile(*config, SandboxInputs{}, {.public_suffixes = &Psl()}));
  }

  // Line by line: run targets (all at once, as `--egress` would give them),
  // and each line alone as a target, a grant and a URL.
  SandboxInputs run;
  size_t start = 0;
  while (start < input.size() && run.run_targets.size() < 64) {
    size_t end = input.find('\n', start);
    if (end == std::string_view::npos) end = input.size();
    const std::string_view line = input.substr(start, end - start);
    CheckTarget(line);
    auto grant = ParseGrant(line);
    CheckErrors(grant.status());
    if (grant.ok()) run.grants.push_back(*grant);
    if (LooksLikeUrl(line)) (void)UrlHost(line), (void)RedactUrl(line);
    run.run_targets.emplace_back(line);
    start = end + 1;
  }
  for (const DeploymentConfig& d : deployments) {
    CheckPolicy(Compile(d, run, {.public_suffixes = &Psl()}));
  }

  // All of it through CompileInputs, as the daemon will pass a request: the
  // input inline as task.yaml, its lines as run targets, and a floor, kind
  // and deny action picked by the input's size (or, for an input starting
  // with '#', its first line as all three).
  PolicyInputs whole;
  whole.task = InputText::Inline("fuzz.yaml", std::string(input));
  whole.run_targets = run.run_targets;
  whole.public_suffixes = &Psl();
  if (input.starts_with('#')) {
    const std::string first(input.substr(0, input.find('\n')));
    whole.floor = whole.kind = whole.on_deny = first;
  } else {
    whole.floor = std::string(kFloorNames.rows[size % kFloorNames.rows.size()].name);
    whole.kind = std::string(kWorkloadKindNames.rows[size / 3 % 2].name);  // agent or task
    whole.on_deny = std::string(kDenyActionNames.rows[size / 6 % 2].name);
  }
  CheckPolicy(CompileInputs(whole));
  return 0;
}
