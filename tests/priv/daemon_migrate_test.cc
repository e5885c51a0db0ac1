// Issue 15, "State across versions", driven the way an upgrade drives it:
// by starting the new daemon (egressd itself, not `egressctl load`) over
// state an older layout pinned (tests/priv/old_layouts.h, as migrate_test.cc
// builds it):
//  * egr_resolved_v1 with thousands of learned addresses, a stale staging pin,
//    a sandbox's live TCP flow echoing every 20 ms, and a probe loop connecting
//    to a learned address (must connect) and to a denied one (must be refused,
//    and nothing may arrive at its lab host) from before egressd starts until
//    after it said ready: the flow is never cut, every learned address comes
//    over with its expiry to the nanosecond, the old and staging pins are gone,
//    the schema is written, the programs in force read the new map, and the
//    daemon is ready (/readyz 200);
//  * pinned state of another shape under this build's name, a newer map name
//    and a newer schema: egressd exits 4 naming both sides (what it expects,
//    what it found) and changes nothing pinned (every pin, map, link and
//    program the same object).
// What this does not prove (as in migrate_test.cc): the programs in force
// before the start are this build's, reading a map filled with the v2 form of
// the same addresses; the old build's programs are not rebuilt here.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon_harness.h"
#include "dns_sandboxes.h"
#include "egressd_env.h"
#include "loader/pin_check.h"
#include "maps/egressd_abi.h"
#include "maps/map_iter.h"
#include "migrate_checks.h"
#include "old_layouts.h"
#include "pin_snapshot.h"

namespace egressd::test {
namespace {

using namespace std::chrono_literals;
using lab::ProbeLine;
using lab::RunResult;
using lab::RunSpec;

constexpr const char* kName = "dmig.example";
constexpr size_t kLearned = 5000;

using namespace migrate;
long long NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class DaemonMigrate : public ::testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    lab().ResetCounters();
    char dir[] = "/run/egr-dmigrate-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    if (daemon_) daemon_->Stop();  // stops serving; tears nothing down
    sandboxes_.RemoveAll();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  lab::Lab& lab() { return Shared().lab(); }
  std::string Config() {
    const std::string path = dir_ + "/egressd.yaml";
    std::ofstream(path) << "dns:\n  upstreams: [" << lab::kPublicE4 << "]\n  endpoint4: " << lab::kPodGatewayV4
                        << "\n  endpoint6: \"" << lab::kPodGatewayV6 << "\"\n";
    return path;
  }
  RunSpec InPod(const DnsSandbox& s, const std::string& op, std::chrono::milliseconds timeout = 30s) {
    RunSpec spec;
    spec.argv = {lab::BinaryPath("egressd-probe"), "batch", op};
    spec.netns = lab().pod().netns;
    spec.cgroup = s.cgroup;
    spec.hostile = true;
    spec.timeout = Scaled(timeout);
    return spec;
  }
  ProbeLine Probe(const DnsSandbox& s, const std::string& op) {
    RunResult r = lab::Run(InPod(s, op));
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? ProbeLine{} : lines[0];
  }
  // egressd as the DaemonSet starts it, on `dirs` (flags, over the shared
  // instance's environment), not waited for.
  absl::StatusOr<lab::Background> Spawn(const InstanceDirs& dirs, const std::string& config) {
    RunSpec s;
    s.netns = lab().node_netns();
    s.env = Shared().CtlEnv();
    s.argv = {lab::BinaryPath("egressd"), "--pin-root", dirs.pin_root, "--runtime-dir", dirs.runtime_dir,
              "--socket",  dirs.runtime_dir + "/egressd.sock"};
    if (!config.empty()) s.argv.insert(s.argv.end(), {"--config", config});
    s.timeout = 10min;
    return lab::Start(s);
  }

