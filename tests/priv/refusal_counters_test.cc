// The refusals of the hooks without a pass counter are counted in
// egr_stats_v3 (`egressctl status --json`): EGR_STAT_SOCKOPT_DENY for the
// setsockopt program (every kernel), EGR_STAT_LSM_DENY for the BPF LSM
// programs (where they load: 6.1 in vmtests; skipped on this project's 6.18
// VM). Each delta is exact: the tests of one binary run one at a time against
// its instance, and an allowed call next to them shows passes are not counted.
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "egressd_env.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;

class RefusalCounters : public testing::Test {
 protected:
  void SetUp() override { EGR_REQUIRE_PRIVILEGES(); }
  Lab& lab() { return Shared().lab(); }

  uint64_t Counter(const std::string& name) {
    RunResult st = Shared().Ctl({"status", "--json"});
    auto j = nlohmann::json::parse(st.out, nullptr, false);
    bool found = j.is_object() && j.contains("counters") && j["counters"].contains(name) &&
                 j["counters"][name].is_number_unsigned();
    EXPECT_TRUE(found) << "no counter " << name << ": " << st.Describe();
    return found ? j["counters"][name].get<uint64_t>() : 0;
  }
  bool LsmInForce() {
    RunResult r = Shared().Ctl({"status", "--json"});
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    return j.is_object() && j.value("socket_containment", false);
  }
  // The hostile probe in pod 0, in an `egressctl run --host-root` sandbox.
  std::vector<ProbeLine> Sandboxed(const std::vector<std::string>& policy, const std::vector<std::string>& probe) {
    RunResult r = Shared().RunSandboxed(policy, probe);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    last_ = r.Describe();
    return Lines(r);
  }
  std::string last_;
};

TEST_F(RefusalCounters, SetsockoptRefusalsAreCounted) {
  const uint64_t before = Counter("sockopt_deny");
  // hosted protects 224/4 and 255.255.255.255: a join and SO_BROADCAST.
  auto l = Sandboxed({"--floor", "hosted"}, {"mcast-join", "239.1.2.3", lab().client_ifname(), "--then",
                                            "so-broadcast", "255.255.255.255", "7000"});
  ASSERT_EQ(l.size(), 2u) << last_;
  for (auto& line : l) {
    EXPECT_EQ(line["errno"], "EPERM") << last_;
    EXPECT_EQ(line["stage"], "setsockopt") << last_;
  }
  EXPECT_EQ(Counter("sockopt_deny") - before, 2u) << last_;
  // An allowed join is not a refusal.
  auto ok = Sandboxed({"--floor", "airgapped", "--egress", "239.1.2.4"},
                      {"mcast-join", "239.1.2.4", lab().client_ifname()});
  ASSERT_EQ(ok.size(), 1u) << last_;
  EXPECT_TRUE(Ok(ok[0])) << last_;
  EXPECT_EQ(Counter("sockopt_deny") - before, 2u) << last_;
}

TEST_F(RefusalCounters, LsmRefusalsAreCounted) {
  if (!LsmInForce()) {
    const char* v = std::getenv("EGR_REQUIRE_LSM");
    if (v && std::string(v) == "1") FAIL() << "EGR_REQUIRE_LSM=1 but the bpf LSM is not in force";
    GTEST_SKIP() << "the bpf LSM is not in force on this kernel (see `egressctl probe`)";
  }
  const std::string router = PodRouterMac(lab());
  ASSERT_FALSE(router.empty());
  const uint64_t before = Counter("lsm_deny");
  // Two families refused at socket_create, one packet send at socket_sendmsg.
  auto l = Sandboxed({"--floor", "airgapped"}, {"xdp-socket", "--then", "vsock-connect", "9", "--then",
                                                "packet-udp", kImds4, "7000", router});
  ASSERT_EQ(l.size(), 3u) << last_;
  for (auto& line : l) EXPECT_EQ(line["errno"], "EPERM") << last_;
  EXPECT_EQ(l[2]["socket"], "created") << last_;
  EXPECT_EQ(Counter("lsm_deny") - before, 3u) << last_;
  // Allowed families are not refusals.
  auto ok = Sandboxed({"--floor", "airgapped"}, {"socket-family", "2", "--type", "2", "--then", "socket-family", "1",
                                                 "--type", "1"});
  ASSERT_EQ(ok.size(), 2u) << last_;
  EXPECT_EQ(Counter("lsm_deny") - before, 3u) << last_;
}

}  // namespace
}  // namespace egressd::test
