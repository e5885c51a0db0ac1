// The deployment config's flows: block (issue 17, the tc flow table): the
// defaults are the kernel's (maps/egressd_abi.h), set values are taken, and
// refused ones name their setting and value.
#include <gtest/gtest.h>

#include <string>

#include "maps/egressd_abi.h"
#include "userspace/policy/deployment_config.h"

namespace egressd::policy {
namespace {

// policy/ knows no BPF header: its copies of the kernel's defaults are
// pinned here, where both are in view.
static_assert(kFlowCapacity == EGR_MAX_FLOWS);
static_assert(kDefaultFlowsPerSandbox == EGR_FLOW_DEFAULT_QUOTA);
static_assert(kDefaultTcpIdleSeconds == EGR_FLOW_DEFAULT_TCP_IDLE_S);
static_assert(kDefaultTcpTransitorySeconds == EGR_FLOW_DEFAULT_TCP_TRANSITORY_S);
static_assert(kDefaultUdpIdleSeconds == EGR_FLOW_DEFAULT_UDP_IDLE_S);

TEST(DeploymentFlows, DefaultsWithoutTheBlock) {
  auto d = ParseDeploymentConfig("airgapped: false", "egressd.yaml", nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->flows, FlowSettings{});
  EXPECT_EQ(d->flows.max_per_sandbox, 4096u);
  EXPECT_EQ(d->flows.tcp_idle_s, 3600u);
  EXPECT_EQ(d->flows.tcp_transitory_s, 60u);
  EXPECT_EQ(d->flows.udp_idle_s, 120u);
}

TEST(DeploymentFlows, SetValuesAreTaken) {
  auto d = ParseDeploymentConfig(
      "flows: {maxPerSandbox: 8, tcpIdleSeconds: 30, tcpTransitorySeconds: 5, udpIdleSeconds: 7}", "egressd.yaml",
      nullptr);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->flows, (FlowSettings{.max_per_sandbox = 8, .tcp_idle_s = 30, .tcp_transitory_s = 5, .udp_idle_s = 7}));
}

TEST(DeploymentFlows, BadValuesNameTheirSetting) {
  struct Bad {
    const char* yaml;
    const char* line;
  } const bad[] = {
      {"flows: {maxPerSandbox: 0}",
       "deployment setting flows.maxPerSandbox \"0\": must be a whole number 1-1048576 (the node-wide flow map's "
       "capacity)"},
      {"flows: {maxPerSandbox: 1048577}",
       "deployment setting flows.maxPerSandbox \"1048577\": must be a whole number 1-1048576 (the node-wide flow "
       "map's capacity)"},
      {"flows: {udpIdleSeconds: -1}",
       "deployment setting flows.udpIdleSeconds \"-1\": must be a whole number 1-604800 seconds"},
      {"flows: {tcpIdleSeconds: soon}",
       "deployment setting flows.tcpIdleSeconds \"soon\": must be a whole number 1-604800 seconds"},
  };
  for (const auto& b : bad) {
    auto d = ParseDeploymentConfig(b.yaml, "egressd.yaml", nullptr);
    ASSERT_FALSE(d.ok()) << b.yaml;
    EXPECT_NE(std::string(d.status().message()).find(b.line), std::string::npos)
        << b.yaml << ": " << d.status().message();
  }
  EXPECT_FALSE(ParseDeploymentConfig("flows: {maxFlows: 3}", "egressd.yaml", nullptr).ok());
  EXPECT_FALSE(ParseDeploymentConfig("flows: 3", "egressd.yaml", nullptr).ok());
}

}  // namespace
}  // namespace egressd::policy
