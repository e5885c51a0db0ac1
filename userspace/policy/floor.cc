#include "userspace/policy/floor.h"

#include <algorithm>
#include <array>
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

// ::ffff:0:0/96 and 64:ff9b::/96: a socket connecting to an address in
// either reaches (or, through NAT64, is judged as) an IPv4 destination.
constexpr std::array<uint8_t, 16> kMapped = {0, 0, 0, 0, 0, 0, 0, 0,
                                             0, 0, 0xff, 0xff, 0, 0, 0, 0};
constexpr std::array<uint8_t, 16> kNat64 = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0,
                                            0, 0, 0, 0, 0, 0, 0, 0};

net::Cidr MustParse(std::string_view text) {
  auto c = net::Cidr::Parse(text);
  // The tables above are constants; a typo there must not ship a floor that
  // protects less than it says, so fail loudly on first use.
  if (!c.ok()) std::abort();
  return *c;
}

// Whether v6 prefix `c` covers all of the 96-bit prefix `space`.
// (Compared bit by bit: IpAddr would fold the mapped prefix to IPv4.)
bool CoversSpace(const net::Cidr& c, const std::array<uint8_t, 16>& space) {
  if (c.family() == net::Family::kV4 || c.prefix_len() > 96) return false;
  const auto& b = c.addr().bytes();
  for (int bit = 0; bit < c.prefix_len(); ++bit) {
    const uint8_t m = static_cast<uint8_t>(0x80 >> (bit % 8));
    if ((b[bit / 8] & m) != (space[bit / 8] & m)) return false;
  }
  return true;
}

// The IPv4 prefix a v6 prefix inside 64:ff9b::/96 stands for.
std::optional<net::Cidr> Nat64Embedded(const net::Cidr& c) {
  if (c.family() == net::Family::kV4 || c.prefix_len() < 96) return std::nullopt;
  const auto& b = c.addr().bytes();
  if (!std::equal(kNat64.begin(), kNat64.begin() + 12, b.begin())) {
    return std::nullopt;
  }
  auto v4 = net::Cidr::Make(net::IpAddr::V4({b[12], b[13], b[14], b[15]}),
                            c.prefix_len() - 96);
  if (!v4.ok()) return std::nullopt;
  return *v4;
}

const ProtectedCidr* FirstV4(const std::vector<ProtectedCidr>& prot) {
  for (const ProtectedCidr& p : prot) {
    if (p.cidr.family() == net::Family::kV4) return &p;
  }
  return nullptr;
}

}  // namespace

std::optional<FloorConflict> CheckFloor(const net::Cidr& c,
                                        const std::vector<ProtectedCidr>& prot) {
  const std::optional<net::Cidr> embedded = Nat64Embedded(c);
  for (const net::Cidr* x : {&c, embedded ? &*embedded : nullptr}) {
    if (x == nullptr) continue;
    for (const ProtectedCidr& p : prot) {
      if (p.cidr.Contains(*x)) return FloorConflict{true, &p};
    }
  }
  // Same-family containment is named before the embedded kinds, as the one a
  // reader sees at a glance.  The first entry in floor order is named, which
  // puts the credential endpoints first.
  for (const net::Cidr* x : {&c, embedded ? &*embedded : nullptr}) {
    if (x == nullptr) continue;
    for (const ProtectedCidr& p : prot) {
      if (x->Contains(p.cidr)) return FloorConflict{false, &p};
    }
  }
  if (CoversSpace(c, kMapped) || CoversSpace(c, kNat64)) {
    if (const ProtectedCidr* p = FirstV4(prot)) return FloorConflict{false, p};
  }
  return std::nullopt;
}

absl::StatusOr<Floor> ParseFloor(std::string_view text) {
  if (auto f = kFloorNames.Find(text)) return *f;
  return absl::InvalidArgumentError("invalid floor " + net::Quote(text) +
                                    "; valid: " + kFloorNames.Join("\"", "\"", ", "));
}

std::string_view ToString(Floor floor) { return kFloorNames.Name(floor); }

Verdict FloorDefault(Floor floor) {
  return floor == Floor::kAirgapped ? Verdict::kDeny : Verdict::kAllow;
}

std::vector<ProtectedCidr> FloorProtected(Floor floor) {
  const std::string source = "floor " + std::string(ToString(floor));
  std::vector<ProtectedCidr> out;
  for (const net::Cidr& c : CredentialEndpoints()) out.push_back({c, source});
  if (floor == Floor::kHosted) {
    for (const net::Cidr& c : HostedEdgeRanges()) out.push_back({c, source});
  }
  return out;
}

std::vector<net::Cidr> CredentialEndpoints() {
  std::vector<net::Cidr> out;
  for (std::string_view t : kCredentialEndpoints) out.push_back(MustParse(t));
  return out;
}

std::vector<net::Cidr> HostedEdgeRanges() {
  std::vector<net::Cidr> out;
  for (std::string_view t : kHostedPrivate) out.push_back(MustParse(t));
  return out;
}

}  // namespace egressd::policy
