#include "userspace/net/ip.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"

namespace egressd::net {
namespace {

constexpr size_t kMaxQuoted = 80;

// What inet_pton produced, before v4-mapped addresses are folded to IPv4:
// Cidr::Parse needs to know the text was IPv6 to read the length on the
// 128-bit scale.
struct RawAddr {
  int af;
  std::array<uint8_t, 16> bytes;
};

bool IsMapped(const std::array<uint8_t, 16>& b) {
  for (int i = 0; i < 10; ++i) {
    if (b[i] != 0) return false;
  }
  return b[10] == 0xff && b[11] == 0xff;
}

absl::StatusOr<RawAddr> ParseRaw(std::string_view text) {
  // Quoted only for a message (every address of a 100k-CIDR policy passes
  // here: bench/results/2026-12-03-notes.md).
  auto q = [&] { return Quote(text); };
  if (text.empty()) {
    return absl::InvalidArgumentError(q() + " is not an IP address (empty)");
  }
  if (text.find('%') != std::string_view::npos) {
    return absl::InvalidArgumentError(
        q() + " has a zone id; zone ids are not accepted");
  }
  if (text.front() == '[' || text.back() == ']') {
    return absl::InvalidArgumentError(
        q() + " is bracketed; write the address without brackets");
  }
  // inet_pton reads a C string, so an embedded NUL would hide a tail of
  // garbage; whitelisting the alphabet also catches whitespace.
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
        c == '\f') {
      return absl::InvalidArgumentError(q() + " contains whitespace");
    }
    const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
                    (c >= 'A' && c <= 'F') || c == '.' || c == ':';
    if (!ok) return absl::InvalidArgumentError(q() + " is not an IP address");
  }
  const std::string s(text);
  RawAddr raw{};
  if (s.find(':') != std::string::npos) {
    in6_addr a6{};
    if (inet_pton(AF_INET6, s.c_str(), &a6) != 1) {
      return absl::InvalidArgumentError(q() + " is not an IP address");
    }
    raw.af = AF_INET6;
    std::memcpy(raw.bytes.data(), &a6, 16);
  } else {
    // glibc's inet_pton takes only four decimal parts without leading zeros,
    // so "10.1", "0x7f.1" and "010.0.0.1" (octal to inet_aton) all fail here.
    in_addr a4{};
    if (inet_pton(AF_INET, s.c_str(), &a4) != 1) {
      return absl::InvalidArgumentError(q() + " is not an IP address");
    }
    raw.af = AF_INET;
    std::memcpy(raw.bytes.data(), &a4, 4);
  }
  return raw;
}

IpAddr FromRaw(const RawAddr& raw) {
  if (raw.af == AF_INET) {
    return IpAddr::V4({raw.bytes[0], raw.bytes[1], raw.bytes[2], raw.bytes[3]});
  }
  return IpAddr::V6(raw.bytes);
}

