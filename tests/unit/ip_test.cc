#include "userspace/net/ip.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>
#include <string>
#include <vector>

namespace egressd::net {
namespace {

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

IpAddr Ip(std::string_view t) {
  auto r = IpAddr::Parse(t);
  EXPECT_TRUE(r.ok()) << t << ": " << r.status();
  return r.ok() ? *r : IpAddr();
}

Cidr C(std::string_view t) {
  auto r = Cidr::Parse(t);
  EXPECT_TRUE(r.ok()) << t << ": " << r.status();
  return r.ok() ? *r : Cidr();
}

struct AddrOk {
  const char* text;
  Family family;
  const char* canonical;
};

TEST(IpAddrParse, AcceptsAndCanonicalizes) {
  const AddrOk cases[] = {
      {"192.0.2.1", Family::kV4, "192.0.2.1"},
      {"0.0.0.0", Family::kV4, "0.0.0.0"},
      {"255.255.255.255", Family::kV4, "255.255.255.255"},
      {"2001:db8::1", Family::kV6, "2001:db8::1"},
      {"2001:DB8:0:0:0:0:0:1", Family::kV6, "2001:db8::1"},
      {"::", Family::kV6, "::"},
      {"::1", Family::kV6, "::1"},
      {"fd00:ec2::254", Family::kV6, "fd00:ec2::254"},
      // The kernel hands v4-mapped destinations to the IPv4 path.
      {"::ffff:192.0.2.1", Family::kV4, "192.0.2.1"},
      {"::FFFF:c000:0201", Family::kV4, "192.0.2.1"},
      {"0:0:0:0:0:ffff:169.254.169.254", Family::kV4, "169.254.169.254"},
  };
  for (const auto& c : cases) {
    auto r = IpAddr::Parse(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status();
    EXPECT_EQ(r->family(), c.family) << c.text;
    EXPECT_EQ(r->ToString(), c.canonical) << c.text;
    EXPECT_EQ(r->bits(), c.family == Family::kV4 ? 32 : 128) << c.text;
    EXPECT_EQ(r->is_v4(), c.family == Family::kV4) << c.text;
  }
}

struct Bad {
  const char* text;
  const char* want;  // substring of the error
};

TEST(IpAddrParse, RejectsWithQuotedValue) {
  const Bad cases[] = {
      {"", "\"\" is not an IP address (empty)"},
      {"[2001:db8::1]", "\"[2001:db8::1]\" is bracketed"},
      {"fe80::1%eth0", "\"fe80::1%eth0\" has a zone id"},
      {" 192.0.2.1", "\" 192.0.2.1\" contains whitespace"},
      {"192.0.2.1 ", "contains whitespace"},
      {"192.0.2.1\n", "\"192.0.2.1\\n\" contains whitespace"},
      {"192.0.2", "\"192.0.2\" is not an IP address"},
      {"192.0.2.256", "is not an IP address"},
      {"010.0.0.1", "is not an IP address"},
      {"1.2.3.4.5", "is not an IP address"},
      {"0x7f.0.0.1", "is not an IP address"},
      {"example.com", "is not an IP address"},
      {"2001:db8:::1", "is not an IP address"},
      {"2001:db8::g", "is not an IP address"},
      {"1:2:3:4:5:6:7:8:9", "is not an IP address"},
      {"192.0.2.1/32", "is not an IP address"},
  };
  for (const auto& c : cases) {
    auto r = IpAddr::Parse(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(Msg(r.status()).find(c.want), std::string::npos)
        << c.text << " -> " << r.status();
  }
}

TEST(IpAddrParse, EmbeddedNulCannotHideATail) {
  const std::string s("192.0.2.1\0junk", 14);
  auto r = IpAddr::Parse(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(Msg(r.status()).find("\\x00"), std::string::npos) << r.status();
}

TEST(IpAddr, FactoriesAndBytes) {
  const IpAddr v4 = IpAddr::V4({192, 0, 2, 1});
  EXPECT_EQ(v4, Ip("192.0.2.1"));
  std::array<uint8_t, 16> want{192, 0, 2, 1};
  EXPECT_EQ(v4.bytes(), want);
  std::array<uint8_t, 16> mapped{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1};
  EXPECT_EQ(v4.ToMapped16(), mapped);
  EXPECT_EQ(IpAddr::V6(mapped), v4);
  EXPECT_TRUE(IpAddr::V6(mapped).is_v4());

  const IpAddr v6 = Ip("2001:db8::1");
  EXPECT_EQ(v6.ToMapped16(), v6.bytes());
  EXPECT_EQ(IpAddr::V6(v6.bytes()), v6);
  // ::ffff:0:0 is mapped; ::fffe:0:0 and ::192.0.2.1 (v4-compatible) are not.
  EXPECT_FALSE(Ip("::fffe:c000:201").is_v4());
  EXPECT_FALSE(Ip("::192.0.2.1").is_v4());
  EXPECT_EQ(IpAddr(), IpAddr::V4({0, 0, 0, 0}));
}

// ToString formats addresses itself (no sprintf per field): its text must be
// glibc's inet_ntop's, byte for byte, because policy content hashes and the
// records are made of it.  Edge cases (every zero-run shape of the compressed
// form, the compatible and mapped forms, leading zeros in words and octets)
// and 300,000 random addresses whose words are zero half the time.
TEST(IpAddr, ToStringIsInetNtopsText) {
  auto expected = [](const IpAddr& a, const std::array<uint8_t, 16>& b) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (a.is_v4()) {
      inet_ntop(AF_INET, a.bytes().data(), buf, sizeof(buf));
    } else {
      inet_ntop(AF_INET6, b.data(), buf, sizeof(buf));
    }
    return std::string(buf);
  };
  std::vector<std::array<uint8_t, 16>> v6 = {
      {},                                                    // ::
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},      // ::1
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4},      // ::1.2.3.4 (compatible)
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4},      // ::1:102:304
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 1, 2, 3, 4},  // ::fffe:...
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0},  // mapped 0.0.0.0 (IPv4)
      {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 2, 3, 4},  // ::ffff:0:102:304
      {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
      {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1},  // two runs: the longer
      {0x20, 0x01, 0, 0, 0, 0, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 1},  // equal runs: the first
      {0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1},  // single zeros: no "::"
      {0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
      {0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
      {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
      {0x0a, 0xbc, 0, 0x0d, 0x01, 0x00, 0x10, 0x00, 0, 0, 0, 0, 0xf0, 0x0f, 0, 0x0f},
  };
  std::mt19937_64 rng(20261203);
  for (int i = 0; i < 300'000; ++i) {
    std::array<uint8_t, 16> b{};
    for (int w = 0; w < 8; ++w) {
      const uint64_t r = rng();
      if (r & 1) continue;  // a zero word
      const unsigned pick = (r >> 1) % 4;
      const unsigned word = pick == 0 ? 0xffff : pick == 1 ? (r >> 8) % 16 : (r >> 8) & 0xffff;
      b[2 * w] = static_cast<uint8_t>(word >> 8);
      b[2 * w + 1] = static_cast<uint8_t>(word);
    }
    v6.push_back(b);
  }
  for (const auto& b : v6) {
    const IpAddr a = IpAddr::V6(b);
    ASSERT_EQ(a.ToString(), expected(a, b));
  }
  std::vector<std::array<uint8_t, 4>> v4 = {{0, 0, 0, 0}, {255, 255, 255, 255}, {10, 0, 9, 100}, {1, 20, 199, 200}};
  for (int i = 0; i < 300'000; ++i) {
    const uint32_t r = static_cast<uint32_t>(rng());
    v4.push_back({static_cast<uint8_t>(r >> 24), static_cast<uint8_t>(r >> 16), static_cast<uint8_t>(r >> 8),
                  static_cast<uint8_t>(r)});
  }
  for (const auto& b : v4) {
    const IpAddr a = IpAddr::V4(b);
    ASSERT_EQ(a.ToString(), expected(a, {})) << int(b[0]) << "." << int(b[1]) << "." << int(b[2]) << "." << int(b[3]);
  }
  EXPECT_EQ(Cidr::Parse("2001:db8:0:1::/64")->ToString(), "2001:db8:0:1::/64");
}

TEST(IpAddr, OrderingPutsV4First) {
  std::vector<IpAddr> v = {Ip("::1"), Ip("10.0.0.2"), Ip("::"), Ip("10.0.0.1"),
                           Ip("9.255.255.255")};
  std::sort(v.begin(), v.end());
  std::vector<std::string> got;
  for (const auto& a : v) got.push_back(a.ToString());
  EXPECT_EQ(got, (std::vector<std::string>{"9.255.255.255", "10.0.0.1",
                                           "10.0.0.2", "::", "::1"}));
}

struct CidrOk {
  const char* text;
  const char* canonical;
  bool host;
};

TEST(CidrParse, Accepts) {
  const CidrOk cases[] = {
      {"192.0.2.1", "192.0.2.1/32", true},
      {"192.0.2.0/24", "192.0.2.0/24", false},
      {"192.0.2.1/32", "192.0.2.1/32", true},
      {"0.0.0.0/0", "0.0.0.0/0", false},
      {"2001:db8::1", "2001:db8::1/128", true},
      {"2001:db8::/32", "2001:db8::/32", false},
      {"::/0", "::/0", false},
      {"fc00::/7", "fc00::/7", false},
      // v4-mapped prefixes become IPv4 prefixes (length - 96).
      {"::ffff:10.0.0.0/104", "10.0.0.0/8", false},
      {"::ffff:0:0/96", "0.0.0.0/0", false},
      {"::ffff:192.0.2.1/128", "192.0.2.1/32", true},
      {"::ffff:192.0.2.1", "192.0.2.1/32", true},
  };
  for (const auto& c : cases) {
    auto r = Cidr::Parse(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status();
    EXPECT_EQ(r->ToString(), c.canonical) << c.text;
    EXPECT_EQ(r->IsHost(), c.host) << c.text;
  }
}

TEST(CidrParse, Rejects) {
  const Bad cases[] = {
      {"10.1.2.3/8",
       "\"10.1.2.3/8\" has host bits set; the network is \"10.0.0.0/8\""},
      {"2001:db8::1/32",
       "\"2001:db8::1/32\" has host bits set; the network is \"2001:db8::/32\""},
      {"::ffff:10.1.2.3/104",
       "\"::ffff:10.1.2.3/104\" has host bits set; the network is "
       "\"10.0.0.0/8\""},
      {"::ffff:0:0/95", "\"::ffff:0:0/95\" spans non-IPv4 space"},
      {"::ffff:0:0/80", "spans non-IPv4 space"},
      {"::ffff:0:0/129", "has prefix length 129; expected 0-128 for IPv6"},
      {"10.0.0.0/33", "\"10.0.0.0/33\" has prefix length 33; expected 0-32"},
      {"::/129", "\"::/129\" has prefix length 129; expected 0-128"},
      {"10.0.0.0/", "\"10.0.0.0/\" has an invalid prefix length \"\""},
      {"10.0.0.0/x", "has an invalid prefix length \"x\""},
      {"10.0.0.0/+8", "has an invalid prefix length \"+8\""},
      {"10.0.0.0/-8", "has an invalid prefix length \"-8\""},
      {"10.0.0.0/08", "has an invalid prefix length \"08\""},
      {"10.0.0.0/ 8", "has an invalid prefix length \" 8\""},
      {"10.0.0.0/8 ", "has an invalid prefix length \"8 \""},
      {"10.0.0.0/1000", "has an invalid prefix length \"1000\""},
      {"10.0.0.0/8/8", "has an invalid prefix length \"8/8\""},
      {"/8", "\"/8\" is not a CIDR: \"\" is not an IP address"},
      {"foo/8", "\"foo/8\" is not a CIDR: \"foo\" is not an IP address"},
      {"fe80::%eth0/64", "has a zone id"},
      {"[2001:db8::]/32", "is bracketed"},
      {"", "\"\" is not an IP address"},
  };
  for (const auto& c : cases) {
    auto r = Cidr::Parse(c.text);
    ASSERT_FALSE(r.ok()) << c.text << " parsed as " << r->ToString();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(Msg(r.status()).find(c.want), std::string::npos)
        << c.text << " -> " << r.status();
  }
}

TEST(CidrMake, SameChecksAsParse) {
  auto ok = Cidr::Make(Ip("10.0.0.0"), 8);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, C("10.0.0.0/8"));

  auto host_bits = Cidr::Make(Ip("10.1.2.3"), 8);
  ASSERT_FALSE(host_bits.ok());
  EXPECT_EQ(Msg(host_bits.status()),
            "\"10.1.2.3/8\" has host bits set; the network is \"10.0.0.0/8\"");

  EXPECT_FALSE(Cidr::Make(Ip("10.0.0.0"), 33).ok());
  EXPECT_FALSE(Cidr::Make(Ip("10.0.0.0"), -1).ok());
  EXPECT_FALSE(Cidr::Make(Ip("::"), 129).ok());
  EXPECT_TRUE(Cidr::Make(Ip("::"), 0).ok());
  EXPECT_TRUE(Cidr::Make(Ip("::ffff:192.0.2.1"), 32).ok());
}

TEST(Cidr, Contains) {
  EXPECT_TRUE(C("10.0.0.0/8").Contains(Ip("10.255.0.1")));
  EXPECT_FALSE(C("10.0.0.0/8").Contains(Ip("11.0.0.0")));
  EXPECT_TRUE(C("0.0.0.0/0").Contains(Ip("255.255.255.255")));
  EXPECT_TRUE(C("100.64.0.0/10").Contains(Ip("100.127.255.255")));
  EXPECT_FALSE(C("100.64.0.0/10").Contains(Ip("100.128.0.0")));
  EXPECT_TRUE(C("fc00::/7").Contains(Ip("fd00:ec2::254")));
  EXPECT_FALSE(C("fc00::/7").Contains(Ip("fe00::")));
  EXPECT_TRUE(C("192.0.2.1").Contains(Ip("192.0.2.1")));
  EXPECT_FALSE(C("192.0.2.1").Contains(Ip("192.0.2.2")));
  // Families never mix.
  EXPECT_FALSE(C("::/0").Contains(Ip("192.0.2.1")));
  EXPECT_FALSE(C("0.0.0.0/0").Contains(Ip("::1")));

  EXPECT_TRUE(C("169.254.0.0/16").Contains(C("169.254.169.254/32")));
  EXPECT_FALSE(C("169.254.169.254/32").Contains(C("169.254.0.0/16")));
  EXPECT_TRUE(C("10.0.0.0/8").Contains(C("10.0.0.0/8")));
  EXPECT_FALSE(C("10.0.0.0/8").Contains(C("11.0.0.0/8")));
  EXPECT_FALSE(C("::/0").Contains(C("0.0.0.0/0")));
}

TEST(Cidr, Overlaps) {
  EXPECT_TRUE(C("10.0.0.0/8").Overlaps(C("10.1.0.0/16")));
  EXPECT_TRUE(C("10.1.0.0/16").Overlaps(C("10.0.0.0/8")));
  EXPECT_FALSE(C("10.0.0.0/16").Overlaps(C("10.1.0.0/16")));
  EXPECT_FALSE(C("::/0").Overlaps(C("0.0.0.0/0")));
  EXPECT_TRUE(C("fe80::/10").Overlaps(C("fe80::1")));
}

TEST(Cidr, OrderingIsAddressThenLength) {
  std::vector<Cidr> v = {C("10.1.0.0/16"), C("::/0"), C("10.0.0.0/16"),
                         C("10.0.0.0/8")};
  std::sort(v.begin(), v.end());
  std::vector<std::string> got;
  for (const auto& c : v) got.push_back(c.ToString());
  EXPECT_EQ(got, (std::vector<std::string>{"10.0.0.0/8", "10.0.0.0/16",
                                           "10.1.0.0/16", "::/0"}));
  EXPECT_EQ(C("::ffff:10.0.0.0/104"), C("10.0.0.0/8"));
}

TEST(Quote, EscapesAndCuts) {
  EXPECT_EQ(Quote("a\"b"), "\"a\\\"b\"");
  EXPECT_EQ(Quote("a\nb"), "\"a\\nb\"");
  const std::string long_text(200, 'x');
  const std::string q = Quote(long_text);
  EXPECT_LT(q.size(), 100u);
  EXPECT_EQ(q.substr(q.size() - 4), "...\"");
}

}  // namespace
}  // namespace egressd::net
