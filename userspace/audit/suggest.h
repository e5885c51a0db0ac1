// egressctl audit suggest: from the denials in an audit stream, the smallest
// declaration that would have allowed them, as a task.yaml fragment whose
// comments say what each entry covers (docs/audit.md, "Suggest").
//
//   * Names over addresses: a DNS denial suggests its name; a denied connect
//     to an address a DNS record of the stream answered for a name suggests
//     that name, never the address.
//   * A wildcard only where several siblings were asked: two or more names
//     below one registrable domain (the public suffix list's eTLD+1) become
//     `*.<their longest common suffix>`; never `*`, never a wildcard over a
//     public suffix.
//   * Never a target the deployment's floor denies (policy::CheckFloor, as
//     the compiler judges it), never a single-label name, never what a
//     denial's reason says the allow list cannot change (contained-root,
//     loopback-leaves, ...): those are listed as not suggested, with why.
// Pure: no BPF, no files; the caller checks the result with the compiler.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "userspace/policy/compiled_policy.h"
#include "userspace/policy/public_suffix.h"

namespace egressd::audit {

struct SuggestOptions {
  std::vector<policy::ProtectedCidr> protected_cidrs;  // the deployment's floor
  const policy::PublicSuffixes* public_suffixes = nullptr;  // null: only TLDs are public suffixes
  std::optional<uint64_t> sandbox;                          // only this sandbox's records
};

struct Suggestion {
  std::string target;               // "api.example.com", "*.example.com", "192.0.2.1"
  std::vector<std::string> covers;  // one line per denial kind it would have allowed
};

struct NotSuggested {
  std::string what;  // "169.254.169.254:80/TCP", "dns minio"
  std::string why;
};

struct SuggestResult {
  std::vector<Suggestion> allow;  // names and wildcards first, then addresses
  std::vector<NotSuggested> not_suggested;
  uint64_t denials = 0;  // denial occurrences read (records' counts)
};

SuggestResult Suggest(const std::vector<nlohmann::json>& records, const SuggestOptions& options);

// The task.yaml fragment: `egress: {allow: [...]}` with a comment above each
// entry, and the denials not suggested as comments at the end.  `allow: []`
// when nothing is to be suggested.
std::string RenderTaskYaml(const SuggestResult& r, const std::string& input_name);

// The registrable domain (eTLD+1) of canonical `name`: nullopt when the name
// is itself a public suffix or has a single label.
std::optional<std::string> RegistrableDomain(const std::string& name, const policy::PublicSuffixes* psl);

}  // namespace egressd::audit