  std::string dir_;
  DnsSandboxes sandboxes_{"dmigrate-"};
  std::optional<lab::Background> daemon_;
};

TEST_F(DaemonMigrate, StartingEgressdOverAnOlderLayoutMigratesWithAFlowLiveAndNothingDeniedReachable) {
  const std::string pins = Shared().pin_root();
  const std::string config = Config();
  DnsSandbox s = sandboxes_.Add({"--config", config, "--egress", kName}, /*pod_endpoint=*/false);
  ASSERT_NE(s.id, 0u);
  // The old state: thousands of learned addresses of other sandboxes, and
  // this sandbox's learned kPublicA4 (kPublicB4 and kPublicC4 never learned:
  // denied by default); a staging pin an interrupted migration left.
  const uint64_t now = old_layout::BootNs();
  std::vector<old_layout::LearnedV1> learned = old_layout::Synthetic(kLearned, now + 600'000'000'000ull);
  learned.push_back({V4Key(s.id, lab::kPublicA4), {now + 900'000'000'000ull, 77, 0}});
  const std::string staging = pins + "/staging";
  ASSERT_EQ(mkdir(staging.c_str(), 0700), 0);
  {
    int junk = bpf_map_create(BPF_MAP_TYPE_HASH, "junk", 4, 4, 1, nullptr);
    ASSERT_GE(junk, 0);
    ASSERT_EQ(bpf_obj_pin(junk, (staging + "/" EGR_MAP_RESOLVED).c_str()), 0);
    close(junk);
  }
  auto live = old_layout::StageOldResolvedState(pins, learned);
  ASSERT_TRUE(live.ok()) << live.status();
  const int old_in_force = *live;
  ASSERT_FALSE(Exists(pins + "/" EGR_MAP_RESOLVED));
  ASSERT_EQ(PinnedSchema(pins), 0u);
  ASSERT_TRUE(Ok(Probe(s, absl::StrCat("tcp ", lab::kPublicA4, " 80")))) << "learned: allowed";
  ASSERT_EQ(Errno(Probe(s, absl::StrCat("tcp ", lab::kPublicB4, " 80"))), "EPERM") << "not learned: denied";

  // The live flow: one connection, a round every 20 ms.
  auto hold_bg =
      lab::Start(InPod(s, absl::StrCat("hold ", lab::kPublicA4, " 80 --interval-ms 20 --count 6000 --timeout-ms 500"), 180s));
  ASSERT_TRUE(hold_bg.ok()) << hold_bg.status();
  lab::Background hold = std::move(*hold_bg);
  for (int i = 0; i < 2; ++i) {
    auto line = hold.ReadOutLine(Scaled(10s));
    ASSERT_TRUE(line.has_value()) << hold.err();
    ASSERT_TRUE(absl::StrContains(*line, "\"result\":\"ok\"")) << *line;
  }

  // The new daemon starts over it; the probe loop runs from before its start
  // until a round after it said ready.
  const InstanceDirs dirs{pins, Shared().runtime_dir()};
  const long long start_ms = NowMs();
  auto started = Spawn(dirs, config);
  ASSERT_TRUE(started.ok()) << started.status();
  daemon_ = std::move(*started);
  const auto deadline = std::chrono::steady_clock::now() + Scaled(120s);
  int rounds = 0, allowed_ok = 0, denied_connected = 0, denied_refused = 0;
  long long ready_ms = -1;
  for (bool last = false; !last; ++rounds) {
    last = ready_ms >= 0;
    RunResult a = lab::Run(InPod(s, absl::StrCat("tcp-burst ", lab::kPublicA4, " 80 20")));
    RunResult b = lab::Run(InPod(s, absl::StrCat("tcp-burst ", lab::kPublicB4, " 80 20")));
    auto la = Lines(a), lb = Lines(b);
    ASSERT_EQ(la.size(), 1u) << a.Describe();
    ASSERT_EQ(lb.size(), 1u) << b.Describe();
    allowed_ok += Num(la[0], "connected") == 20;
    EXPECT_EQ(Num(la[0], "connected"), 20) << "round " << rounds << ": a learned address refused: " << a.out;
    denied_connected += Num(lb[0], "connected");
    denied_refused += Num(lb[0], "refused");
    if (ready_ms < 0) {
      if (auto line = daemon_->ReadOutLine(1ms)) {
        ASSERT_TRUE(absl::StartsWith(*line, "ready:")) << *line << "; " << daemon_->err();
        ready_ms = NowMs();
      } else {
        ASSERT_TRUE(daemon_->running()) << "egressd exited over the old layout: " << daemon_->err();
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "egressd never said ready: " << daemon_->err();
      }
    }
  }
  const std::string log = daemon_->err();
  std::printf("daemon migrate: egressd over the old layout (%zu learned) ready in %.2f s, %d probe rounds across it\n",
              learned.size(), (ready_ms - start_ms) / 1000.0, rounds);
  EXPECT_GE(rounds, 2) << "the probe loop ran while the daemon started";
  EXPECT_EQ(allowed_ok, rounds);
  EXPECT_EQ(denied_connected, 0) << "a denied destination was reachable during the daemon's start";
  EXPECT_EQ(denied_refused, rounds * 20);
  EXPECT_EQ(lab().TcpAccepts(lab::kPublicB4, 80), 0u) << "nothing arrived at the denied host";
  EXPECT_GE(lab().TcpAccepts(lab::kPublicA4, 80), static_cast<uint64_t>(rounds) * 20) << "the positive control arrived";
  EXPECT_TRUE(absl::StrContains(log, absl::StrCat("migrated egr_resolved_v1 -> egr_resolved_v2: ", learned.size(),
                                                  " entries carried")))
      << log;
  // Ready: the API answers /readyz 200 (links in force, maps, DNS self-test).
  const auto ready_deadline = std::chrono::steady_clock::now() + Scaled(10s);
  int readyz = 0;
  while ((readyz = CallDaemon("GET", "/readyz").status) != 200 && std::chrono::steady_clock::now() < ready_deadline) {
    std::this_thread::sleep_for(50ms);  // polling a condition, not waiting for one
  }
  EXPECT_EQ(readyz, 200) << CallDaemon("GET", "/readyz").body.dump();

  // The state after: the old and staging pins gone, every address with its
  // expiry in the new map, the schema written.
  int fd = ExpectResolvedMigrated(pins, staging, learned);
  ASSERT_GE(fd, 0);

  // The programs in force read the new map.
  egr_resolved_val c{};
  c.expires_boot_ns = old_layout::BootNs() + 600'000'000'000ull;
  egr_resolved_key ck = V4Key(s.id, lab::kPublicC4);
  ASSERT_EQ(bpf_map_update_elem(fd, &ck, &c, BPF_ANY), 0);
  EXPECT_TRUE(Ok(Probe(s, absl::StrCat("tcp ", lab::kPublicC4, " 80")))) << "learned into the new map";
  egr_resolved_key bk = V4Key(s.id, lab::kPublicB4);
  ASSERT_EQ(bpf_map_update_elem(old_in_force, &bk, &c, BPF_ANY), 0);
  EXPECT_EQ(Errno(Probe(s, absl::StrCat("tcp ", lab::kPublicB4, " 80"))), "EPERM") << "the retired map decides nothing";
  close(old_in_force);
  close(fd);

  // The flow never broke: every round echoed on its one connection, from
  // before the daemon's start to after it said ready.
  ExpectFlowUnbroken(hold, start_ms, ready_ms, "while the daemon started");
}

TEST_F(DaemonMigrate, EgressdRefusesPinnedStateOfAnotherShapeOrANewerVersionWithExit4AndChangesNothing) {
  const InstanceDirs dirs = Shared().Other("dshape");
  RunResult loaded = Egressd::CtlAt(lab(), dirs, {"load"});
  ASSERT_EQ(loaded.exit_code, 0) << loaded.Describe();
  const std::string& pins = dirs.pin_root;
  auto start = [&] {
    auto bg = Spawn(dirs, "");
    EXPECT_TRUE(bg.ok()) << bg.status();
    return bg.ok() ? bg->Wait(Scaled(60s)) : RunResult{};
  };

  // A v2 pin of the value size builds between cfab065 and 5e7e896 pinned.
  const std::string v2 = pins + "/" EGR_MAP_RESOLVED;
  ASSERT_EQ(unlink(v2.c_str()), 0);
  {
    DECLARE_LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = BPF_F_NO_PREALLOC);
    int early = bpf_map_create(BPF_MAP_TYPE_HASH, EGR_MAP_RESOLVED, sizeof(egr_resolved_key),
                               old_layout::kResolvedV2EarlyValueSize, EGR_MAX_RESOLVED, &o);
    ASSERT_GE(early, 0);
    ASSERT_EQ(bpf_obj_pin(early, v2.c_str()), 0);
    close(early);
  }
  PinSnapshot before = SnapshotPins(pins);
  RunResult r = start();
  EXPECT_EQ(r.exit_code, 4) << r.Describe();
  EXPECT_FALSE(absl::StrContains(r.out, "ready:")) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "pinned map egr_resolved_v2")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "value_size expected 32, found 24")) << r.err;
  PinSnapshot after = SnapshotPins(pins);
  EXPECT_EQ(after, before) << PinDiff(before, after);
  EXPECT_FALSE(Exists(pins + "/staging"));

  // A newer name of a map (a downgrade).
  ASSERT_EQ(unlink(v2.c_str()), 0);
  {
    int newer = bpf_map_create(BPF_MAP_TYPE_HASH, "egr_resolved_v3", 4, 4, 1, nullptr);
    ASSERT_GE(newer, 0);
    ASSERT_EQ(bpf_obj_pin(newer, (pins + "/egr_resolved_v3").c_str()), 0);
    close(newer);
  }
  before = SnapshotPins(pins);
  r = start();
  EXPECT_EQ(r.exit_code, 4) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "egr_resolved_v3 is pinned, this egressd's layout is egr_resolved_v2")) << r.err;
  after = SnapshotPins(pins);
  EXPECT_EQ(after, before) << PinDiff(before, after);
  EXPECT_FALSE(Exists(v2)) << "nothing was created";
  ASSERT_EQ(unlink((pins + "/egr_resolved_v3").c_str()), 0);

  // A newer schema: every map of this build's shape, the entry says 2.
  RunResult reload = Egressd::CtlAt(lab(), dirs, {"load"});
  ASSERT_EQ(reload.exit_code, 0) << "the state put back: " << reload.Describe();
  {
    int cfg = bpf_obj_get((pins + "/" EGR_MAP_CONFIG).c_str());
    ASSERT_GE(cfg, 0);
    uint32_t zero = 0;
    egr_config_val c{};
    ASSERT_EQ(bpf_map_lookup_elem(cfg, &zero, &c), 0);
    c.pad0 = kPinSchema + 1;
    ASSERT_EQ(bpf_map_update_elem(cfg, &zero, &c, BPF_ANY), 0);
    close(cfg);
  }
  before = SnapshotPins(pins);
  r = start();
  EXPECT_EQ(r.exit_code, 4) << r.Describe();
  EXPECT_FALSE(absl::StrContains(r.out, "ready:")) << "a newer schema is never adopted: " << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, absl::StrCat("the pinned schema is ", kPinSchema + 1))) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, absl::StrCat("this egressd knows schema ", kPinSchema))) << r.err;
  after = SnapshotPins(pins);
  EXPECT_EQ(after, before) << PinDiff(before, after);
  EXPECT_EQ(PinnedSchema(pins), uint32_t{kPinSchema + 1}) << "the entry itself is left as found";

  RunResult un = Egressd::CtlAt(lab(), dirs, {"unload", "--force"});
  EXPECT_EQ(un.exit_code, 0) << un.Describe();
}

}  // namespace
}  // namespace egressd::test
