#include "userspace/policy/compiled_policy.h"

#include <algorithm>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"

namespace egressd::policy {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t Fnv1a(std::string_view data) {
  uint64_t h = kFnvOffset;
  for (unsigned char c : data) {
    h ^= c;
    h *= kFnvPrime;
  }
  return h;
}

// Sorted with overlapping and adjacent ranges merged, so two spellings of the
// same port set hash alike.
std::vector<PortRange> CanonicalPorts(std::vector<PortRange> ports) {
  std::sort(ports.begin(), ports.end());
  std::vector<PortRange> out;
  for (const PortRange& r : ports) {
    if (!out.empty() && static_cast<int>(r.first) <= out.back().last + 1) {
      out.back().last = std::max(out.back().last, r.last);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::string PortsText(const std::vector<PortRange>& ports) {
  if (ports.empty()) return "all";
  std::vector<std::string> parts;
  for (const PortRange& r : ports) parts.push_back(ToString(r));
  return absl::StrJoin(parts, ",");
}

std::vector<std::string> SortedUnique(const std::vector<NameRule>& rules) {
  std::vector<std::string> v;
  v.reserve(rules.size());
  for (const NameRule& r : rules) v.push_back(r.name);
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// Names are length-prefixed so no name can be crafted to look like the end of
// one entry and the start of another.
void AppendName(std::string& out, std::string_view tag, const std::string& s) {
  out += tag;
  out += ' ';
  out += std::to_string(s.size());
  out += ':';
  out += s;
  out += '\n';
}

}  // namespace

std::string_view ToString(Verdict v) { return kVerdictNames.Name(v); }

std::string_view ToString(DenyAction a) { return kDenyActionNames.Name(a); }

absl::StatusOr<DenyAction> ParseDenyAction(std::string_view text) {
  if (auto a = kDenyActionNames.Find(text)) return *a;
  return absl::InvalidArgumentError("invalid deny action " + net::Quote(text) +
                                    "; valid: " + kDenyActionNames.Join("\"", "\"", ", "));
}

std::string ToString(const PortRange& r) {
  if (r.first == r.last) return std::to_string(r.first);
  return std::to_string(r.first) + "-" + std::to_string(r.last);
}

uint64_t CompiledPolicy::ContentHash() const {
  std::string s = "egressd.policy.v1\n";
  s += "default ";
  s += ToString(default_verdict);
  s += "\non_deny ";
  s += ToString(deny_action);
  s += '\n';

  std::vector<net::Cidr> prot;
  for (const ProtectedCidr& p : protected_cidrs) prot.push_back(p.cidr);
  std::sort(prot.begin(), prot.end());
  prot.erase(std::unique(prot.begin(), prot.end()), prot.end());
  for (const net::Cidr& c : prot) s += "protected " + c.ToString() + "\n";

  std::vector<std::pair<net::Cidr, std::vector<PortRange>>> allow;
  for (const AllowedCidr& a : allowed) {
    allow.emplace_back(a.cidr, CanonicalPorts(a.ports));
  }
  std::sort(allow.begin(), allow.end());
  allow.erase(std::unique(allow.begin(), allow.end()), allow.end());
  for (const auto& [cidr, ports] : allow) {
    s += "allow " + cidr.ToString() + " " + PortsText(ports) + "\n";
  }

  for (const std::string& n : SortedUnique(names)) AppendName(s, "name", n);
  for (const std::string& w : SortedUnique(wildcard_suffixes)) {
    AppendName(s, "wildcard", w);
  }
  // Only when set: an enforced policy hashes as it did before audit modes.
  if (audit.audit_only) s += "audit_only\n";
  if (audit.strict) s += "strict_audit\n";
  return Fnv1a(s);
}

std::string CompiledPolicy::ToText() const {
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx",
                static_cast<unsigned long long>(ContentHash()));
  std::string out = "policy " + std::string(hash) + "\n";
  out += "default " + std::string(ToString(default_verdict)) + "\n";
  out += "on_deny " + std::string(ToString(deny_action)) + "\n";
  if (audit.audit_only) out += "audit_only (denials recorded as would-deny and allowed: not enforced)\n";
  if (audit.strict) out += "strict_audit (a connect or send that cannot be recorded is denied)\n";
  for (const ProtectedCidr& p : protected_cidrs) {
    out += "protected " + p.cidr.ToString() + " (" + p.source + ")\n";
  }
  for (const AllowedCidr& a : allowed) {
    out += "allow " + a.cidr.ToString() + " ports " + PortsText(a.ports) + " (" +
           a.source + ")\n";
  }
  for (const NameRule& n : names) {
    out += "name " + n.name + " (" + n.source + ")\n";
  }
  for (const NameRule& w : wildcard_suffixes) {
    out += "wildcard *." + w.name + " (" + w.source + ")\n";
  }
  return out;
}

}  // namespace egressd::policy
