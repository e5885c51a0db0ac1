#include "userspace/policy/run_targets.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"

namespace egressd::policy {
namespace {

constexpr std::string_view kRunSource = "run --egress";

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Targets that are well-formed but not (yet) addresses: classified before
// CIDR parsing so the error says what the user meant instead of "not an IP
// address".
std::optional<std::string> NotAnAddress(std::string_view t) {
  if (t.empty()) return "empty target; declare an IP address or a CIDR";
  if (t == "*") {
    return "a bare * is not a scope: it asks for the default; omit --egress "
           "to keep the floor's default, or name the destinations";
  }
  if (t.size() > 2 && t.substr(0, 2) == "*.") {
    return "this address-only compiler takes no names (wildcard); declare IP addresses or "
           "CIDRs";
  }
  if (t.front() == '[' && t.find("]:") != std::string_view::npos) {
    return "ports are not accepted in a target; declare the address alone";
  }
  // One colon can never be IPv6 ("::" needs two), so "a.b.c.d:443" and
  // "host:443" are an address or name with a port.
  const size_t colon = t.find(':');
  if (colon != std::string_view::npos &&
      t.find(':', colon + 1) == std::string_view::npos) {
    const std::string_view after = t.substr(colon + 1);
    if (!after.empty() && std::all_of(after.begin(), after.end(), IsDigit)) {
      return "ports are not accepted in a target; declare the address alone";
    }
  }
  const bool name_chars = std::all_of(t.begin(), t.end(), [](char c) {
    return IsLetter(c) || IsDigit(c) || c == '-' || c == '.';
  });
  if (name_chars && std::any_of(t.begin(), t.end(), IsLetter)) {
    return "this address-only compiler takes no names; declare IP addresses or CIDRs";
  }
  return std::nullopt;
}

// The problem with `c` under the floor, or nullopt.
std::optional<std::string> FloorProblem(const std::string& quoted,
                                        const net::Cidr& c,
                                        const std::vector<ProtectedCidr>& prot,
                                        std::string_view floor) {
  const auto conflict = CheckFloor(c, prot);
  if (!conflict) return std::nullopt;
  const std::string p = conflict->entry->cidr.ToString();
  if (conflict->inside) {
    return "--egress " + quoted + ": denied by the floor (protected " + p +
           ", floor " + std::string(floor) + ")";
  }
  return "--egress " + quoted + " spans protected " + p + " (floor " +
         std::string(floor) + "); declare narrower targets";
}

}  // namespace

absl::StatusOr<CompiledPolicy> CompileRun(const RunInputs& in) {
  CompiledPolicy out;
  out.deny_action = in.deny_action;
  out.protected_cidrs = FloorProtected(in.floor);
  if (in.egress_targets.empty()) {
    out.default_verdict = FloorDefault(in.floor);
    return out;
  }
  out.default_verdict = Verdict::kDeny;

  const std::string_view floor = ToString(in.floor);
  std::vector<std::string> problems;
  auto report = [&problems](std::string line) {
    if (std::find(problems.begin(), problems.end(), line) == problems.end()) {
      problems.push_back(std::move(line));
    }
  };
  for (const std::string& t : in.egress_targets) {
    const std::string quoted = net::Quote(t);
    if (auto why = NotAnAddress(t)) {
      report("--egress " + quoted + ": " + *why);
      continue;
    }
    auto cidr = net::Cidr::Parse(t);
    if (!cidr.ok()) {
      const std::string msg(cidr.status().message());
      // The net errors lead with the quoted value; don't say it twice.
      report(msg.rfind(quoted, 0) == 0 ? "--egress " + msg
                                       : "--egress " + quoted + ": " + msg);
      continue;
    }
    if (auto why = FloorProblem(quoted, *cidr, out.protected_cidrs, floor)) {
      report(*why);
      continue;
    }
    out.allowed.push_back({*cidr, {}, std::string(kRunSource)});
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
  }
  std::sort(out.allowed.begin(), out.allowed.end());
  out.allowed.erase(std::unique(out.allowed.begin(), out.allowed.end()),
                    out.allowed.end());
  return out;
}

}  // namespace egressd::policy
