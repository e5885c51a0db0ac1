#include "userspace/policy/floor.h"

#include <cstdlib>
#include <string>

#include "absl/status/status.h"

namespace egressd::policy {
namespace {

// Instance metadata and credential services: AWS IMDS, ECS task credentials
// (v2 and the EKS Pod Identity agent), AWS IMDS over IPv6, Alibaba Cloud
// metadata, Azure WireServer.
constexpr std::string_view kCredentialEndpoints[] = {
    "169.254.169.254/32", "169.254.170.2/32",   "169.254.170.23/32",
    "fd00:ec2::254/128",  "fd00:ec2::23/128",   "100.100.100.200/32",
    "168.63.129.16/32",
};

// What the hosted platform's network edge blocks: private, CGNAT, loopback
// and link-local space, in both families.
constexpr std::string_view kHostedPrivate[] = {
    "10.0.0.0/8",     "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "172.16.0.0/12",  "192.168.0.0/16", "fc00::/7",   "fe80::/10",
    "::1/128",
};

net::Cidr MustParse(std::string_view text) {
  auto c = net::Cidr::Parse(text);
  // The tables above are constants; a typo there must not ship a floor that
  // protects less than it says, so fail loudly on first use.
  if (!c.ok()) std::abort();
  return *c;
}

}  // namespace

absl::StatusOr<Floor> ParseFloor(std::string_view text) {
  if (text == "connected") return Floor::kConnected;
  if (text == "airgapped") return Floor::kAirgapped;
  if (text == "hosted") return Floor::kHosted;
  return absl::InvalidArgumentError(
      "invalid floor " + net::Quote(text) +
      "; valid: \"connected\", \"airgapped\", \"hosted\"");
}

std::string_view ToString(Floor floor) {
  switch (floor) {
    case Floor::kConnected:
      return "connected";
    case Floor::kAirgapped:
      return "airgapped";
    case Floor::kHosted:
      return "hosted";
  }
  return "unknown";
}

Verdict FloorDefault(Floor floor) {
  return floor == Floor::kAirgapped ? Verdict::kDeny : Verdict::kAllow;
}

std::vector<ProtectedCidr> FloorProtected(Floor floor) {
  const std::string source = "floor " + std::string(ToString(floor));
  std::vector<ProtectedCidr> out;
  for (std::string_view t : kCredentialEndpoints) {
    out.push_back({MustParse(t), source});
  }
  if (floor == Floor::kHosted) {
    for (std::string_view t : kHostedPrivate) {
      out.push_back({MustParse(t), source});
    }
  }
  return out;
}

}  // namespace egressd::policy
