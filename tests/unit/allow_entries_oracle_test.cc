// The LPM oracle of tests/fuzz/allow_entries_oracle.h over generated cases,
// so builds without libFuzzer (g++) check the port folding too: for every
// boundary probe, the longest match over BuildAllowEntries' entries allows
// exactly what any input entry allows.
#include "tests/fuzz/allow_entries_oracle.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace egressd::maps {
namespace {

using policy::AllowedCidr;
using policy::PortRange;

net::Cidr C(const char* s) { return *net::Cidr::Parse(s); }

net::Cidr Masked(const net::IpAddr& ip, int len) {
  std::array<uint8_t, 16> b = ip.bytes();
  for (int bit = len; bit < ip.bits(); ++bit) b[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  const net::IpAddr m = ip.is_v4() ? net::IpAddr::V4({b[0], b[1], b[2], b[3]}) : net::IpAddr::V6(b);
  return *net::Cidr::Make(m, len);
}

// Cases dense in overlaps: few addresses, prefix lengths that nest, ports
// from a small space (so ranges overlap and touch) or anywhere.  Raw
// mt19937 draws, not <random> distributions, so every standard library
// generates the same cases.
class Generator {
 public:
  explicit Generator(uint32_t seed) : rng_(seed) {}

  std::vector<AllowedCidr> Case() {
    std::vector<AllowedCidr> out(1 + Below(10));
    const bool v6 = Below(4) == 0;
    for (AllowedCidr& a : out) {
      a.cidr = v6 ? V6() : V4();
      a.source = "generated";
      if (Below(3) == 0) continue;  // every port
      const bool narrow = Below(2) == 0;
      for (uint32_t n = 1 + Below(3); n > 0; --n) {
        uint32_t first = narrow ? Below(40) : Below(65536);
        uint32_t last = first + (narrow ? Below(6) : Below(2000));
        if (last > 65535) last = 65535;
        a.ports.push_back({static_cast<uint16_t>(first), static_cast<uint16_t>(last)});
      }
    }
    return out;
  }

 private:
  uint32_t Below(uint32_t n) { return rng_() % n; }

  int Length(int bits) {
    static constexpr int kV4[] = {0, 8, 16, 20, 24, 24, 25, 28, 30, 31, 32, 32};
    static constexpr int kV6[] = {0, 32, 48, 64, 64, 96, 112, 120, 127, 128, 128};
    if (Below(4) == 0) return static_cast<int>(Below(bits + 1));
    return bits == 32 ? kV4[Below(std::size(kV4))] : kV6[Below(std::size(kV6))];
  }

  net::Cidr V4() {
    const uint8_t b = static_cast<uint8_t>(Below(3)), c = static_cast<uint8_t>(Below(3) * 64);
    const uint8_t d = static_cast<uint8_t>(Below(4) * 63 + Below(3));
    return Masked(net::IpAddr::V4({10, b, c, d}), Length(32));
  }

  net::Cidr V6() {
    std::array<uint8_t, 16> b = {0x20, 0x01, 0x0d, 0xb8};
    b[7] = static_cast<uint8_t>(Below(3));
    b[14] = static_cast<uint8_t>(Below(3));
    b[15] = static_cast<uint8_t>(Below(4) * 63 + Below(3));
    return Masked(net::IpAddr::V6(b), Length(128));
  }

  std::mt19937 rng_;
};

TEST(AllowEntriesOracle, LongestMatchAllowsWhatAnyInputAllowsOverGeneratedCases) {
  Generator gen(20261201);
  int refused = 0, probes = 0;
  for (int i = 0; i < 1500; ++i) {
    const std::vector<AllowedCidr> in = gen.Case();
    const std::vector<oracle::Probe> p = oracle::BoundaryProbes(in);
    probes += static_cast<int>(p.size());
    refused += BuildAllowEntries(in).ok() ? 0 : 1;
    const std::string broken = oracle::Check(in, p);
    ASSERT_EQ(broken, "") << "case " << i;
  }
  // The generator reaches the refusal too, not only the folding.
  EXPECT_GT(refused, 0);
  std::printf("[ figure ] 1500 cases, %d refused, %d probes\n", refused, probes);
}

TEST(AllowEntriesOracle, NinePortsUnderOneCoverAreRefusedAndTheRefusalIsTrue) {
  std::vector<AllowedCidr> in = {{C("10.0.0.0/8"), {}, "t"}};
  for (uint16_t p = 1; p <= 17; p += 2) in[0].ports.push_back({p, p});  // 9 disjoint
  in.push_back({C("10.1.0.0/16"), {{100, 100}}, "t"});
  auto built = BuildAllowEntries(in);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(oracle::Check(in, oracle::BoundaryProbes(in)), "");
}

// The oracle is not vacuous: entries built without folding (each prefix
// keeping only its own ports, as a naive build would) break it.
TEST(AllowEntriesOracle, CatchesAnUnfoldedBuild) {
  const std::vector<AllowedCidr> in = {{C("192.0.2.0/24"), {}, "t"},
                                       {C("192.0.2.10/32"), {{443, 443}}, "t"}};
  std::vector<AllowEntry> naive;
  for (const AllowedCidr& a : in) {
    AllowEntry e{a.cidr, {}};
    e.value.nranges = static_cast<uint32_t>(a.ports.size());
    for (size_t i = 0; i < a.ports.size(); ++i) e.value.ranges[i] = {a.ports[i].first, a.ports[i].last};
    naive.push_back(e);
  }
  EXPECT_EQ(oracle::CheckBuilt(in, naive, oracle::BoundaryProbes(in)),
            "192.0.2.10 port 0: the inputs allow it, the longest match denies it");
  EXPECT_EQ(oracle::Check(in, oracle::BoundaryProbes(in)), "");
}

TEST(AllowEntriesOracle, CatchesARefusalThatIsNotTrue) {
  const std::vector<AllowedCidr> in = {{C("192.0.2.0/24"), {{80, 80}}, "t"}};
  const absl::StatusOr<std::vector<AllowEntry>> refused =
      absl::InvalidArgumentError("\"192.0.2.0/24\": 9 disjoint port ranges; at most 8 fit one entry");
  EXPECT_EQ(oracle::CheckBuilt(in, refused, {}),
            "refused 192.0.2.0/24, which needs 1 ranges: \"192.0.2.0/24\": 9 disjoint port ranges; "
            "at most 8 fit one entry");
}

TEST(AllowEntriesOracle, BoundaryProbesStepOutsideEachPrefix) {
  const std::vector<oracle::Probe> p = oracle::BoundaryProbes({{C("192.0.2.0/24"), {{443, 443}}, "t"}});
  std::set<std::string> addrs;
  for (const oracle::Probe& x : p) addrs.insert(x.addr.ToString());
  EXPECT_EQ(addrs, (std::set<std::string>{"192.0.1.255", "192.0.2.0", "192.0.2.1", "192.0.2.254",
                                          "192.0.2.255", "192.0.3.0"}));
  // Ports 0, 1, 442, 443, 444, 65535 at each address.
  EXPECT_EQ(p.size(), 6u * 6u);
}

}  // namespace
}  // namespace egressd::maps
