// Ethernet frames built byte by byte, for the attacks a pod's own network
// stack (gVisor's netstack, a guest kernel) can put on its veth: IPv4
// fragments and options, IPv6 fragment and routing headers, ARP and
// neighbour discovery naming another's address, router advertisements.
// Every checksum is right (the receiving kernel would otherwise drop the
// attack for the wrong reason); a UDP checksum over IPv6 is computed against
// the final destination, as RFC 8200 8.1 says for a routing header.
// egressd-probe's packet-frame sends one as it is (Hex()).
#pragma once

#include <arpa/inet.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace egressd::test::frames {

using Bytes = std::vector<uint8_t>;
using Mac = std::array<uint8_t, 6>;

inline void Put16(Bytes& b, uint16_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}
inline void Put32(Bytes& b, uint32_t v) {
  Put16(b, static_cast<uint16_t>(v >> 16));
  Put16(b, static_cast<uint16_t>(v));
}
inline void Append(Bytes& b, const Bytes& more) { b.insert(b.end(), more.begin(), more.end()); }

// 4 or 16 bytes of a dotted or colon address (empty if it parses as neither).
inline Bytes Addr(const std::string& a) {
  uint8_t buf[16];
  if (inet_pton(AF_INET, a.c_str(), buf) == 1) return Bytes(buf, buf + 4);
  if (inet_pton(AF_INET6, a.c_str(), buf) == 1) return Bytes(buf, buf + 16);
  return {};
}

inline bool ParseMac(const std::string& s, Mac* m) {
  unsigned v[6];
  if (sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) return false;
  for (int i = 0; i < 6; ++i) (*m)[i] = static_cast<uint8_t>(v[i]);
  return true;
}

// The ones' complement sum of `b` folded into 16 bits, added to `sum`.
inline uint32_t Sum(const Bytes& b, uint32_t sum = 0) {
  for (size_t i = 0; i + 1 < b.size(); i += 2) sum += static_cast<uint32_t>(b[i] << 8 | b[i + 1]);
  if (b.size() & 1) sum += static_cast<uint32_t>(b.back() << 8);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return sum;
}
inline uint16_t Fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

inline Bytes Eth(const Mac& dst, const Mac& src, uint16_t type) {
  Bytes b(dst.begin(), dst.end());
  b.insert(b.end(), src.begin(), src.end());
  Put16(b, type);
  return b;
}

// An IPv4 header (options padded to 32 bits with end-of-options) and
// `payload`; frag is the flags-and-offset field (0x2000 = more fragments,
// the low 13 bits the offset in 8-byte units).
inline Bytes Ipv4(const std::string& src, const std::string& dst, uint8_t proto, uint16_t id, uint16_t frag,
                  Bytes options, const Bytes& payload) {
  while (options.size() % 4) options.push_back(0);
  const uint8_t ihl = static_cast<uint8_t>(5 + options.size() / 4);
  Bytes h = {static_cast<uint8_t>(0x40 | ihl), 0};
  Put16(h, static_cast<uint16_t>(ihl * 4 + payload.size()));
  Put16(h, id);
  Put16(h, frag);
  h.push_back(64);
  h.push_back(proto);
  Put16(h, 0);
  Append(h, Addr(src));
  Append(h, Addr(dst));
  Append(h, options);
  const uint16_t c = Fold(Sum(h));
  h[10] = static_cast<uint8_t>(c >> 8);
  h[11] = static_cast<uint8_t>(c);
  Append(h, payload);
  return h;
}

// UDP header and payload; the checksum over IPv6 uses `final_dst` (over IPv4
// pass an empty src: 0, no checksum, which IPv4 allows).
inline Bytes Udp(uint16_t sport, uint16_t dport, const std::string& payload, const std::string& src = "",
                 const std::string& final_dst = "") {
  Bytes u;
  Put16(u, sport);
  Put16(u, dport);
  Put16(u, static_cast<uint16_t>(8 + payload.size()));
  Put16(u, 0);
  u.insert(u.end(), payload.begin(), payload.end());
  if (!src.empty()) {
    Bytes pseudo = Addr(src);
    Append(pseudo, Addr(final_dst));
    Put32(pseudo, static_cast<uint32_t>(u.size()));
    Put32(pseudo, 17);
    uint16_t c = Fold(Sum(u, Sum(pseudo)));
    if (c == 0) c = 0xffff;
    u[6] = static_cast<uint8_t>(c >> 8);
    u[7] = static_cast<uint8_t>(c);
  }
  return u;
}

