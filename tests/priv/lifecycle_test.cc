// Test 8 of the foundation issue: enforcement outlives the process that
// loaded it (even SIGKILLed), `egressctl unload` really removes it (and
// refuses while sandboxes depend on it), loading twice is idempotent, and a
// policy flip is atomic: an established connection survives a flip that
// still allows it and is cut by one that does not.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <glob.h>

#include "absl/strings/match.h"
#include "nlohmann/json.hpp"
#include "egressd_env.h"

namespace egressd::test {
namespace {

using lab::Lab;
using namespace egressd::lab;
using std::chrono::milliseconds;

bool Exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

// egressctl against an instance of the test's own (its own pin root and
// runtime dir, passed as --pin-root and --runtime-dir), in the node netns.
RunResult CtlAt(const InstanceDirs& dirs, const std::vector<std::string>& args) {
  return Egressd::CtlAt(Shared().lab(), dirs, args);
}

// A counter of `egressctl status --json` ("counters": {name: value}).
absl::StatusOr<uint64_t> Counter(const std::string& name) {
  RunResult st = Shared().Ctl({"status", "--json"});
  if (st.exit_code != 0) return absl::InternalError(st.Describe());
  auto j = nlohmann::json::parse(st.out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("counters") || !j["counters"].contains(name) ||
      !j["counters"][name].is_number_unsigned())
    return absl::NotFoundError("no counter " + name + " in " + st.out);
  return j["counters"][name].get<uint64_t>();
}

// The process state letter of `pid` ('Z' once it died and awaits its reaper).
char ProcState(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t rp = stat.rfind(')');
  return rp == std::string::npos || rp + 2 >= stat.size() ? '?' : stat[rp + 2];
}

class Lifecycle : public testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    lab().ResetCounters();
  }
  Lab& lab() { return Shared().lab(); }
  ProbeLine ProbeIn(const std::string& cg, const std::vector<std::string>& args) {
    RunResult r = lab().Probe(args, cg, /*hostile=*/true);
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? ProbeLine{} : lines[0];
  }
};

