// libFuzzer target for the port folding of maps::BuildAllowEntries, checked
// against an LPM oracle (allow_entries_oracle.h): the longest match over the
// entries it builds allows exactly what any input entry allows.
//
// An input is a list of entries, 6 bytes each plus 4 per port range:
//   tag     bit 7: IPv6; bits 0-2: number of port ranges (0: every port)
//   len     prefix length, taken modulo 33 (IPv4) or 129 (IPv6)
//   a0..a3  the address: IPv4 a0.a1.a2.a3; IPv6 2001:db8:a0a1:a2a3::a0a1:a2a3,
//           so that short and long IPv6 prefixes both nest and overlap
//   ranges  first, last (big-endian 16 bits each; swapped if inverted)
// Host bits are cleared.  Probes are every boundary the entries define.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "tests/fuzz/allow_entries_oracle.h"

namespace {

using namespace egressd;

constexpr size_t kMaxEntries = 24;  // probes grow with entries × port edges

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() {
    const uint16_t hi = U8();
    return static_cast<uint16_t>(hi << 8 | U8());
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

std::optional<net::Cidr> Masked(net::IpAddr ip, int len) {
  std::array<uint8_t, 16> b = ip.bytes();
  for (int bit = len; bit < ip.bits(); ++bit) b[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  const net::IpAddr masked = ip.is_v4() ? net::IpAddr::V4({b[0], b[1], b[2], b[3]}) : net::IpAddr::V6(b);
  auto c = net::Cidr::Make(masked, len);
  if (!c.ok()) return std::nullopt;
  return *c;
}

std::vector<policy::AllowedCidr> Decode(const uint8_t* data, size_t size) {
  Reader r(data, size);
  std::vector<policy::AllowedCidr> out;
  while (!r.done() && out.size() < kMaxEntries) {
    const uint8_t tag = r.U8();
    const bool v6 = (tag & 0x80) != 0;
    const int len = r.U8() % (v6 ? 129 : 33);
    const uint8_t a[4] = {r.U8(), r.U8(), r.U8(), r.U8()};
    const net::IpAddr ip =
        v6 ? net::IpAddr::V6({0x20, 0x01, 0x0d, 0xb8, a[0], a[1], a[2], a[3], 0, 0, 0, 0, a[0], a[1], a[2], a[3]})
           : net::IpAddr::V4({a[0], a[1], a[2], a[3]});
    std::vector<policy::PortRange> ports;
    for (int i = 0; i < (tag & 7); ++i) {
      uint16_t first = r.U16(), last = r.U16();
      if (first > last) std::swap(first, last);
      ports.push_back({first, last});
    }
    if (auto c = Masked(ip, len)) out.push_back({*c, std::move(ports), "fuzz"});
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<policy::AllowedCidr> in = Decode(data, size);
  const std::string broken = maps::oracle::Check(in, maps::oracle::BoundaryProbes(in));
  if (!broken.empty()) {
    std::fprintf(stderr, "BuildAllowEntries breaks the LPM oracle: %s\ninputs:\n", broken.c_str());
    for (const policy::AllowedCidr& a : in) {
      std::fprintf(stderr, "  %s", a.cidr.ToString().c_str());
      for (const policy::PortRange& p : a.ports) std::fprintf(stderr, " %u-%u", p.first, p.last);
      std::fprintf(stderr, "\n");
    }
    std::abort();
  }
  return 0;
}