// An IPv6 header whose next header is `next`, then `rest` (extension headers
// already chained, then the upper layer).
inline Bytes Ipv6(const std::string& src, const std::string& dst, uint8_t next, const Bytes& rest,
                  uint8_t hop_limit = 64) {
  Bytes b = {0x60, 0, 0, 0};
  Put16(b, static_cast<uint16_t>(rest.size()));
  b.push_back(next);
  b.push_back(hop_limit);
  Append(b, Addr(src));
  Append(b, Addr(dst));
  Append(b, rest);
  return b;
}

// An IPv6 fragment header: offset in bytes (a multiple of 8).
inline Bytes Frag6(uint8_t next, uint16_t offset, bool more, uint32_t id) {
  Bytes b = {next, 0};
  Put16(b, static_cast<uint16_t>(offset | (more ? 1 : 0)));
  Put32(b, id);
  return b;
}

// A routing header of `type` (0: RFC 5095's deprecated source route, 2:
// Mobile IPv6, 4: segment routing) listing `hops`, segments left 1.  For an
// SRH the list is in reverse (segments[0] is the final destination).
inline Bytes Routing6(uint8_t next, uint8_t type, const std::vector<std::string>& hops) {
  Bytes b = {next, static_cast<uint8_t>(hops.size() * 2), type, 1};
  if (type == 4) {
    b.insert(b.end(), {static_cast<uint8_t>(hops.size() - 1), 0, 0, 0});  // last entry, flags, tag
  } else {
    b.insert(b.end(), {0, 0, 0, 0});
  }
  for (const auto& h : hops) Append(b, Addr(h));
  return b;
}

// ICMPv6 `type`/`code` with `body` (after the 4-byte header), checksummed.
inline Bytes Icmp6(const std::string& src, const std::string& dst, uint8_t type, uint8_t code, const Bytes& body) {
  Bytes m = {type, code, 0, 0};
  Append(m, body);
  Bytes pseudo = Addr(src);
  Append(pseudo, Addr(dst));
  Put32(pseudo, static_cast<uint32_t>(m.size()));
  Put32(pseudo, 58);
  const uint16_t c = Fold(Sum(m, Sum(pseudo)));
  m[2] = static_cast<uint8_t>(c >> 8);
  m[3] = static_cast<uint8_t>(c);
  return m;
}

// A neighbour discovery link-layer address option (1: source, 2: target).
inline Bytes LlOption(uint8_t type, const Mac& mac) {
  Bytes b = {type, 1};
  b.insert(b.end(), mac.begin(), mac.end());
  return b;
}

// An ARP packet (Ethernet, IPv4): op 1 request, 2 reply.
inline Bytes Arp(uint16_t op, const Mac& sha, const std::string& spa, const Mac& tha, const std::string& tpa) {
  Bytes b = {0, 1, 0x08, 0, 6, 4};
  Put16(b, op);
  b.insert(b.end(), sha.begin(), sha.end());
  Append(b, Addr(spa));
  b.insert(b.end(), tha.begin(), tha.end());
  Append(b, Addr(tpa));
  return b;
}

// The multicast MAC of an IPv6 multicast address (33:33 and its low 32 bits).
inline Mac MulticastMac(const std::string& group) {
  const Bytes a = Addr(group);
  return Mac{0x33, 0x33, a[12], a[13], a[14], a[15]};
}
// The solicited-node multicast group of `addr`.
inline std::string SolicitedNode(const std::string& addr) {
  const Bytes a = Addr(addr);
  char buf[64];
  snprintf(buf, sizeof(buf), "ff02::1:ff%02x:%02x%02x", a[13], a[14], a[15]);
  return buf;
}

inline std::string Hex(const Bytes& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t c : b) {
    s.push_back(d[c >> 4]);
    s.push_back(d[c & 15]);
  }
  return s;
}

inline Bytes Frame(const Mac& dst, const Mac& src, uint16_t type, const Bytes& l3) {
  Bytes f = Eth(dst, src, type);
  Append(f, l3);
  return f;
}

}  // namespace egressd::test::frames