TEST_F(Lifecycle, SigkillOfTheLoadingProcessLeavesEnforcementUnchanged) {
  const InstanceDirs dirs = Shared().Other("kill");
  const std::string& pins = dirs.pin_root;
  // This `egressctl run` loads its own instance (from the pod: its node netns
  // named explicitly), starts the sandbox, and is then SIGKILLed while the
  // sandbox's command is still waiting to act.
  RunSpec spec;
  spec.argv = {BinaryPath("egressctl"), "--pin-root", pins, "--runtime-dir", dirs.runtime_dir,
               "run", "--host-root", "--egress", kPublicA4, "--",
               "setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all", "--",
               BinaryPath("egressd-probe"), "sleep", std::to_string(int(3000 * TimeScale())),
               "--then", "tcp", kImds4, "80", "--then",
               "tcp", kPublicB4, "80", "--then", "raw-icmp", kPublicB6, "--then", "tcp", kPublicA4, "80"};
  spec.netns = lab().client_netns();
  spec.env["EGRESSD_NODE_NETNS"] = lab().node_netns();
  auto bg = Start(spec);
  ASSERT_TRUE(bg.ok()) << bg.status();
  // The sandbox's first line: it is registered, running and now idle.
  auto ready = bg->ReadOutLine(milliseconds(int(20000 * TimeScale())));
  ASSERT_TRUE(ready) << bg->err();
  auto ready_line = ParseProbeLine(*ready);
  ASSERT_TRUE(ready_line.ok()) << *ready;
  ASSERT_EQ((*ready_line)["state"], "sleeping") << *ready;
  ASSERT_EQ(kill(bg->pid(), SIGKILL), 0);
  // The loader is dead (a zombie: nobody reaps it until Wait) before the
  // sandbox acts, or the test says so rather than proving nothing.
  ASSERT_TRUE(Lab::WaitFor([&] { return ProcState(bg->pid()) == 'Z'; }, milliseconds(5000)));

  std::vector<ProbeLine> lines;
  while (lines.size() < 5) {
    auto line = bg->ReadOutLine(milliseconds(int(8000 * TimeScale())));
    if (!line) break;
    auto l = ParseProbeLine(*line);
    if (l.ok()) lines.push_back(*l);
  }
  ASSERT_EQ(lines.size(), 5u) << bg->err();
  ASSERT_EQ(lines[0]["op"], "sleep");
  ASSERT_EQ(lines[0]["result"], "ok") << "the sandbox's pause ended after the loader died";
  EXPECT_EQ(lines[1]["errno"], "EPERM") << "IMDS after the loader died";
  EXPECT_EQ(lines[2]["errno"], "EPERM") << "an unnamed host after the loader died";
  EXPECT_ATTEMPTED(lines[3], "raw-icmp after the loader died");
  EXPECT_EQ(lines[4]["result"], "ok") << "the named host after the loader died";
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().PacketsTo(kImds4), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kPublicB4), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kPublicB6), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(kPublicA4, 80), 1u) << lab().CountersSummary();

  // The orphaned sandbox stays registered (fail closed) until someone removes it.
  glob_t g{};
  glob((Lab::cgroup2_root() + "/egressd/run-" + std::to_string(bg->pid()) + "-*").c_str(), 0, nullptr, &g);
  ASSERT_EQ(g.gl_pathc, 1u);
  std::string cg = g.gl_pathv[0];
  globfree(&g);
  { std::ofstream(cg + "/cgroup.kill") << "1"; }
  bg->Wait(milliseconds(3000));
  EXPECT_TRUE(absl::StrContains(CtlAt(dirs, {"status"}).out, "sandbox"));
  EXPECT_EQ(CtlAt(dirs, {"sandbox", "remove", "--cgroup", cg}).exit_code, 0);
  // cgroup.kill only starts the killing: the cgroup is removable once empty
  // (a bare rmdir raced the dying processes and left one empty run-* cgroup
  // on the node about every other run of the suite).
  EXPECT_TRUE(Lab::WaitFor(
      [&] {
        std::ifstream events(cg + "/cgroup.events");
        std::string line;
        while (std::getline(events, line)) {
          if (line == "populated 0") return true;
        }
        return false;
      },
      milliseconds(int(10000 * TimeScale()))))
      << cg << " still holds processes";
  EXPECT_EQ(rmdir(cg.c_str()), 0) << cg << ": " << strerror(errno);
  EXPECT_EQ(CtlAt(dirs, {"unload"}).exit_code, 0);
  EXPECT_FALSE(Exists(pins));
}

TEST_F(Lifecycle, UnloadRefusesWhileSandboxesAreRegisteredThenRemovesEnforcement) {
  const InstanceDirs dirs = Shared().Other("unload");
  const std::string& pins = dirs.pin_root;
  ASSERT_EQ(CtlAt(dirs, {"load"}).exit_code, 0);
  auto cg = lab().MakeCgroup("unload");
  ASSERT_TRUE(cg.ok());
  ASSERT_EQ(CtlAt(dirs, {"sandbox", "add", "--cgroup", *cg, "--floor", "airgapped"}).exit_code, 0);
  EXPECT_EQ(ProbeIn(*cg, {"tcp", kPublicC4, "80"})["errno"], "EPERM");

  RunResult refused = CtlAt(dirs, {"unload"});
  EXPECT_EQ(refused.exit_code, 1) << refused.Describe();
  EXPECT_TRUE(absl::StrContains(refused.err, "--force")) << refused.err;
  EXPECT_EQ(ProbeIn(*cg, {"tcp", kPublicC4, "80"})["errno"], "EPERM") << "a refused unload changed nothing";
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().PacketsTo(kPublicC4), 0u);

  RunResult forced = CtlAt(dirs, {"unload", "--force"});
  ASSERT_EQ(forced.exit_code, 0) << forced.Describe();
  EXPECT_FALSE(Exists(pins)) << "pins left behind";
  EXPECT_TRUE(Ok(ProbeIn(*cg, {"tcp", kPublicC4, "80"}))) << "enforcement is gone after unload";
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kPublicC4, 80) == 1; }));
}

