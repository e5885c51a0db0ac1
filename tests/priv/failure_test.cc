// What an operator sees when the kernel or the system fails egressd, and
// what egressd leaves behind: kernel and system failures exit 1 naming the
// errno and the object (never "invalid input, nothing was changed"), links a
// failed load attached are rolled back, and a signal or a crash at the worst
// moment leaves nothing registered that blocks the next command.
//
// Failures are real where the kernel can be made to fail on purpose (a full
// map, a missing pin) and injected at named points where it cannot
// (userspace/common/fault.h: EGRESSD_FAULT, EGRESSD_CRASH_AT).
#include <bpf/bpf.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "egressd_env.h"
#include "maps/egressd_abi.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;
using std::chrono::milliseconds;

bool Exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

std::vector<std::string> DirNames(const std::string& dir, const std::string& prefix = "") {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != ".." && n.rfind(prefix, 0) == 0) out.push_back(n);
    }
    closedir(d);
  }
  return out;
}

// An egressd instance of this test's own (pin root and runtime dir), so a
// failure injected here can never disturb the shared one.
class Instance {
 public:
  explicit Instance(const std::string& tag)
      : pins_(Shared().pin_root() + "-" + tag), runtime_(absl::StrCat("/run/egressd-test-", Shared().lab().id(), "-", tag)) {}
  ~Instance() {
    Ctl({"unload", "--force"});
    RunSpec rm;
    rm.argv = {"rm", "-rf", runtime_};
    lab::Run(rm);
  }
  RunResult Ctl(std::vector<std::string> args, std::map<std::string, std::string> env = {}) const {
    RunSpec spec;
    spec.argv = {BinaryPath("egressctl"), "--pin-root", pins_, "--runtime-dir", runtime_};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.env = std::move(env);
    // The lab's node, as the shared instance has it (the default, the init
    // process's netns, may not be readable where the tests run).
    spec.env.emplace("EGRESSD_NODE_NETNS", Shared().lab().node_netns());
    spec.timeout = milliseconds(static_cast<int>(30000 * TimeScale()));
    return lab::Run(spec);
  }
  nlohmann::json Status() const {
    RunResult r = Ctl({"status", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    return nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  }
  const std::string& pins() const { return pins_; }

 private:
  std::string pins_, runtime_;
};


void ExpectSystemFailure(const RunResult& r, const std::string& names) {
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, names)) << "expected the error to name " << names << ": " << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "errno")) << "expected the errno: " << r.err;
  EXPECT_FALSE(absl::StrContains(r.err, "invalid input")) << r.err;
  EXPECT_FALSE(absl::StrContains(r.err, "nothing was changed")) << r.err;
}

class Failures : public testing::Test {
 protected:
  void SetUp() override { EGR_REQUIRE_PRIVILEGES(); }
};

TEST_F(Failures, RefusedAttachOnAFreshLoadRollsBackTheLinksAlreadyAttached) {
  Instance inst("attach");
  // The fourth of ten cgroup programs: three are attached when it fails.
  RunResult r = inst.Ctl({"load"}, {{"EGRESSD_FAULT", "attach:egr_sendmsg6=EPERM"}});
  ExpectSystemFailure(r, "egr_sendmsg6");
  EXPECT_TRUE(absl::StrContains(r.err, "rolled back: egr_sendmsg4 detached, egr_connect6 detached, "
                                       "egr_connect4 detached"))
      << r.err;
  // A bpf_link lives as long as its last reference: egressctl has exited, so
  // an attachment it left would have to be pinned, and it pins only here.
  // (Counting programs at the root would race other instances on the node.)
  EXPECT_TRUE(DirNames(inst.pins() + "/links").empty()) << "link pins left behind";
  // And the instance is usable afterwards: the next load attaches everything.
  RunResult again = inst.Ctl({"load"});
  EXPECT_EQ(again.exit_code, 0) << again.Describe();
  // Eleven cgroup links, and four LSM links where the bpf LSM is in force.
  EXPECT_EQ(LinkPrograms(inst.pins()).size(), inst.Status().value("socket_containment", false) ? 15u : 11u);
}

