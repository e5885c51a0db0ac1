// Issue 15, "State across versions", against real pins and programs:
//  * a load over the state an older layout pinned (egr_resolved_v1 with
//    thousands of learned addresses, tests/priv/old_layouts.h) migrates it
//    while a sandbox's TCP flow to a learned address echoes every 20 ms and
//    a probe loop connects to a learned address (must succeed) and to a
//    denied one (must fail, and nothing may arrive at its lab host) from
//    before the load starts until after it ended; every learned address
//    comes over with its expiry to the nanosecond, the old pin and a stale
//    staging pin are gone, the schema entry is written, and the programs in
//    force read the new map;
//  * a pinned map of another shape under this build's name, a newer map
//    name, and a newer schema are each refused (exit 4) naming what differs,
//    and change nothing.
// What this does not prove: the programs in force before the migration are
// this build's, reading a map the test filled with the v2 form of the same
// addresses (the old build's programs are not rebuilt here); the swap, the
// fill, the unpin and the enforcement across them are the loader's own.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "dns_sandboxes.h"
#include "egressd_env.h"
#include "maps/egressd_abi.h"
#include "maps/map_iter.h"
#include "loader/pin_check.h"
#include "migrate_checks.h"
#include "old_layouts.h"

namespace egressd::test {
namespace {

using namespace std::chrono_literals;
using lab::ProbeLine;
using lab::RunResult;
using lab::RunSpec;

constexpr const char* kName = "mig.example";
constexpr size_t kLearned = 5000;

using namespace migrate;

class Migrate : public ::testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    lab().ResetCounters();
    char dir[] = "/run/egr-migrate-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
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

