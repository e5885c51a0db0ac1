// The nftables rendering of a compiled policy (the incumbent the benchmarks
// and the differential test compare against): what it says, and that a real
// nft accepts it (`nft -c`, when nft is installed and we may use netlink).
#include "userspace/policy/nft_render.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>

#include <fstream>
#include <random>
#include <string>

#include "userspace/policy/floor.h"

namespace egressd::policy {
namespace {

net::Cidr C(const char* text) { return *net::Cidr::Parse(text); }

// The text between "set NAME {" and the set's closing brace.
std::string SetText(const std::string& rules, const std::string& name) {
  const size_t at = rules.find("  set " + name + " {\n");
  if (at == std::string::npos) return "";
  const size_t end = rules.find("\n  }\n", at);
  return rules.substr(at, end - at);
}

// The chain's rules, one a line, without indentation.
std::vector<std::string> ChainRules(const std::string& rules) {
  std::vector<std::string> out;
  const size_t at = rules.find("  chain output {\n");
  std::string body = rules.substr(at + 17, rules.find("\n  }\n", at) - at - 17);
  size_t pos = 0;
  while (pos < body.size()) {
    size_t nl = body.find('\n', pos);
    if (nl == std::string::npos) nl = body.size();
    std::string line = body.substr(pos, nl - pos);
    line.erase(0, line.find_first_not_of(' '));
    out.push_back(line);
    pos = nl + 1;
  }
  return out;
}

TEST(NftRender, DenyByDefaultRejectsInTheExpertsOrder) {
  CompiledPolicy p;
  p.default_verdict = Verdict::kDeny;
  p.deny_action = DenyAction::kReject;
  p.protected_cidrs = {{C("169.254.169.254/32"), "floor"}, {C("fd00:ec2::254/128"), "floor"}};
  p.allowed = {{C("192.0.2.0/24"), {}, ""}, {C("2001:db8::/32"), {{443, 443}}, ""}};
  const std::string r = RenderNft(p, "t1");
  EXPECT_NE(r.find("\ntable inet t1 {}\ndelete table inet t1\ntable inet t1 {\n"), std::string::npos) << r;
  EXPECT_EQ(ChainRules(r), (std::vector<std::string>{
                               "type filter hook output priority filter; policy drop;",
                               "ct state established,related accept",
                               "ip daddr 127.0.0.0/8 accept",
                               "ip6 daddr ::1 accept",
                               "icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit } "
                               "ip6 hoplimit 255 accept",
                               "ip daddr @protected4 goto deny",
                               "ip6 daddr @protected6 goto deny",
                               "ip daddr @allow4 accept",
                               "ip6 daddr @allow6 accept",
                               "meta l4proto { tcp, udp, udplite, sctp, dccp } ip daddr . th dport @allow4_ports accept",
                               "meta l4proto { tcp, udp, udplite, sctp, dccp } ip6 daddr . th dport @allow6_ports accept",
                               "ip daddr @resolved4 accept",
                               "ip6 daddr @resolved6 accept",
                               "goto deny"}));
  EXPECT_NE(r.find("  chain deny {\n    meta l4proto tcp reject with tcp reset\n"
                   "    reject with icmpx admin-prohibited\n  }\n"),
            std::string::npos)
      << r;
  EXPECT_NE(SetText(r, "allow4").find("      192.0.2.0/24\n"), std::string::npos) << r;
  EXPECT_NE(SetText(r, "allow6_ports").find("      2001:db8::/32 . 443"), std::string::npos) << r;
  // Protected IPv4 ranges also cover their NAT64 spelling, as in egressd.
  const std::string prot6 = SetText(r, "protected6");
  EXPECT_NE(prot6.find("      64:ff9b::a9fe:a9fe,\n"), std::string::npos) << r;
  EXPECT_NE(prot6.find("      fd00:ec2::254"), std::string::npos) << r;
  EXPECT_NE(SetText(r, "resolved4").find("flags timeout;"), std::string::npos);
}

TEST(NftRender, DropAndDefaultAllow) {
  CompiledPolicy p;
  p.default_verdict = Verdict::kAllow;
  p.deny_action = DenyAction::kDrop;
  p.protected_cidrs = {{C("10.0.0.0/8"), ""}};
  const auto rules = ChainRules(RenderNft(p));
  EXPECT_EQ(rules.front(), "type filter hook output priority filter; policy accept;");
  EXPECT_EQ(rules[5], "ip daddr @protected4 drop");
  EXPECT_EQ(rules.back(), "ip6 daddr @resolved6 accept");  // no trailing reject
  EXPECT_EQ(RenderNft(p).find("chain deny"), std::string::npos);

  p.default_verdict = Verdict::kDeny;
  EXPECT_EQ(ChainRules(RenderNft(p)).front(), "type filter hook output priority filter; policy drop;");
}

TEST(NftRender, OverlappingPortEntriesBecomeDisjointElementsWithTheUnionOfPorts) {
  CompiledPolicy p;
  p.default_verdict = Verdict::kDeny;
  p.allowed = {{C("10.0.0.0/8"), {{80, 90}}, ""},
               {C("10.1.0.0/16"), {{85, 100}, {443, 443}}, ""},
               {C("10.1.2.3/32"), {{22, 22}}, ""},
               {C("10.255.255.255/32"), {{80, 90}}, ""}};  // inside 10/8 with the same ports
  EXPECT_EQ(SetText(RenderNft(p), "allow4_ports"),
            "  set allow4_ports {\n    type ipv4_addr . inet_service;\n    flags interval;\n"
            "    elements = {\n"
            "      10.0.0.0/16 . 80-90,\n"
            "      10.1.0.0-10.1.2.2 . 80-100,\n"
            "      10.1.0.0-10.1.2.2 . 443,\n"
            "      10.1.2.3 . 22,\n"
            "      10.1.2.3 . 80-100,\n"
            "      10.1.2.3 . 443,\n"
            "      10.1.2.4-10.1.255.255 . 80-100,\n"
            "      10.1.2.4-10.1.255.255 . 443,\n"
            "      10.2.0.0-10.255.255.255 . 80-90\n"
            "    }");
}

TEST(NftRender, EveryPortSetsMergeOverlapsAndCoverTheWholeSpace) {
  CompiledPolicy p;
  p.allowed = {{C("0.0.0.0/0"), {}, ""}, {C("192.0.2.0/24"), {}, ""}, {C("::/0"), {}, ""},
               {C("2001:db8::/32"), {}, ""}};
  const std::string r = RenderNft(p);
  EXPECT_NE(SetText(r, "allow4").find("elements = {\n      0.0.0.0/0\n    }"), std::string::npos) << r;
  EXPECT_NE(SetText(r, "allow6").find("elements = {\n      ::/0\n    }"), std::string::npos) << r;
}

TEST(NftRender, AddResolvedIsOneElementWithItsTimeout) {
  EXPECT_EQ(RenderNftAddResolved(*net::IpAddr::Parse("192.0.2.7"), 300, "t"),
            "add element inet t resolved4 { 192.0.2.7 timeout 300s }\n");
  EXPECT_EQ(RenderNftAddResolved(*net::IpAddr::Parse("2001:db8::7"), 5, "t"),
            "add element inet t resolved6 { 2001:db8::7 timeout 5s }\n");
}

// `nft -c -f` in a network namespace of its own: the kernel checks the whole
// transaction and commits nothing.
int NftCheck(const std::string& rules) {
  char path[] = "/tmp/egr-nft-render-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return -1;
  close(fd);
  std::ofstream(path) << rules;
  const std::string cmd = std::string("unshare --net nft -c -f ") + path + " 2>&1";
  const int status = system(cmd.c_str());
  unlink(path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool NftUsable() {
  return geteuid() == 0 && system("command -v nft >/dev/null 2>&1 && command -v unshare >/dev/null 2>&1") == 0;
}

// Under scripts/test.sh (REQUIRE_BPF=1, root, nftables installed) the real
// nft checks must run: a skip there would hide a missing dependency.
bool SkipAllowed() {
  const char* req = std::getenv("REQUIRE_BPF");
  return req == nullptr || std::string(req) != "1";
}

TEST(NftRender, RealNftAcceptsRandomPolicies) {
  if (!NftUsable()) {
    if (!SkipAllowed()) FAIL() << "REQUIRE_BPF=1 but nft cannot run here";
    GTEST_SKIP() << "needs root and nft (scripts/install-deps.sh installs nftables)";
  }
  std::mt19937 rng(10);
  for (int round = 0; round < 4; ++round) {
    CompiledPolicy p;
    p.default_verdict = round % 2 ? Verdict::kAllow : Verdict::kDeny;
    p.deny_action = round / 2 ? DenyAction::kDrop : DenyAction::kReject;
    p.protected_cidrs = FloorProtected(Floor::kConnected);
    for (int i = 0; i < 200; ++i) {
      std::array<uint8_t, 4> b4{10, uint8_t(rng() % 4), uint8_t(rng()), uint8_t(rng())};
      std::array<uint8_t, 16> b6{0x20, 0x01, 0x0d, 0xb8, uint8_t(rng() % 4), uint8_t(rng())};
      const bool v4 = rng() % 2;
      const int len = v4 ? 8 + rng() % 25 : 32 + rng() % 97;
      net::IpAddr a = v4 ? net::IpAddr::V4(b4) : net::IpAddr::V6(b6);
      // Clear the host bits.
      auto bytes = a.bytes();
      for (int bit = len; bit < a.bits(); ++bit) bytes[bit / 8] &= ~(0x80 >> (bit % 8));
      a = v4 ? net::IpAddr::V4({bytes[0], bytes[1], bytes[2], bytes[3]}) : net::IpAddr::V6(bytes);
      AllowedCidr entry{*net::Cidr::Make(a, len), {}, ""};
      if (rng() % 2) {
        const uint16_t first = 1 + rng() % 60000;
        entry.ports = {{first, uint16_t(first + rng() % 100)}};
      }
      p.allowed.push_back(entry);
    }
    const std::string rules = RenderNft(p, "egr_check");
    EXPECT_EQ(NftCheck(rules), 0) << rules;
  }
}

TEST(NftRender, RealNftRefusesABrokenRulesetSoTheCheckCanFail) {
  if (!NftUsable()) {
    if (!SkipAllowed()) FAIL() << "REQUIRE_BPF=1 but nft cannot run here";
    GTEST_SKIP() << "needs root and nft";
  }
  std::string rules = RenderNft(CompiledPolicy{}, "egr_check");
  rules.replace(rules.find("ct state established,related accept"), 9, "ct stat e");
  EXPECT_NE(NftCheck(rules), 0);
}

}  // namespace
}  // namespace egressd::policy