TEST_F(Lifecycle, LoadingTwiceIsIdempotentAndKeepsSandboxes) {
  auto cg = lab().MakeCgroup("reload");
  ASSERT_TRUE(cg.ok());
  ASSERT_EQ(Shared().Ctl({"sandbox", "add", "--cgroup", *cg, "--egress", kPublicD4}).exit_code, 0);
  RunResult again = Shared().Ctl({"load"});
  ASSERT_EQ(again.exit_code, 0) << again.Describe();
  // Eleven cgroup links, and four LSM links where the bpf LSM is in force.
  RunResult status = Shared().Ctl({"status", "--json"});
  const bool lsm = absl::StrContains(status.out, "\"socket_containment\": true");
  EXPECT_TRUE(absl::StrContains(again.out, lsm ? "0 link(s) attached, 15 updated in place"
                                              : "0 link(s) attached, 11 updated in place"))
      << again.out;
  EXPECT_EQ(ProbeIn(*cg, {"tcp", kPublicE4, "80"})["errno"], "EPERM");
  EXPECT_TRUE(Ok(ProbeIn(*cg, {"tcp", kPublicD4, "80"})));
  EXPECT_EQ(Shared().Ctl({"sandbox", "remove", "--cgroup", *cg}).exit_code, 0);
}

TEST_F(Lifecycle, CoexistsWithOtherProgramsOnTheSameCgroupHooks) {
  // A second instance is another set of connect4/6, sendmsg4/6 and
  // cgroup_skb programs multi-attached at the same root: each judges its own
  // sandboxes, neither disturbs the other, and one leaving keeps the other.
  const InstanceDirs other = Shared().Other("other");
  ASSERT_EQ(CtlAt(other, {"load"}).exit_code, 0);
  auto mine = lab().MakeCgroup("coexist-mine");
  auto theirs = lab().MakeCgroup("coexist-theirs");
  ASSERT_TRUE(mine.ok() && theirs.ok());
  ASSERT_EQ(Shared().Ctl({"sandbox", "add", "--cgroup", *mine, "--egress", kPublicA4}).exit_code, 0);
  ASSERT_EQ(CtlAt(other, {"sandbox", "add", "--cgroup", *theirs, "--egress", kPublicB4}).exit_code, 0);
  EXPECT_TRUE(Ok(ProbeIn(*mine, {"tcp", kPublicA4, "80"})));
  EXPECT_EQ(ProbeIn(*mine, {"tcp", kPublicB4, "80"})["errno"], "EPERM");
  EXPECT_TRUE(Ok(ProbeIn(*theirs, {"tcp", kPublicB4, "80"})));
  EXPECT_EQ(ProbeIn(*theirs, {"tcp", kPublicA4, "80"})["errno"], "EPERM");
  ASSERT_EQ(CtlAt(other, {"unload", "--force"}).exit_code, 0);
  EXPECT_EQ(ProbeIn(*mine, {"tcp", kPublicB4, "80"})["errno"], "EPERM") << "mine still enforced";
  EXPECT_TRUE(Ok(ProbeIn(*theirs, {"tcp", kPublicA4, "80"}))) << "theirs left with its instance";
  EXPECT_EQ(Shared().Ctl({"sandbox", "remove", "--cgroup", *mine}).exit_code, 0);
}

TEST_F(Lifecycle, RefusesToStartNamingWhatIsMissingAndChangesNothing) {
  const InstanceDirs dirs = Shared().Other("probe");
  const std::string& pins = dirs.pin_root;
  RunSpec spec;
  spec.argv = {BinaryPath("egressctl"), "--pin-root", pins, "--runtime-dir", dirs.runtime_dir, "load"};
  spec.netns = lab().node_netns();
  spec.env["EGRESSD_NODE_NETNS"] = "/proc/self/ns/no-such-netns";
  RunResult r = lab::Run(spec);
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "SO_NETNS_COOKIE on /proc/self/ns/no-such-netns")) << r.err;
  EXPECT_FALSE(Exists(pins)) << "a refused start created " << pins;
  EXPECT_FALSE(Exists(dirs.runtime_dir)) << "a refused start created " << dirs.runtime_dir;
}

