// `egressctl dns serve` on a loaded instance: it serves the endpoint a
// sandbox's record names, learns into the pinned egr_resolved_v2, and picks
// up records written and removed while it runs (inotify), announcing each on
// stdout (no sleeps: the test waits for those lines).
#include <bpf/bpf.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "maps/egressd_abi.h"
#include "maps/resolved_table.h"
#include "tests/priv/egressd_env.h"
#include "userspace/common/node.h"
#include "userspace/control/sandbox_record.h"
#include "userspace/dns/learner.h"

namespace egressd::test {
namespace {

using namespace std::chrono_literals;

constexpr char kUpstream[] = "127.0.0.53";

class DnsServe : public ::testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    env_ = &Shared();
    lab::RunSpec up;
    up.netns = env_->lab().node_netns();
    up.argv = {"dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--no-poll",
               "--user=root", "--pid-file=", "--bind-interfaces", std::string("--listen-address=") + kUpstream,
               "--port=53", "--host-record=allowed.example,192.0.2.10", "--host-record=denied.example,192.0.2.66",
               "--host-record=second.example,192.0.2.20"};
    auto d = lab::Start(up);
    ASSERT_TRUE(d.ok()) << d.status();
    dnsmasq_ = std::move(*d);
    // Ready once it answers (dig retries within its own timeout).
    bool ready = false;
    for (int i = 0; i < 20 && !ready; ++i) {
      ready = Dig(kUpstream, 53, "allowed.example").find("192.0.2.10") != std::string::npos;
    }
    ASSERT_TRUE(ready) << "dnsmasq never answered";
    paths_.pin_root = env_->pin_root();
    paths_.runtime_dir = env_->runtime_dir();
  }

  void TearDown() override {
    if (serve_) serve_->Stop();
    for (const auto& cg : registered_) env_->Ctl({"sandbox", "remove", "--cgroup", cg});
    dnsmasq_.Stop();
  }

  std::string Dig(const std::string& server, uint16_t port, const std::string& name, bool short_form = true) {
    lab::RunSpec s;
    s.netns = env_->lab().node_netns();
    // dig's wait for an answer, 1 s times EGR_TIME_SCALE, and under
    // emulation two retries as a stub resolver makes: a TCG guest niced
    // beside the host's build (CI) missed 5 s once, on its first query.
    const int wait_s = std::max(1, static_cast<int>(std::ceil(TimeScale())));
    const int tries = TimeScale() > 1 ? 3 : 1;
    s.argv = {"dig", "@" + server, "-p", std::to_string(port), "+tries=" + std::to_string(tries),
              "+time=" + std::to_string(wait_s), name, "A"};
    // Past dig's own waits (an unscaled 10 s killed it mid-wait in a guest,
    // and a killed dig prints nothing), plus the default scaled ceiling.
    s.timeout = std::chrono::seconds(tries * wait_s) + std::chrono::milliseconds(static_cast<int>(10000 * TimeScale()));
    if (short_form) s.argv.push_back("+short");
    return lab::Run(s).out;
  }

  // Registers a sandbox allowing `name`, then gives its record a DNS endpoint
  // (what the registration will do once the kernel redirect lands).  Fatal
  // failures stop the test here (callers wrap it in ASSERT_NO_FATAL_FAILURE):
  // a failed registration must say why, not crash on the missing record.
  void Register(const std::string& rel, const std::string& name, const std::string& addr4, uint16_t port,
                uint64_t* id) {
    auto cg = env_->lab().MakeCgroup(rel);
    ASSERT_TRUE(cg.ok()) << cg.status();
    lab::RunResult r = env_->Ctl({"sandbox", "add", "--cgroup", *cg, "--egress", name});
    registered_.push_back(*cg);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    auto cg_id = CgroupIdOf(*cg);
    ASSERT_TRUE(cg_id.ok()) << cg_id.status();
    control::SandboxRecords records(paths_);
    auto rec = records.Load(*cg_id);
    ASSERT_TRUE(rec.ok()) << rec.status();
    ASSERT_TRUE(rec->has_value()) << "no record for " << *cg_id;
    (*rec)->dns = control::DnsEndpoint{*net::IpAddr::Parse(addr4), std::nullopt, port};
    auto written = records.Write(**rec);
    ASSERT_TRUE(written.ok()) << written;
    *id = *cg_id;
  }

