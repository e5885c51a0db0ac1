// Test 1 of the foundation issue: TCP connect and UDP send to allowed and
// denied IPv4/IPv6 addresses and CIDRs, under each floor and each deny
// action, proven by what the lab hosts received.  Table-driven: one vector
// per sentence of the policy rules.
#include <string>
#include <vector>

#include "egressd_env.h"

namespace egressd::test {
namespace {

using lab::Lab;

enum class Expect { kAllowed, kRejected, kDropped };

struct Vector {
  const char* name;  // the rule it proves
  std::vector<std::string> policy;
  const char* proto;  // "tcp" | "udp-connected" | "udp-sendto"
  const char* dst;
  uint16_t port;
  Expect expect;
};

std::string PrintName(const testing::TestParamInfo<Vector>& i) { return i.param.name; }

class Enforcement : public testing::TestWithParam<Vector> {
 protected:
  void SetUp() override { EGR_REQUIRE_PRIVILEGES(); }
};

uint64_t Arrived(const Lab& lab, const Vector& v) {
  return std::string(v.proto) == "tcp" ? lab.TcpAccepts(v.dst, v.port) : lab.UdpDatagrams(v.dst, v.port);
}

TEST_P(Enforcement, ReceivingSideAgrees) {
  const Vector& v = GetParam();
  Egressd& e = Shared();
  // The previous vector's FIN/ACKs may still arrive after this reset; the
  // zero checks below count only packets that open a flow (a SYN, a
  // datagram), which no earlier vector sends once its probe has exited.
  e.lab().ResetCounters();
  std::vector<std::string> probe = {v.proto, v.dst, std::to_string(v.port), "--timeout-ms", "1500"};
  lab::RunResult r = e.RunSandboxed(v.policy, probe);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  lab::ProbeLine line = Only(r);

  switch (v.expect) {
    case Expect::kAllowed:
      EXPECT_TRUE(Ok(line)) << r.Describe();
      EXPECT_TRUE(Lab::WaitFor([&] { return Arrived(e.lab(), v) > 0; })) << e.lab().CountersSummary();
      break;
    case Expect::kRejected:
      EXPECT_EQ(Errno(line), "EPERM") << r.Describe();
      ASSERT_TRUE(e.lab().Drain().ok());
      EXPECT_EQ(e.lab().FlowsOpenedTo(v.dst), 0u) << e.lab().CountersSummary();
      break;
    case Expect::kDropped:
      // Silently: TCP hangs until the client's own deadline, UDP "succeeds".
      if (std::string(v.proto) == "tcp") {
        EXPECT_EQ(Errno(line), "ETIMEDOUT") << r.Describe();
      } else {
        EXPECT_TRUE(Ok(line)) << r.Describe();
        EXPECT_EQ(line["echo"], "false") << r.Describe();
      }
      ASSERT_TRUE(e.lab().Drain().ok());
      EXPECT_EQ(e.lab().FlowsOpenedTo(v.dst), 0u) << e.lab().CountersSummary();
      break;
  }
}

const std::vector<std::string> kConnected = {};
const std::vector<std::string> kAirgapped = {"--floor", "airgapped"};
const std::vector<std::string> kHosted = {"--floor", "hosted"};

std::vector<std::string> With(std::vector<std::string> base, std::vector<std::string> more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

INSTANTIATE_TEST_SUITE_P(
    Floors, Enforcement,
    testing::Values(
        // connected: allow by default, deny the protected metadata endpoints.
        Vector{"ConnectedAllowsPublicV4", kConnected, "tcp", "192.0.2.10", 80, Expect::kAllowed},
        Vector{"ConnectedAllowsPublicV6", kConnected, "tcp", "2001:db8::10", 80, Expect::kAllowed},
        Vector{"ConnectedAllowsUdp", kConnected, "udp-sendto", "8.8.8.8", 7000, Expect::kAllowed},
        Vector{"ConnectedAllowsPrivateRanges", kConnected, "tcp", "10.1.2.3", 80, Expect::kAllowed},
        Vector{"ConnectedDeniesImds", kConnected, "tcp", "169.254.169.254", 80, Expect::kRejected},
        Vector{"ConnectedDeniesImdsUdp", kConnected, "udp-sendto", "169.254.169.254", 7000, Expect::kRejected},
        Vector{"ConnectedDeniesEcsMetadata", kConnected, "tcp", "169.254.170.2", 80, Expect::kRejected},
        Vector{"ConnectedDeniesAlibabaMetadata", kConnected, "tcp", "100.100.100.200", 80, Expect::kRejected},
        Vector{"ConnectedDeniesImdsV6", kConnected, "tcp", "fd00:ec2::254", 80, Expect::kRejected},
        Vector{"ConnectedDeniesEc2DnsV6", kConnected, "udp-connected", "fd00:ec2::23", 7000, Expect::kRejected},
        // airgapped: deny everything not named, literal addresses included.
        Vector{"AirgappedDeniesUnnamedV4", kAirgapped, "tcp", "192.0.2.10", 80, Expect::kRejected},
        Vector{"AirgappedDeniesUnnamedV6", kAirgapped, "tcp", "2001:db8::10", 80, Expect::kRejected},
        Vector{"AirgappedDeniesUnnamedUdp", kAirgapped, "udp-sendto", "8.8.8.8", 7000, Expect::kRejected},
        Vector{"AirgappedAllowsNamedAddress", With(kAirgapped, {"--egress", "192.0.2.10"}), "tcp", "192.0.2.10", 80, Expect::kAllowed},
        Vector{"AirgappedAllowsNamedCidrV6", With(kAirgapped, {"--egress", "2001:db8::/32"}), "tcp", "2001:db8:1::5", 443, Expect::kAllowed},
        Vector{"AirgappedNamedCidrUdp", With(kAirgapped, {"--egress", "198.51.100.0/24"}), "udp-connected", "198.51.100.8", 7001, Expect::kAllowed},
        // hosted: connected plus the private and link-local ranges.
        Vector{"HostedAllowsPublic", kHosted, "tcp", "192.0.2.10", 80, Expect::kAllowed},
        Vector{"HostedDenies10", kHosted, "tcp", "10.1.2.3", 80, Expect::kRejected},
        Vector{"HostedDenies172", kHosted, "udp-sendto", "172.16.5.5", 7000, Expect::kRejected},
        Vector{"HostedDenies192168", kHosted, "tcp", "192.168.1.1", 443, Expect::kRejected},
        Vector{"HostedDeniesUla", kHosted, "tcp", "fc00::5", 80, Expect::kRejected},
        // Any --egress turns a connected sandbox deny-by-default.
        Vector{"DeclarationAllowsNamedCidr", {"--egress", "198.51.100.0/24"}, "tcp", "198.51.100.7", 80, Expect::kAllowed},
        Vector{"DeclarationDeniesUnnamed", {"--egress", "198.51.100.0/24"}, "tcp", "192.0.2.10", 80, Expect::kRejected},
        Vector{"DeclarationDeniesUnnamedV6", {"--egress", "198.51.100.0/24"}, "udp-sendto", "2001:db8::10", 7000, Expect::kRejected},
        Vector{"DeclarationAllowsNamedV6Host", {"--egress", "2001:db8::11"}, "udp-sendto", "2001:db8::11", 7000, Expect::kAllowed},
        Vector{"DeclarationHostIsNotItsNeighbour", {"--egress", "2001:db8::11"}, "tcp", "2001:db8::10", 80, Expect::kRejected},
        // on-deny drop: nothing arrives, and the caller is not told.
        Vector{"DropHangsTcp", {"--egress", "192.0.2.10", "--on-deny", "drop"}, "tcp", "192.0.2.11", 80, Expect::kDropped},
        Vector{"DropSwallowsUdp", {"--egress", "192.0.2.10", "--on-deny", "drop"}, "udp-sendto", "192.0.2.11", 7000, Expect::kDropped},
        Vector{"DropHangsTcpV6", {"--floor", "airgapped", "--on-deny", "drop"}, "tcp", "2001:db8::10", 80, Expect::kDropped},
        Vector{"DropSwallowsConnectedUdpToImds", {"--on-deny", "drop"}, "udp-connected", "169.254.169.254", 7000, Expect::kDropped},
        Vector{"DropStillAllowsNamed", {"--egress", "192.0.2.10", "--on-deny", "drop"}, "tcp", "192.0.2.10", 80, Expect::kAllowed}),
    PrintName);

// Orchestrator grants: an address limited to ports (an agent's paired
// environment's exposed ports); an agent with no declaration is deny-all.
const std::vector<std::string> kAgentGrant = {"--kind", "agent", "--grant", "192.0.2.10:443",
                                              "--grant", "[2001:db8::10]:7000-7001"};

INSTANTIATE_TEST_SUITE_P(
    Grants, Enforcement,
    testing::Values(
        Vector{"GrantedPortAllowed", kAgentGrant, "tcp", "192.0.2.10", 443, Expect::kAllowed},
        Vector{"OtherPortOfGrantedHostDenied", kAgentGrant, "tcp", "192.0.2.10", 80, Expect::kRejected},
        Vector{"GrantedPortRangeV6Allowed", kAgentGrant, "udp-sendto", "2001:db8::10", 7001, Expect::kAllowed},
        Vector{"AgentWithoutDeclarationIsDenyAll", kAgentGrant, "tcp", "198.51.100.7", 80, Expect::kRejected},
        Vector{"GrantInsideDeclaredCidrKeepsAllPorts",
               {"--egress", "192.0.2.0/24", "--grant", "192.0.2.10:443"}, "tcp", "192.0.2.10", 8080, Expect::kAllowed}),
    PrintName);

}  // namespace
}  // namespace egressd::test