TEST_F(Lifecycle, InstancesOfDeadRunsAreSweptAndLiveOnesKept) {
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  waitpid(dead, nullptr, 0);
  const InstanceDirs stale{"/sys/fs/bpf/egr-test-" + std::to_string(dead) + "-beef",
                           "/run/egressd-test-" + std::to_string(dead) + "-beef"};
  const std::string stale_default =
      "/run/egressd/instances/sys_fs_bpf_egr-test-" + std::to_string(dead) + "-beef";
  const InstanceDirs live = Shared().Other("live");
  RunResult load = CtlAt(stale, {"load"});
  ASSERT_EQ(load.exit_code, 0) << load.Describe();
  ASSERT_TRUE(Exists(stale.pin_root) && Exists(stale.runtime_dir));
  // A clean node has no default instances directory until some run made one.
  for (const char* dir : {"/run/egressd", "/run/egressd/instances"}) {
    ASSERT_TRUE(mkdir(dir, 0700) == 0 || errno == EEXIST) << dir << ": " << strerror(errno);
  }
  ASSERT_EQ(mkdir(stale_default.c_str(), 0700), 0) << stale_default;
  ASSERT_EQ(CtlAt(live, {"load"}).exit_code, 0);

  EXPECT_GE(SweepStaleInstances(), 3);
  EXPECT_FALSE(Exists(stale.pin_root)) << "a dead run's instance stays loaded";
  EXPECT_FALSE(Exists(stale.runtime_dir));
  EXPECT_FALSE(Exists(stale_default));
  EXPECT_TRUE(Exists(live.pin_root)) << "swept a live run's instance";
  EXPECT_TRUE(Exists(live.runtime_dir));
  EXPECT_TRUE(Exists(Shared().runtime_dir()));
  EXPECT_EQ(CtlAt(live, {"unload"}).exit_code, 0);
}

class PolicyFlip : public Lifecycle {
 protected:
  // Starts a long-lived connection in `cg` and waits for its first rounds.
  Background Hold(const std::string& cg) {
    auto bg = lab().StartProbe({"hold", kPublicA4, "8080", "--interval-ms", "100", "--count", "40"}, cg);
    EXPECT_TRUE(bg.ok()) << bg.status();
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(NextRoundOk(*bg)) << bg->err();
    return std::move(*bg);
  }
  static bool NextRoundOk(Background& bg) {
    auto line = bg.ReadOutLine(milliseconds(3000));
    if (!line) return false;
    auto l = ParseProbeLine(*line);
    return l.ok() && (*l)["result"] == "ok";
  }
};

TEST_F(PolicyFlip, EstablishedConnectionSurvivesAFlipThatStillAllowsIt) {
  auto cg = lab().MakeCgroup("flip-keep");
  ASSERT_TRUE(cg.ok());
  ASSERT_EQ(Shared().Ctl({"sandbox", "add", "--cgroup", *cg, "--egress", kPublicA4}).exit_code, 0);
  Background bg = Hold(*cg);
  RunResult flip = Shared().Ctl({"sandbox", "add", "--cgroup", *cg, "--egress", kPublicA4, "--egress",
                                 "198.51.100.0/24", "--on-deny", "drop"});
  ASSERT_EQ(flip.exit_code, 0) << flip.Describe();
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(NextRoundOk(bg)) << "round after flip " << i << bg.err();
  // The new policy is in force for new connections.
  EXPECT_TRUE(Ok(ProbeIn(*cg, {"tcp", kPublicD4, "80"})));
  EXPECT_EQ(lab().TcpAccepts(kPublicA4, 8080), 1u) << "one connection throughout";
  bg.Stop();
  EXPECT_EQ(Shared().Ctl({"sandbox", "remove", "--cgroup", *cg}).exit_code, 0);
}