// Decimal only, no sign, no leading zero: "/08" reads as octal to some tools.
std::optional<int> ParseLen(std::string_view s) {
  if (s.empty() || s.size() > 3) return std::nullopt;
  if (s.size() > 1 && s[0] == '0') return std::nullopt;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

bool PrefixMatches(const std::array<uint8_t, 16>& a,
                   const std::array<uint8_t, 16>& b, int len) {
  const int full = len / 8;
  if (std::memcmp(a.data(), b.data(), full) != 0) return false;
  const int rest = len % 8;
  if (rest == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a[full] & mask) == (b[full] & mask);
}

std::array<uint8_t, 16> Masked(const std::array<uint8_t, 16>& b, int len) {
  std::array<uint8_t, 16> out{};
  const int full = len / 8;
  std::copy_n(b.begin(), full, out.begin());
  const int rest = len % 8;
  if (rest != 0) out[full] = b[full] & static_cast<uint8_t>(0xff << (8 - rest));
  return out;
}

// The checks shared by Parse and Make; `shown` is how the caller spelled the
// prefix, so the error quotes what the user wrote.
absl::Status CheckPrefix(const IpAddr& addr, int len, const std::string& shown) {
  auto q = [&] { return Quote(shown); };  // only for a message, as in ParseRaw
  if (len < 0 || len > addr.bits()) {
    return absl::InvalidArgumentError(
        q() + " has prefix length " + std::to_string(len) + "; expected 0-" +
        std::to_string(addr.bits()) + (addr.is_v4() ? " for IPv4" : " for IPv6"));
  }
  const auto net = Masked(addr.bytes(), len);
  if (net != addr.bytes()) {
    const IpAddr net_addr = addr.is_v4()
                                ? IpAddr::V4({net[0], net[1], net[2], net[3]})
                                : IpAddr::V6(net);
    return absl::InvalidArgumentError(
        q() + " has host bits set; the network is " +
        Quote(net_addr.ToString() + "/" + std::to_string(len)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string Quote(std::string_view text) {
  const bool cut = text.size() > kMaxQuoted;
  if (cut) text = text.substr(0, kMaxQuoted);
  std::string out = "\"";
  out += absl::CHexEscape(absl::string_view(text.data(), text.size()));
  if (cut) out += "...";
  out += "\"";
  return out;
}

absl::StatusOr<IpAddr> IpAddr::Parse(std::string_view text) {
  auto raw = ParseRaw(text);
  if (!raw.ok()) return raw.status();
  return FromRaw(*raw);
}

IpAddr IpAddr::V4(std::array<uint8_t, 4> b) {
  std::array<uint8_t, 16> bytes{};
  std::copy(b.begin(), b.end(), bytes.begin());
  return IpAddr(Family::kV4, bytes);
}

IpAddr IpAddr::V6(std::array<uint8_t, 16> b) {
  if (IsMapped(b)) return V4({b[12], b[13], b[14], b[15]});
  return IpAddr(Family::kV6, b);
}

std::array<uint8_t, 16> IpAddr::ToMapped16() const {
  if (!is_v4()) return bytes_;
  std::array<uint8_t, 16> out{};
  out[10] = 0xff;
  out[11] = 0xff;
  std::copy_n(bytes_.begin(), 4, out.begin() + 12);
  return out;
}

namespace {

// inet_ntop's text without its sprintf per field: the 100k-CIDR apply spent
// a quarter of its instructions formatting addresses (ContentHash, the
// renderings; bench/results/2026-12-03-notes.md).  The output is glibc's,
// byte for byte (tests/unit/ip_test.cc compares them): IPv4 dotted decimal;
// IPv6 with lowercase hex words, the first longest run of two or more zero
// words written "::", and ::a.b.c.d / ::ffff:a.b.c.d for the compatible and
// mapped forms (glibc's rule, from BIND's inet_ntop6).
char* PutV4(char* out, const uint8_t* b) {
  for (int i = 0; i < 4; ++i) {
    if (i) *out++ = '.';
    const unsigned v = b[i];
    if (v >= 100) *out++ = static_cast<char>('0' + v / 100);
    if (v >= 10) *out++ = static_cast<char>('0' + v / 10 % 10);
    *out++ = static_cast<char>('0' + v % 10);
  }
  return out;
}

char* PutHexWord(char* out, unsigned w) {
  static constexpr char kHex[] = "0123456789abcdef";
  bool started = false;
  for (int shift = 12; shift >= 0; shift -= 4) {
    const unsigned nib = (w >> shift) & 0xf;
    if (nib || started || shift == 0) {
      *out++ = kHex[nib];
      started = true;
    }
  }
  return out;
}

char* PutV6(char* out, const uint8_t* b) {
  unsigned words[8];
  for (int i = 0; i < 8; ++i) words[i] = (unsigned{b[2 * i]} << 8) | b[2 * i + 1];
  int best_base = -1, best_len = 0, cur_base = -1, cur_len = 0;
  for (int i = 0; i < 8; ++i) {
    if (words[i] == 0) {
      if (cur_base == -1) cur_base = i, cur_len = 1;
      else ++cur_len;
    } else if (cur_base != -1) {
      if (best_base == -1 || cur_len > best_len) best_base = cur_base, best_len = cur_len;
      cur_base = -1;
    }
  }
  if (cur_base != -1 && (best_base == -1 || cur_len > best_len)) best_base = cur_base, best_len = cur_len;
  if (best_base != -1 && best_len < 2) best_base = -1;
  for (int i = 0; i < 8; ++i) {
    if (best_base != -1 && i >= best_base && i < best_base + best_len) {
      if (i == best_base) *out++ = ':';
      continue;
    }
    if (i != 0) *out++ = ':';
    if (i == 6 && best_base == 0 && (best_len == 6 || (best_len == 5 && words[5] == 0xffff))) {
      return PutV4(out, b + 12);
    }
    out = PutHexWord(out, words[i]);
  }
  if (best_base != -1 && best_base + best_len == 8) *out++ = ':';
  return out;
}

}  // namespace

std::string IpAddr::ToString() const {
  char buf[INET6_ADDRSTRLEN];
  char* end = is_v4() ? PutV4(buf, bytes_.data()) : PutV6(buf, bytes_.data());
  return std::string(buf, static_cast<size_t>(end - buf));
}

absl::StatusOr<Cidr> Cidr::Parse(std::string_view text) {
  const size_t slash = text.find('/');
  const std::string_view addr_text =
      slash == std::string_view::npos ? text : text.substr(0, slash);
  auto raw = ParseRaw(addr_text);
  if (!raw.ok()) {
    if (slash == std::string_view::npos) return raw.status();
    return absl::InvalidArgumentError(
        Quote(text) + " is not a CIDR: " + std::string(raw.status().message()));
  }
  const IpAddr addr = FromRaw(*raw);
  const bool mapped = raw->af == AF_INET6 && addr.is_v4();
  int len = addr.bits();
  if (slash != std::string_view::npos) {
    const std::string_view len_text = text.substr(slash + 1);
    const auto parsed = ParseLen(len_text);
    const int scale = raw->af == AF_INET6 ? 128 : 32;
    if (!parsed) {
      return absl::InvalidArgumentError(
          Quote(text) + " has an invalid prefix length " + Quote(len_text) +
          "; expected a decimal number 0-" + std::to_string(scale));
    }
    len = *parsed;
    if (mapped) {
      if (len > 128) {
        return absl::InvalidArgumentError(Quote(text) + " has prefix length " +
                                          std::to_string(len) +
                                          "; expected 0-128 for IPv6");
      }
      if (len < 96) {
        return absl::InvalidArgumentError(
            Quote(text) +
            " spans non-IPv4 space: an IPv4-mapped prefix needs a length of "
            "96-128");
      }
      len -= 96;
    }
  }
  if (auto st = CheckPrefix(addr, len, std::string(text)); !st.ok()) return st;
  return Cidr(addr, len);
}

absl::StatusOr<Cidr> Cidr::Make(IpAddr addr, int prefix_len) {
  const std::string shown = addr.ToString() + "/" + std::to_string(prefix_len);
  if (auto st = CheckPrefix(addr, prefix_len, shown); !st.ok()) return st;
  return Cidr(addr, prefix_len);
}

bool Cidr::Contains(const IpAddr& ip) const {
  return ip.family() == family() &&
         PrefixMatches(addr_.bytes(), ip.bytes(), prefix_len_);
}

bool Cidr::Contains(const Cidr& other) const {
  return other.family() == family() && other.prefix_len_ >= prefix_len_ &&
         Contains(other.addr_);
}

bool Cidr::Overlaps(const Cidr& other) const {
  return Contains(other) || other.Contains(*this);
}

std::string Cidr::ToString() const {
  return addr_.ToString() + "/" + std::to_string(prefix_len_);
}

}  // namespace egressd::net
