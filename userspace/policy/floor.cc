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
    // Broadcast and multicast reach every host on the link, and a group
    // join makes the kernel announce the group there (IGMP/MLD).
    "224.0.0.0/4", "255.255.255.255/32", "ff00::/8",
};

// IPv6 spaces whose addresses carry an IPv4 address that a socket, a tunnel
// or a translator reaches: each with where the IPv4 bits sit (RFC 6052), as
// bpf/lib/addr.h reads them.  ::/96 is IPv4-compatible, ::ffff:0:0/96
// v4-mapped (Cidr::Parse already folds a prefix inside it to IPv4),
// ::ffff:0:0:0/96 SIIT, 64:ff9b::/96 the well-known NAT64 prefix and
// 64:ff9b:1::/48 local-use NAT64 (RFC 8215), whose operator may place the
// IPv4 address after a /48, /56, /64 or /96 prefix (skipping bits 64-71).
struct EmbeddingSpace {
  std::array<uint8_t, 16> prefix;
  int prefix_len;
  std::vector<int> v4_starts;  // the bit where IPv4 bit 0 sits, for each place
};

const std::vector<EmbeddingSpace>& EmbeddingSpaces() {
  static const std::vector<EmbeddingSpace> spaces = {
      {{0}, 96, {96}},
      {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, 96, {96}},
      {{0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0}, 96, {96}},
      {{0, 0x64, 0xff, 0x9b}, 96, {96}},
      {{0, 0x64, 0xff, 0x9b, 0, 1}, 48, {48, 56, 64, 96}},
  };
  return spaces;
}

bool Bit(const std::array<uint8_t, 16>& b, int bit) {
  return (b[bit / 8] >> (7 - bit % 8)) & 1;
}

// Address bit of IPv4 bit i when the IPv4 address starts at `start`.
int V4BitPosition(int start, int i) {
  const int pos = start + i;
  return start <= 64 && pos >= 64 ? pos + 8 : pos;  // RFC 6052: bits 64-71 are the u octet
}

// The IPv4 prefixes a v6 prefix reaches through the spaces above: one for
// each place the IPv4 address may sit, 0.0.0.0/0 where the prefix covers a
// whole space.
std::vector<net::Cidr> EmbeddedV4(const net::Cidr& c) {
  std::vector<net::Cidr> out;
  if (c.family() == net::Family::kV4) return out;
  const auto& b = c.addr().bytes();
  for (const EmbeddingSpace& s : EmbeddingSpaces()) {
    const int common = std::min(c.prefix_len(), s.prefix_len);
    bool match = true;
    for (int bit = 0; bit < common && match; ++bit) match = Bit(b, bit) == Bit(s.prefix, bit);
    if (!match) continue;
    for (int start : s.v4_starts) {
      std::array<uint8_t, 4> v4{};
      int len = 0;
      for (int i = 0; i < 32; ++i) {
        const int pos = V4BitPosition(start, i);
        if (pos >= c.prefix_len()) break;
        if (Bit(b, pos)) v4[i / 8] |= static_cast<uint8_t>(0x80 >> (i % 8));
        len = i + 1;
      }
      auto v = net::Cidr::Make(net::IpAddr::V4(v4), len);
      if (v.ok()) out.push_back(*v);
    }
  }
  return out;
}

net::Cidr MustParse(std::string_view text) {
  auto c = net::Cidr::Parse(text);
  // The tables above are constants; a typo there must not ship a floor that
  // protects less than it says, so fail loudly on first use.
  if (!c.ok()) std::abort();
  return *c;
}

}  // namespace

std::optional<FloorConflict> CheckFloor(const net::Cidr& c,
                                        const std::vector<ProtectedCidr>& prot) {
  std::vector<net::Cidr> candidates = {c};
  for (const net::Cidr& e : EmbeddedV4(c)) candidates.push_back(e);
  for (const net::Cidr& x : candidates) {
    for (const ProtectedCidr& p : prot) {
      if (p.cidr.Contains(x)) return FloorConflict{true, &p};
    }
  }
  // Same-family containment is named before the embedded kinds, as the one a
  // reader sees at a glance.  The first entry in floor order is named, which
  // puts the credential endpoints first.
  for (const net::Cidr& x : candidates) {
    for (const ProtectedCidr& p : prot) {
      if (x.Contains(p.cidr)) return FloorConflict{false, &p};
    }
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