TEST_F(PolicyFlip, EstablishedConnectionIsCutByAFlipThatRevokesIt) {
  auto cg = lab().MakeCgroup("flip-cut");
  ASSERT_TRUE(cg.ok());
  ASSERT_EQ(Shared().Ctl({"sandbox", "add", "--cgroup", *cg, "--egress", kPublicA4}).exit_code, 0);
  Background bg = Hold(*cg);
  auto drops_before = Counter("skb_drop");
  ASSERT_TRUE(drops_before.ok()) << drops_before.status();
  const auto flipped_at = std::chrono::duration_cast<milliseconds>(
                              std::chrono::steady_clock::now().time_since_epoch())
                              .count();
  ASSERT_EQ(Shared().Ctl({"sandbox", "add", "--cgroup", *cg, "--egress", kPublicD4}).exit_code, 0);
  const auto flip_done = std::chrono::duration_cast<milliseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  // Every round that began after the flip returned: the probe, alive, reports
  // that its echo never came back (its "round i" left the socket, the backstop
  // dropped it; a crashed probe would print nothing). Rounds that began
  // earlier (still in the output pipe, or in flight at the flip) may be ok.
  int after = 0, before = 0;
  while (after < 3) {
    auto line = bg.ReadOutLine(milliseconds(3000));
    ASSERT_TRUE(line) << "no round line after the flip (did the probe die?): " << bg.err();
    auto l = ParseProbeLine(*line);
    ASSERT_TRUE(l.ok() && l->count("start_ms")) << *line;
    const long long start = std::stoll((*l)["start_ms"]);
    if (start < flip_done) {
      ASSERT_LT(++before, 40) << *line;
      continue;
    }
    ++after;
    EXPECT_EQ((*l)["result"], "error") << "the revoked connection kept working: " << *line;
    EXPECT_EQ((*l)["errno"], "ETIMEDOUT") << *line;
    EXPECT_EQ((*l)["stage"], "recv") << *line;
  }
  std::cout << "[ info ] flip took " << flip_done - flipped_at << " ms; " << before
            << " round(s) began before it returned\n";
  EXPECT_TRUE(bg.running()) << bg.err();
  auto drops_after = Counter("skb_drop");
  ASSERT_TRUE(drops_after.ok()) << drops_after.status();
  EXPECT_GT(*drops_after, *drops_before) << "the backstop dropped the revoked connection's packets";
  EXPECT_EQ(ProbeIn(*cg, {"tcp", kPublicA4, "80"})["errno"], "EPERM");
  bg.Stop();
  EXPECT_EQ(Shared().Ctl({"sandbox", "remove", "--cgroup", *cg}).exit_code, 0);
}

TEST_F(PolicyFlip, IdenticalPoliciesShareOneEntrySet) {
  auto a = lab().MakeCgroup("share-a");
  auto b = lab().MakeCgroup("share-b");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(Shared().Ctl({"sandbox", "add", "--cgroup", *a, "--egress", "203.0.113.0/24"}).exit_code, 0);
  ASSERT_EQ(Shared().Ctl({"sandbox", "add", "--cgroup", *b, "--egress", "203.0.113.0/24"}).exit_code, 0);
  RunResult st = Shared().Ctl({"status", "--json"});
  EXPECT_TRUE(absl::StrContains(st.out, "\"refcount\": 2")) << st.out;
  EXPECT_EQ(Shared().Ctl({"sandbox", "remove", "--cgroup", *a}).exit_code, 0);
  EXPECT_TRUE(Ok(ProbeIn(*b, {"tcp", kPublicF4, "80"}))) << "b keeps the shared policy";
  EXPECT_EQ(ProbeIn(*b, {"tcp", kPublicA4, "80"})["errno"], "EPERM");
  EXPECT_EQ(Shared().Ctl({"sandbox", "remove", "--cgroup", *b}).exit_code, 0);
  st = Shared().Ctl({"status", "--json"});
  EXPECT_TRUE(absl::StrContains(st.out, "\"policies\": []")) << "the last reference frees it: " << st.out;
}

}  // namespace
}  // namespace egressd::test