  // The next stdout line of dns serve that starts with `prefix` (10 s times
  // EGR_TIME_SCALE: a TCG guest beside another and the host suite is slow).
  std::optional<std::string> WaitLine(const std::string& prefix) {
    for (;;) {
      auto line = serve_->ReadOutLine(std::chrono::milliseconds(static_cast<int>(10000 * TimeScale())));
      if (!line) return std::nullopt;
      if (line->rfind(prefix, 0) == 0) return line;
    }
  }

  Egressd* env_ = nullptr;
  Paths paths_;
  lab::Background dnsmasq_;
  std::optional<lab::Background> serve_;
  std::vector<std::string> registered_;
};

TEST_F(DnsServe, ServesRecordsLearnsIntoTheMapAndFollowsChanges) {
  uint64_t a = 0;
  ASSERT_NO_FATAL_FAILURE(Register("dns-serve-a", "allowed.example", "127.0.53.1", 10053, &a));
  lab::RunSpec s;
  s.netns = env_->lab().node_netns();
  s.env = env_->CtlEnv();
  s.argv = {lab::BinaryPath("egressctl"), "dns", "serve", "--upstream-dns", kUpstream};
  auto bg = lab::Start(s);
  ASSERT_TRUE(bg.ok()) << bg.status();
  serve_ = std::move(*bg);
  ASSERT_TRUE(WaitLine(absl::StrCat("serving ", a, " 127.0.53.1:10053"))) << serve_->err();
  ASSERT_TRUE(WaitLine("ready:")) << serve_->err();

  EXPECT_EQ(Dig("127.0.53.1", 10053, "allowed.example"), "192.0.2.10\n");
  std::string denied = Dig("127.0.53.1", 10053, "denied.example", false);
  EXPECT_NE(denied.find("status: NXDOMAIN"), std::string::npos) << denied;
  EXPECT_NE(denied.find("EDE: 15 (Blocked)"), std::string::npos) << denied;

  // Learned into the instance's pinned map, for that sandbox only.
  int fd = bpf_obj_get((env_->pin_root() + "/" EGR_MAP_RESOLVED).c_str());
  ASSERT_GE(fd, 0) << "open pinned " << EGR_MAP_RESOLVED;
  maps::ResolvedTable table(fd);
  auto held = table.Get(a, *net::IpAddr::Parse("192.0.2.10"));
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_TRUE(*held) << "192.0.2.10 not in " << EGR_MAP_RESOLVED << " for sandbox " << a;
  EXPECT_GT((*held)->expires_boot_ns, dns::BootTimeNs());
  auto other = table.Get(a, *net::IpAddr::Parse("192.0.2.66"));
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(*other);

  // A sandbox registered while it runs is served at once...
  uint64_t b = 0;
  ASSERT_NO_FATAL_FAILURE(Register("dns-serve-b", "second.example", "127.0.53.2", 10054, &b));
  ASSERT_TRUE(WaitLine(absl::StrCat("serving ", b, " 127.0.53.2:10054"))) << serve_->err();
  EXPECT_EQ(Dig("127.0.53.2", 10054, "second.example"), "192.0.2.20\n");
  EXPECT_NE(Dig("127.0.53.2", 10054, "allowed.example", false).find("NXDOMAIN"), std::string::npos);
  auto b_held = table.Get(b, *net::IpAddr::Parse("192.0.2.20"));
  ASSERT_TRUE(b_held.ok());
  EXPECT_TRUE(*b_held);
  // ...and dropped when removed.
  lab::RunResult rm = env_->Ctl({"sandbox", "remove", "--cgroup", registered_.back()});
  ASSERT_EQ(rm.exit_code, 0) << rm.Describe();
  registered_.pop_back();
  ASSERT_TRUE(WaitLine(absl::StrCat("stopped ", b))) << serve_->err();
  std::string gone = Dig("127.0.53.2", 10054, "second.example");
  EXPECT_EQ(gone.find("192.0.2.20"), std::string::npos) << "a removed sandbox is still answered: " << gone;
  EXPECT_NE(gone.find("no servers could be reached"), std::string::npos) << gone;
  EXPECT_EQ(Dig("127.0.53.1", 10053, "allowed.example"), "192.0.2.10\n");
  close(fd);
}

TEST_F(DnsServe, BadUpstreamIsExitTwoNamingIt) {
  lab::RunResult r = env_->Ctl({"dns", "serve", "--upstream-dns", "resolver.example"});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_NE(r.err.find("\"resolver.example\""), std::string::npos) << r.err;
  r = env_->Ctl({"dns", "serve"});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
}

}  // namespace
}  // namespace egressd::test