  std::string dir_;
  DnsSandboxes sandboxes_{"migrate-"};
};

TEST_F(Migrate, AnOlderLayoutMigratesWithFlowsLiveAndNothingDeniedReachable) {
  const std::string pins = Shared().pin_root();
  DnsSandbox s = sandboxes_.Add({"--config", Config(), "--egress", kName}, /*pod_endpoint=*/false);
  ASSERT_NE(s.id, 0u);
  // The old state: thousands of learned addresses of other sandboxes, and
  // this sandbox's learned kPublicA4 (kPublicB4 and kPublicC4 never learned:
  // denied by default).
  const uint64_t now = old_layout::BootNs();
  std::vector<old_layout::LearnedV1> learned = old_layout::Synthetic(kLearned, now + 600'000'000'000ull);
  old_layout::LearnedV1 mine{V4Key(s.id, lab::kPublicA4), {now + 900'000'000'000ull, 77, 0}};
  learned.push_back(mine);
  // A staging pin an interrupted migration left (not egressd's shape at all).
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
  // What the old state enforces, before anything moves.
  ASSERT_TRUE(Ok(Probe(s, absl::StrCat("tcp ", lab::kPublicA4, " 80")))) << "learned: allowed";
  ASSERT_EQ(Errno(Probe(s, absl::StrCat("tcp ", lab::kPublicB4, " 80"))), "EPERM") << "not learned: denied";

  // The live flow: one connection, a round every 20 ms (read until a round
  // began after the load ended, then stopped).
  auto hold_bg = lab::Start(InPod(s, absl::StrCat("hold ", lab::kPublicA4, " 80 --interval-ms 20 --count 3000 --timeout-ms 500"), 90s));
  ASSERT_TRUE(hold_bg.ok()) << hold_bg.status();
  lab::Background hold = std::move(*hold_bg);
  for (int i = 0; i < 2; ++i) {
    auto line = hold.ReadOutLine(Scaled(10s));
    ASSERT_TRUE(line.has_value()) << hold.err();
    ASSERT_TRUE(absl::StrContains(*line, "\"result\":\"ok\"")) << *line;
  }

  // The load, in the background; the probe loop runs until it has exited
  // (and once after).
  RunSpec load;
  load.argv = {lab::BinaryPath("egressctl"), "load"};
  load.netns = lab().node_netns();
  load.env = Shared().CtlEnv();
  load.timeout = Scaled(60s);
  const auto started = std::chrono::steady_clock::now();
  auto load_bg = lab::Start(load);
  ASSERT_TRUE(load_bg.ok()) << load_bg.status();
  int rounds = 0, allowed_ok = 0, denied_connected = 0, denied_refused = 0;
  for (bool last = false; !last; ++rounds) {
    last = !load_bg->running();
    // 20 connects each way per round (one process): a round takes tens of ms.
    RunResult a = lab::Run(InPod(s, absl::StrCat("tcp-burst ", lab::kPublicA4, " 80 20")));
    RunResult b = lab::Run(InPod(s, absl::StrCat("tcp-burst ", lab::kPublicB4, " 80 20")));
    auto la = Lines(a), lb = Lines(b);
    ASSERT_EQ(la.size(), 1u) << a.Describe();
    ASSERT_EQ(lb.size(), 1u) << b.Describe();
    allowed_ok += Num(la[0], "connected") == 20;
    EXPECT_EQ(Num(la[0], "connected"), 20) << "round " << rounds << ": a learned address refused: " << a.out;
    denied_connected += Num(lb[0], "connected");
    denied_refused += Num(lb[0], "refused");
  }
  RunResult loaded = load_bg->Wait(Scaled(60s));
  const long long load_end_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  const long long load_start_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(started.time_since_epoch()).count();
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_EQ(loaded.exit_code, 0) << loaded.Describe();
  std::printf("migrate: load over the old layout (%zu learned) %.2f s, %d probe rounds across it\n",
              learned.size(), load_s, rounds);
  EXPECT_GE(rounds, 2) << "the probe loop ran while the load did";
  EXPECT_EQ(allowed_ok, rounds);
  EXPECT_EQ(denied_connected, 0) << "a denied destination was reachable during the migration";
  EXPECT_EQ(denied_refused, rounds * 20);
  EXPECT_EQ(lab().TcpAccepts(lab::kPublicB4, 80), 0u) << "nothing arrived at the denied host";
  EXPECT_TRUE(absl::StrContains(loaded.out, absl::StrCat("migrated egr_resolved_v1 -> egr_resolved_v2: ", learned.size(),
                                                         " entries carried")))
      << loaded.Describe();

  // The state after: the old pin and the staging pins gone, the new map
  // pinned with every address and its expiry, the schema written.
  int fd = ExpectResolvedMigrated(pins, staging, learned);
  ASSERT_GE(fd, 0);

  // The programs in force read the new map: an address learned into it now
  // connects; the map they read before does not decide any more.
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
  // before the load to after it.
  ExpectFlowUnbroken(hold, load_start_ms, load_end_ms, "while the load did");
}

TEST_F(Migrate, PinnedStateOfAnotherShapeOrANewerVersionIsRefusedAndNothingChanges) {
  const InstanceDirs dirs = Shared().Other("shape");
  RunResult loaded = Egressd::CtlAt(lab(), dirs, {"load"});
  ASSERT_EQ(loaded.exit_code, 0) << loaded.Describe();
  const std::string& pins = dirs.pin_root;
  const auto programs = LinkPrograms(pins);
  ASSERT_FALSE(programs.empty());

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
  RunResult r = Egressd::CtlAt(lab(), dirs, {"load"});
  EXPECT_EQ(r.exit_code, 4) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "pinned map egr_resolved_v2")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "value_size expected 32, found 24")) << r.err;
  EXPECT_EQ(LinkPrograms(pins), programs) << "no program changed";
  EXPECT_FALSE(Exists(pins + "/staging"));

  // The refusal changed nothing, so it is the same the next time.
  RunResult again = Egressd::CtlAt(lab(), dirs, {"load"});
  EXPECT_EQ(again.exit_code, 4) << again.Describe();

  // A newer name of a map (a downgrade), then a newer schema.
  ASSERT_EQ(unlink(v2.c_str()), 0);
  {
    int newer = bpf_map_create(BPF_MAP_TYPE_HASH, "egr_resolved_v3", 4, 4, 1, nullptr);
    ASSERT_GE(newer, 0);
    ASSERT_EQ(bpf_obj_pin(newer, (pins + "/egr_resolved_v3").c_str()), 0);
    close(newer);
  }
  r = Egressd::CtlAt(lab(), dirs, {"load"});
  EXPECT_EQ(r.exit_code, 4) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "egr_resolved_v3 is pinned, this egressd's layout is egr_resolved_v2")) << r.err;
  EXPECT_FALSE(Exists(v2)) << "nothing was created";
  EXPECT_EQ(LinkPrograms(pins), programs);
  ASSERT_EQ(unlink((pins + "/egr_resolved_v3").c_str()), 0);

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
  r = Egressd::CtlAt(lab(), dirs, {"load"});
  EXPECT_EQ(r.exit_code, 4) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, absl::StrCat("the pinned schema is ", kPinSchema + 1))) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, absl::StrCat("this egressd knows schema ", kPinSchema))) << r.err;
  EXPECT_EQ(LinkPrograms(pins), programs);
  EXPECT_EQ(PinnedSchema(pins), uint32_t{kPinSchema + 1}) << "the entry itself is left as found";

  RunResult un = Egressd::CtlAt(lab(), dirs, {"unload", "--force"});
  EXPECT_EQ(un.exit_code, 0) << un.Describe();
}

}  // namespace
}  // namespace egressd::test
