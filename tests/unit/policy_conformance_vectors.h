// The policy conformance vectors (policy_conformance_vectors.inc) with what
// compiles them, shared by the compiler's conformance test and the
// explain-against-the-kernel differential test (tests/priv).  Needs
// EGR_TESTDATA (the public suffix list's directory) or EGR_TESTDATA_PSL_TEXT.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "userspace/policy/compiler.h"
#include "userspace/policy/declarations.h"
#include "userspace/policy/deployment_config.h"
#include "userspace/policy/public_suffix.h"
#include "userspace/policy/run_targets.h"

namespace egressd::policy::conformance {

// A deployment with one platform service of each kind; the object store is
// an address, so it shows up as an allowed CIDR.
constexpr const char* kPlatform = R"(
platform:
  api: https://api.platform.example
  modelGateway: https://gateway.platform.example/v1
  objectStorage: https://203.0.113.10:9000
  packageIndices: [https://pypi.org/simple]
)";
constexpr const char* kPlatformLines[] = {
    "allow 203.0.113.10/32 ports all (deployment setting platform.objectStorage)",
    "name api.platform.example (deployment setting platform.api)",
    "name gateway.platform.example (deployment setting platform.modelGateway)",
    "name pypi.org (deployment setting platform.packageIndices)",
};

// Every member has a default, so a vector names only what it sets.
struct Vector {
  const char* rule = "";
  std::string config = {};        // deployment YAML; "" = the embedded default
  const char* task = nullptr;     // task.yaml, or none
  const char* runtime = nullptr;  // runtime.yaml, or none
  std::vector<std::string> run = {};
  WorkloadKind kind = WorkloadKind::kTask;
  std::vector<std::string> grants = {};
  bool services = false;
  // The compiled policy as Summary() prints it, or the exact error lines.
  std::vector<std::string> want = {};
  std::vector<std::string> want_errors = {};
  std::vector<std::string> want_warnings = {};
  bool names_enforced = true;  // false: no DNS proxy serves it: expect the warning that names reach nothing
};

inline std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
const std::vector<std::string> kPlatformV(std::begin(kPlatformLines), std::end(kPlatformLines));

// ToText without the hash line, the credential endpoints folded into one
// line (they are the same seven on every floor; their source is not).
inline std::vector<std::string> Summary(const CompiledPolicy& p) {
  std::vector<std::string> lines = absl::StrSplit(p.ToText(), '\n', absl::SkipEmpty());
  lines.erase(lines.begin());
  std::vector<std::string> out;
  int creds = 0;
  for (const std::string& l : lines) {
    const bool cred = l.starts_with("protected ") && creds < 7 && l.find("(floor ") != std::string::npos;
    if (cred && creds++ == 0) {
      out.push_back("protected credential endpoints" + l.substr(l.find(" (")));
    } else if (!cred) {
      out.push_back(l);
    }
  }
  return out;
}

// The test list; a binary that runs away from the source tree (the 6.1
// guest) has its text compiled in as EGR_TESTDATA_PSL_TEXT.
inline const PublicSuffixList& Psl() {
#ifdef EGR_TESTDATA_PSL_TEXT
  static const PublicSuffixList psl = PublicSuffixList::Parse(EGR_TESTDATA_PSL_TEXT);
#else
  static const PublicSuffixList psl =
      *PublicSuffixList::Load(EGR_TESTDATA "/public_suffix_list.dat");
#endif
  return psl;
}

// The vector's inputs compiled, errors of every stage joined in order.
inline absl::StatusOr<CompiledPolicy> CompileVector(const Vector& v) {
  std::vector<std::string> errors;
  auto add = [&errors](const absl::Status& s) {
    for (absl::string_view l : absl::StrSplit(s.message(), '\n')) errors.emplace_back(l);
  };
  DeploymentConfig d = DefaultDeployment();
  if (!v.config.empty()) {
    auto parsed = ParseDeploymentConfig(v.config, "egressd.yaml", &Psl());
    if (parsed.ok()) d = *parsed; else add(parsed.status());
  }
  SandboxInputs in;
  in.kind = v.kind;
  in.run_targets = v.run;
  in.ships_services = v.services;
  if (v.task) {
    auto t = ParseTaskDeclaration(v.task, "task.yaml");
    if (t.ok()) in.task = *t; else add(t.status());
  }
  if (v.runtime) {
    auto r = ParseRuntimeDeclaration(v.runtime, "runtime.yaml");
    if (r.ok()) in.runtime = *r; else add(r.status());
  }
  for (const std::string& g : v.grants) {
    auto grant = ParseGrant(g);
    if (grant.ok()) in.grants.push_back(*grant); else add(grant.status());
  }
  auto p = Compile(d, in, {.public_suffixes = &Psl(), .names_enforced = v.names_enforced});
  if (!p.ok()) add(p.status());
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  return p;
}

// The table, one vector per sentence (kept apart for length).
#include "policy_conformance_vectors.inc"

}  // namespace egressd::policy::conformance
