// IP addresses and CIDR prefixes as the policy compiler and the BPF maps see
// them.  Parsing is strict: a value that could mean two things (a zone id, a
// bracketed address, a prefix with host bits set) is an error, because a
// sandbox egress rule that silently means something else is a hole.
#ifndef EGRESSD_USERSPACE_NET_IP_H_
#define EGRESSD_USERSPACE_NET_IP_H_

#include <array>
#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace egressd::net {

enum class Family { kV4, kV6 };

class IpAddr {
 public:
  // 0.0.0.0, so the type can sit in aggregates and containers.
  IpAddr() = default;

  // "192.0.2.1" or "2001:db8::1".  Brackets and zone ids ("%eth0") are
  // rejected.  "::ffff:192.0.2.1" parses to the IPv4 address 192.0.2.1: the
  // kernel hands a v4-mapped destination to the IPv4 path, so that is the
  // address a rule has to match.
  static absl::StatusOr<IpAddr> Parse(std::string_view text);
  static IpAddr V4(std::array<uint8_t, 4> b);
  // Unmaps ::ffff:a.b.c.d to the IPv4 address for the same reason as Parse.
  static IpAddr V6(std::array<uint8_t, 16> b);

  Family family() const { return family_; }
  bool is_v4() const { return family_ == Family::kV4; }
  int bits() const { return is_v4() ? 32 : 128; }
  // Network order; IPv4 in bytes[0..3] and the rest zero.
  const std::array<uint8_t, 16>& bytes() const { return bytes_; }
  // IPv4 as ::ffff:a.b.c.d (the form the resolved/socket maps key on).
  std::array<uint8_t, 16> ToMapped16() const;
  std::string ToString() const;

  // Family first, so every IPv4 address sorts before every IPv6 one.
  auto operator<=>(const IpAddr&) const = default;
  bool operator==(const IpAddr&) const = default;

 private:
  IpAddr(Family family, const std::array<uint8_t, 16>& bytes)
      : family_(family), bytes_(bytes) {}

  Family family_ = Family::kV4;
  std::array<uint8_t, 16> bytes_{};
};

class Cidr {
 public:
  // 0.0.0.0/32, so the type can sit in aggregates and containers.
  Cidr() = default;

  // "addr" (a host prefix, /32 or /128) or "addr/len".  An IPv4-mapped IPv6
  // prefix ("::ffff:10.0.0.0/104") becomes the IPv4 prefix (10.0.0.0/8); one
  // shorter than /96 reaches outside the mapped space and is rejected.
  static absl::StatusOr<Cidr> Parse(std::string_view text);
  static absl::StatusOr<Cidr> Make(IpAddr addr, int prefix_len);

  const IpAddr& addr() const { return addr_; }
  int prefix_len() const { return prefix_len_; }
  Family family() const { return addr_.family(); }

  // Families never mix: an IPv4 address is never inside an IPv6 prefix
  // (IpAddr holds v4-mapped addresses as IPv4).
  bool Contains(const IpAddr& ip) const;
  bool Contains(const Cidr& other) const;
  bool Overlaps(const Cidr& other) const;
  bool IsHost() const { return prefix_len_ == addr_.bits(); }
  // Always with the length: "192.0.2.0/24", "192.0.2.1/32".
  std::string ToString() const;

  // Address first, then length: 10.0.0.0/8 < 10.0.0.0/16 < 10.1.0.0/16.
  auto operator<=>(const Cidr&) const = default;
  bool operator==(const Cidr&) const = default;

 private:
  Cidr(IpAddr addr, int prefix_len) : addr_(addr), prefix_len_(prefix_len) {}

  IpAddr addr_;
  int prefix_len_ = 32;
};

// `text` in double quotes for an error message, with control and non-ASCII
// bytes escaped and very long values cut, so a hostile value cannot forge
// extra lines or flood a log.
std::string Quote(std::string_view text);

}  // namespace egressd::net

#endif  // EGRESSD_USERSPACE_NET_IP_H_