TEST_F(Failures, RefusedUpdateOnAnUpgradePutsTheOldProgramsBack) {
  Instance inst("upgrade");
  ASSERT_EQ(inst.Ctl({"load"}).exit_code, 0);
  auto before = LinkPrograms(inst.pins());
  ASSERT_EQ(before.size(), inst.Status().value("socket_containment", false) ? 15u : 11u);
  // A kernel EINVAL is the kernel's answer, not bad input.
  RunResult r = inst.Ctl({"load"}, {{"EGRESSD_FAULT", "attach:egr_skb_egress=EINVAL"}});
  ExpectSystemFailure(r, "egr_skb_egress");
  EXPECT_TRUE(absl::StrContains(r.err, "egr_connect4 back on its previous program")) << r.err;
  EXPECT_EQ(LinkPrograms(inst.pins()), before) << "every hook must run the programs it ran before";
}

// The last hook (cgroup/sock_release, after the LSM hooks where the bpf LSM
// is in force): every hook before it was swapped to the new programs when it
// fails, and each goes back.
TEST_F(Failures, RefusedUpdateOfTheLastHookPutsEveryOtherHookBack) {
  Instance inst("upgrade-last");
  ASSERT_EQ(inst.Ctl({"load"}).exit_code, 0);
  auto before = LinkPrograms(inst.pins());
  ASSERT_EQ(before.size(), inst.Status().value("socket_containment", false) ? 15u : 11u);
  RunResult r = inst.Ctl({"load"}, {{"EGRESSD_FAULT", "attach:egr_sock_release=EINVAL"}});
  ExpectSystemFailure(r, "egr_sock_release");
  EXPECT_TRUE(absl::StrContains(r.err, "egr_skb_egress back on its previous program")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "egr_getpeername6 back on its previous program")) << r.err;
  EXPECT_EQ(LinkPrograms(inst.pins()), before) << "every hook must run the programs it ran before";
}

TEST_F(Failures, AFullMapFailsTheRegistrationNamingTheMapAndLeavesNoPolicyBehind) {
  Instance inst("full");
  ASSERT_EQ(inst.Ctl({"load"}).exit_code, 0);
  auto cg = Shared().lab().MakeCgroup("full-map");
  ASSERT_TRUE(cg.ok()) << cg.status();
  // Fill egr_cgroups_v1 with ids no cgroup has (the top of the id space).
  int fd = bpf_obj_get((inst.pins() + "/" EGR_MAP_CGROUPS).c_str());
  ASSERT_GE(fd, 0) << std::strerror(errno);
  // One batch, not 65,537 updates: under emulation (the vmtests guests) each
  // syscall cost ~1 ms and the fill was most of this test's four minutes.
  std::vector<uint64_t> ids(EGR_MAX_CGROUPS + 1);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = ~0ull - i;
  egr_cgroup_val v0{};
  v0.kind = EGR_CG_CONTAINED_ROOT;
  std::vector<egr_cgroup_val> vals(ids.size(), v0);
  LIBBPF_OPTS(bpf_map_batch_opts, batch);  // elem_flags: the kernel takes only BPF_F_LOCK here
  __u32 count = static_cast<__u32>(ids.size());
  ASSERT_NE(bpf_map_update_batch(fd, ids.data(), vals.data(), &count, &batch), 0)
      << "the map took one more than EGR_MAX_CGROUPS";
  ASSERT_EQ(errno, E2BIG) << std::strerror(errno);
  const uint64_t filled = count;  // the kernel reports how many it took before the error
  ASSERT_EQ(filled, static_cast<uint64_t>(EGR_MAX_CGROUPS));
  // The policy headers counted in the kernel's map, not through `status`:
  // with the cgroup table full its JSON is 9 MB, and parsing it twice at the
  // test bodies' -O0 was most of this test (~50 s in an emulated guest).
  const int policy_fd = bpf_obj_get((inst.pins() + "/" EGR_MAP_POLICY).c_str());
  ASSERT_GE(policy_fd, 0) << std::strerror(errno);
  auto policies = [&] {
    size_t n = 0;
    uint32_t key = 0, next = 0;
    for (const void* cur = nullptr; bpf_map_get_next_key(policy_fd, cur, &next) == 0; cur = &key, ++n) key = next;
    return n;
  };
  const size_t policies_before = policies();

  RunResult r = inst.Ctl({"sandbox", "add", "--cgroup", *cg, "--egress", kPublicA4});
  ExpectSystemFailure(r, EGR_MAP_CGROUPS);
  EXPECT_EQ(policies(), policies_before) << "the policy written aside must be released";
  close(policy_fd);

  count = static_cast<__u32>(filled);
  EXPECT_EQ(bpf_map_delete_batch(fd, ids.data(), &count, nullptr), 0) << std::strerror(errno);
  close(fd);
}

