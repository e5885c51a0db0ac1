// policy::Explain: the kernel's order (DNS, own loopback, protected, allowed,
// learned, default), the rule it names, and its allowed-CIDR verdicts against
// the LPM oracle of tests/fuzz/allow_entries_oracle.h (the longest-prefix
// entries BuildAllowEntries folds) over generated boundary probes.
#include "userspace/policy/explain.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/fuzz/allow_entries_oracle.h"

namespace egressd::policy {
namespace {

net::IpAddr A(const char* s) { return *net::IpAddr::Parse(s); }
net::Cidr C(const char* s) { return *net::Cidr::Parse(s); }

CompiledPolicy Policy(Verdict def = Verdict::kDeny) {
  CompiledPolicy p;
  p.default_verdict = def;
  p.protected_cidrs = {{C("169.254.169.254/32"), "floor connected"}, {C("10.0.0.0/8"), "floor connected"},
                       {C("fd00:ec2::254/128"), "floor connected"}};
  p.allowed = {{C("192.0.2.0/24"), {{443, 443}}, "task"},
               {C("192.0.2.128/25"), {}, "deployment setting platform.objectStorage"},
               {C("2001:db8::/32"), {{8000, 8100}}, "orchestrator grant"}};
  p.names = {{"api.example.com", "task"}};
  return p;
}

ExplainQuery Q(const char* dest, uint16_t port) {
  ExplainQuery q;
  q.dest = A(dest);
  q.port = port;
  return q;
}

TEST(Explain, ProtectedWinsOverEverythingThatAllows) {
  CompiledPolicy p = Policy(Verdict::kAllow);
  p.allowed.push_back({C("10.1.0.0/16"), {}, "task"});
  ExplainQuery q = Q("10.1.2.3", 443);
  q.learned = {{A("10.1.2.3"), {"api.example.com"}, 60000}};
  const Explanation e = Explain(p, q);
  EXPECT_FALSE(e.allowed);
  EXPECT_EQ(e.step, ExplainStep::kProtected);
  EXPECT_EQ(e.cidr->ToString(), "10.0.0.0/8");
  EXPECT_EQ(e.source, "floor connected");
  EXPECT_EQ(e.deny_action, "reject");
}

TEST(Explain, AnIpv6FormOfAProtectedV4AddressIsProtected) {
  for (const char* form : {"64:ff9b::a9fe:a9fe", "::a9fe:a9fe", "::ffff:0:a9fe:a9fe", "64:ff9b:1:a9fe:a9:fe00::"}) {
    const Explanation e = Explain(Policy(Verdict::kAllow), Q(form, 80));
    EXPECT_EQ(e.step, ExplainStep::kProtected) << form;
    ASSERT_TRUE(e.embedded_v4) << form;
    EXPECT_EQ(e.embedded_v4->ToString(), "169.254.169.254") << form;
  }
  // v4-mapped is the IPv4 address itself.
  EXPECT_EQ(Explain(Policy(Verdict::kAllow), Q("::ffff:169.254.169.254", 80)).cidr->ToString(),
            "169.254.169.254/32");
}

TEST(Explain, TheAllowedEntryWithItsPortsAndSource) {
  Explanation e = Explain(Policy(), Q("192.0.2.10", 443));
  EXPECT_TRUE(e.allowed);
  EXPECT_EQ(e.step, ExplainStep::kAllowed);
  EXPECT_EQ(e.cidr->ToString(), "192.0.2.0/24");
  EXPECT_EQ(e.ports, (std::vector<PortRange>{{443, 443}}));
  // A port the entry does not allow falls through, naming the entry.
  e = Explain(Policy(), Q("192.0.2.10", 80));
  EXPECT_FALSE(e.allowed);
  EXPECT_EQ(e.step, ExplainStep::kDefault);
  ASSERT_EQ(e.notes.size(), 1u);
  EXPECT_EQ(e.notes[0], "192.0.2.0/24 (task) is allowed on ports 443 only, not port 80");
  // The platform service's every-port entry inside it.
  e = Explain(Policy(), Q("192.0.2.200", 80));
  EXPECT_EQ(e.source, "deployment setting platform.objectStorage");
  // Port 0 only where every port is allowed.
  EXPECT_FALSE(Explain(Policy(), Q("2001:db8::1", 0)).allowed);
  EXPECT_TRUE(Explain(Policy(), Q("192.0.2.200", 0)).allowed);
}

TEST(Explain, LearnedAddressesAfterCidrsAndOnlyUnexpired) {
  ExplainQuery q = Q("198.51.100.7", 443);
  q.learned = {{A("198.51.100.7"), {"api.example.com"}, 4500}};
  Explanation e = Explain(Policy(), q);
  EXPECT_TRUE(e.allowed);
  EXPECT_EQ(e.step, ExplainStep::kResolved);
  EXPECT_EQ(e.why, "198.51.100.7 was learned from the answer for api.example.com; new connections pass for 5 s more");
  q.learned[0].expires_in_ms = 0;
  e = Explain(Policy(), q);
  EXPECT_FALSE(e.allowed);
  EXPECT_EQ(e.step, ExplainStep::kDefault);
  ASSERT_TRUE(e.learned);
  // Another address learned is not this one.
  q.learned = {{A("198.51.100.8"), {"api.example.com"}, 4500}};
  EXPECT_FALSE(Explain(Policy(), q).allowed);
}

TEST(Explain, DefaultAndAuditOnly) {
  EXPECT_TRUE(Explain(Policy(Verdict::kAllow), Q("198.51.100.7", 1)).allowed);
  CompiledPolicy p = Policy();
  p.deny_action = DenyAction::kDrop;
  EXPECT_EQ(Explain(p, Q("198.51.100.7", 1)).deny_action, "drop");
  p.audit.audit_only = true;
  Explanation e = Explain(p, Q("198.51.100.7", 1));
  EXPECT_TRUE(e.allowed);
  EXPECT_TRUE(e.would_deny);
  // Audit-only never opens a protected range.
  EXPECT_FALSE(Explain(p, Q("10.0.0.1", 1)).allowed);
}

TEST(Explain, DnsIsRedirectedBeforeAnyAddressCheckOrRefused) {
  ExplainQuery q = Q("10.0.0.10", 53);  // a cluster DNS service in a protected range
  Explanation e = Explain(Policy(), q);
  EXPECT_EQ(e.step, ExplainStep::kDnsRefused);
  EXPECT_EQ(e.deny_action, "reject");
  q.dns4 = DnsEndpoint{A("10.244.0.1"), 20001};
  e = Explain(Policy(), q);
  EXPECT_TRUE(e.allowed);
  EXPECT_EQ(e.step, ExplainStep::kDnsRedirect);
  // An IPv6 resolver needs an IPv6 endpoint.
  q.dest = A("2001:db8::53");
  EXPECT_EQ(Explain(Policy(), q).step, ExplainStep::kDnsRefused);
  // An endpoint named directly.
  ExplainQuery direct = Q("10.244.0.1", 20001);
  direct.node_endpoints = {{A("10.244.0.1"), 20001}};
  EXPECT_EQ(Explain(Policy(Verdict::kAllow), direct).step, ExplainStep::kDnsRefused);
}

TEST(Explain, LoopbackAndTheUnspecifiedAddress) {
  ExplainQuery q = Q("0.0.0.0", 8080);
  Explanation e = Explain(Policy(), q);
  EXPECT_EQ(e.judged.ToString(), "127.0.0.1");
  EXPECT_FALSE(e.allowed);  // judged by the policy where the netns is not known
  q.own_netns = true;
  e = Explain(Policy(), q);
  EXPECT_TRUE(e.allowed);
  EXPECT_EQ(e.step, ExplainStep::kOwnLoopback);
  EXPECT_EQ(Explain(Policy(), Q("::", 1)).judged.ToString(), "::1");
}

TEST(Explain, ParsesDestinationsAndNamesBadOnes) {
  auto d = ParseDestination("[2001:db8::1]:443");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->first.ToString(), "2001:db8::1");
  EXPECT_EQ(*d->second, 443);
  EXPECT_FALSE(ParseDestination("2001:db8::1")->second.has_value());
  EXPECT_EQ(*ParseDestination("192.0.2.1:80")->second, 80);
  for (const char* bad : {"example.com", "192.0.2.1:99999", "192.0.2.1:", "[2001:db8::1]:", "[2001:db8::1"}) {
    auto r = ParseDestination(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find(bad), std::string::npos) << r.status();
  }
  EXPECT_FALSE(ParseProto("icmp").ok());
}

// Explain's allowed-CIDR verdict is the kernel's longest-prefix lookup over
// the entries BuildAllowEntries folds (the oracle's LpmAllows), at every
// boundary probe of generated overlapping entries.
TEST(Explain, AllowedVerdictsAreTheFoldedLongestMatchs) {
  std::mt19937 rng(20261201);
  int probes = 0, allowed = 0;
  for (int round = 0; round < 300; ++round) {
    CompiledPolicy p;
    p.default_verdict = Verdict::kDeny;
    for (int i = 0, n = 1 + static_cast<int>(rng() % 6); i < n; ++i) {
      const int len = 16 + static_cast<int>(rng() % 17);
      const uint32_t v = (0xc6120000u | (rng() & 0xffffu)) & (len == 0 ? 0 : ~0u << (32 - len));
      AllowedCidr a{*net::Cidr::Make(net::IpAddr::V4({uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)}), len),
                    {}, "generated"};
      if (rng() % 2) {
        const uint16_t first = static_cast<uint16_t>(1 + rng() % 30);
        a.ports.push_back({first, static_cast<uint16_t>(first + rng() % 5)});
      }
      p.allowed.push_back(a);
    }
    auto built = maps::BuildAllowEntries(p.allowed);
    ASSERT_TRUE(built.ok()) << built.status();
    for (const maps::oracle::Probe& probe : maps::oracle::BoundaryProbes(p.allowed)) {
      const bool kernel = maps::oracle::LpmAllows(*built, probe);
      ExplainQuery q;
      q.dest = probe.addr;
      q.port = static_cast<uint16_t>(probe.port);
      if (q.port == 53) continue;  // the DNS redirect's, not the CIDRs'
      const Explanation e = Explain(p, q);
      ASSERT_EQ(e.allowed, kernel) << probe.addr.ToString() << " port " << probe.port << ": " << e.why;
      ++probes;
      allowed += kernel;
    }
  }
  EXPECT_GT(allowed, 100);
  EXPECT_GT(probes - allowed, 100);
}

}  // namespace
}  // namespace egressd::policy