TEST_F(Failures, AMissingPinIsASystemFailureNamingThePin) {
  Instance inst("pin");
  ASSERT_EQ(inst.Ctl({"load"}).exit_code, 0);
  auto cg = Shared().lab().MakeCgroup("missing-pin");
  ASSERT_TRUE(cg.ok()) << cg.status();
  const std::string pin = inst.pins() + "/" EGR_MAP_ALLOW6;
  ASSERT_EQ(unlink(pin.c_str()), 0) << std::strerror(errno);
  RunResult r = inst.Ctl({"sandbox", "add", "--cgroup", *cg, "--egress", kPublicA6});
  ExpectSystemFailure(r, pin);
}

TEST_F(Failures, ACgroupThatDoesNotExistIsBadInputAndChangesNothing) {
  Instance inst("badcg");
  ASSERT_EQ(inst.Ctl({"load"}).exit_code, 0);
  const std::string missing = Lab::cgroup2_root() + "/egressd-no-such-cgroup";
  RunResult r = inst.Ctl({"sandbox", "add", "--cgroup", missing, "--egress", kPublicA4});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "--cgroup")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, missing)) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "nothing was changed")) << r.err;
  EXPECT_TRUE(inst.Status()["cgroups"].empty());
}

TEST_F(Failures, SigtermBetweenRegistrationAndTheCommandsStartLeavesNothingRegistered) {
  Instance inst("sigterm");
  ASSERT_EQ(inst.Ctl({"load"}).exit_code, 0);
  const std::string cg_parent = Lab::cgroup2_root() + "/egressd";
  const auto runs_before = DirNames(cg_parent, "run-");
  // The signal arrives right after the sandbox is registered, before its
  // command runs: egressctl holds it, forwards it to the command, cleans up.
  RunResult r = inst.Ctl({"run", "--egress", kPublicA4, "--", "sleep", "30"},
                         {{"EGRESSD_CRASH_AT", "run:registered=SIGTERM"}});
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.Describe();
  EXPECT_TRUE(inst.Status()["cgroups"].empty()) << "a registered cgroup was left behind";
  EXPECT_EQ(DirNames(cg_parent, "run-"), runs_before) << "the sandbox cgroup was left behind";
}

TEST_F(Failures, ASelfTestKilledMidRunIsCollectedAndDoesNotBlockUnload) {
  Instance inst("selftest");
  const auto before = DirNames(Lab::cgroup2_root(), "egressd-selftest-");
  RunResult killed = inst.Ctl({"load"}, {{"EGRESSD_CRASH_AT", "selftest:registered"}});
  ASSERT_EQ(killed.exit_code, -SIGKILL) << killed.Describe();
  std::vector<std::string> left;  // the dead self-test's cgroup (and perhaps a live one elsewhere)
  for (const auto& d : DirNames(Lab::cgroup2_root(), "egressd-selftest-")) {
    if (std::find(before.begin(), before.end(), d) == before.end()) left.push_back(d);
  }
  ASSERT_FALSE(left.empty()) << "the killed self-test left no cgroup: was it killed mid-run?";
  auto st = inst.Status();
  ASSERT_EQ(st["cgroups"].size(), 1u) << "the dead self-test's cgroup should still be registered: " << st.dump();
  // unload without --force: the dead self-test is not a sandbox.
  RunResult unload = inst.Ctl({"unload"});
  EXPECT_EQ(unload.exit_code, 0) << unload.Describe();
  EXPECT_FALSE(Exists(inst.pins()));
  for (const auto& d : left) EXPECT_FALSE(Exists(Lab::cgroup2_root() + "/" + d)) << d << " left behind";
}

TEST_F(Failures, ASelfTestKilledMidRunIsCollectedByTheNextLoad) {
  Instance inst("selftest2");
  ASSERT_EQ(inst.Ctl({"load"}, {{"EGRESSD_CRASH_AT", "selftest:registered"}}).exit_code, -SIGKILL);
  RunResult load = inst.Ctl({"load"});
  EXPECT_EQ(load.exit_code, 0) << load.Describe();
  EXPECT_TRUE(inst.Status()["cgroups"].empty()) << inst.Status().dump();
  auto pol = inst.Status()["policies"];
  EXPECT_TRUE(pol.empty()) << "the self-test's deny-all policy must be released: " << pol.dump();
}

}  // namespace
}  // namespace egressd::test
