// Issue 7: the registry's writer is SIGKILLed after each step of register,
// flip and remove (EGRESSD_CRASH_AT), and the next `egressctl load` reaches a
// consistent state (records <=> sandbox entries, no orphan keys, right
// refcounts) in which the sandbox is judged by its old or its new policy,
// never by anything more open.  Each crash is first shown to leave damage
// where it should (status --json is inconsistent), so the repair is real.
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "egressd_env.h"
#include "userspace/common/node.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;
using nlohmann::json;
using std::chrono::milliseconds;

// An instance of this binary's own, so its records and maps hold only what
// these tests put there.
class CrashConsistency : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!RunningAsRootWithSysAdmin()) return;
    dirs_ = Shared().Other("crash");  // unloaded and removed at exit, even after a failure
    pins_ = dirs_.pin_root;
    RunResult r = Ctl({"load"});
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
  }
  static void TearDownTestSuite() {
    if (pins_.empty()) return;
    Ctl({"unload", "--force"});
    lab::Run({.argv = {"rm", "-rf", "--", dirs_.runtime_dir}});
  }
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    Shared().lab().ResetCounters();
  }

  static RunResult Ctl(std::vector<std::string> args, const std::string& crash_at = "") {
    RunSpec spec;
    // As Egressd::CtlAt runs it (egressd's operator, in the node netns).
    spec.argv = {BinaryPath("egressctl"), "--pin-root", pins_, "--runtime-dir", dirs_.runtime_dir};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.netns = Shared().lab().node_netns();
    spec.env["EGRESSD_NODE_NETNS"] = Shared().lab().node_netns();
    if (!crash_at.empty()) spec.env["EGRESSD_CRASH_AT"] = crash_at;
    spec.timeout = milliseconds(static_cast<int64_t>(30000 * TimeScale()));  // a load verifies every program
    return lab::Run(spec);
  }
  static json Status() {
    RunResult r = Ctl({"status", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    return json::parse(r.out, nullptr, false);
  }
  // The sandbox entry and the record of cgroup `id` (null when absent).
  static json EntryOf(const json& st, uint64_t id) {
    for (const auto& c : st["cgroups"]) {
      if (c["cgroup_id"] == id) return c;
    }
    return nullptr;
  }
  static json RecordOf(const json& st, uint64_t id) {
    for (const auto& r : st["records"]) {
      if (r["cgroup_id"] == id) return r;
    }
    return nullptr;
  }
  // "A" or "B": which lab host the probe in `cg` reaches; "open" if both,
  // "none" if neither.  The third host, allowed by neither policy, must never
  // be reached while the sandbox is registered.
  std::string Reaches(const std::string& cg) {
    auto ok = [&](const char* host) {
      RunResult r = Shared().lab().Probe({"tcp", host, "80"}, cg, /*hostile=*/true);
      auto lines = Lines(r);
      return lines.size() == 1 && Ok(lines[0]);
    };
    bool a = ok(kPublicA4), b = ok(kPublicB4);
    return a && b ? "open" : a ? "A" : b ? "B" : "none";
  }

  static InstanceDirs dirs_;
  static std::string pins_;
};
InstanceDirs CrashConsistency::dirs_;
std::string CrashConsistency::pins_;

const std::vector<std::string> kOld = {"--egress", kPublicA4, "--label", "task=crash", "--label", "run=old"};
const std::vector<std::string> kNew = {"--egress", kPublicB4, "--label", "task=crash", "--label", "run=new"};

struct Case {
  std::string op;     // "register" | "flip" | "remove"
  std::string point;  // EGRESSD_CRASH_AT
  bool damage;        // the crash leaves something for load to repair
  std::string after;  // what the sandbox is judged by after load: "old" | "new" | "none"
};

std::string Name(const testing::TestParamInfo<Case>& i) {
  std::string n = i.param.op + "_" + i.param.point;
  for (char& c : n) {
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return n;
}

class CrashAt : public CrashConsistency, public testing::WithParamInterface<Case> {};

TEST_P(CrashAt, LoadRepairsAndNeverOpens) {
  const Case& c = GetParam();
  auto cg = Shared().lab().MakeCgroup("crash-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                      "-" + Name({c, 0}));
  ASSERT_TRUE(cg.ok()) << cg.status();
  auto id = CgroupIdOf(*cg);
  ASSERT_TRUE(id.ok());

  std::vector<std::string> args;
  if (c.op != "register") {
    args = {"sandbox", "add", "--cgroup", *cg};
    args.insert(args.end(), kOld.begin(), kOld.end());
    ASSERT_EQ(Ctl(args).exit_code, 0);
    ASSERT_EQ(Reaches(*cg), "A");
  }
  if (c.op == "remove") {
    args = {"sandbox", "remove", "--cgroup", *cg};
  } else {
    args = {"sandbox", "add", "--cgroup", *cg};
    args.insert(args.end(), kNew.begin(), kNew.end());
  }
  RunResult crashed = Ctl(args, c.point);
  ASSERT_EQ(crashed.exit_code, -SIGKILL) << "the crash point did not fire: " << crashed.Describe();

  json before = Status();
  ASSERT_FALSE(before.is_discarded());
  EXPECT_EQ(before["consistency"]["consistent"].get<bool>(), !c.damage) << before["consistency"].dump();
  // Between the crash and the repair the sandbox is still judged by one
  // whole policy (or, for a remove, by none).
  const std::string mid = Reaches(*cg);
  EXPECT_TRUE(mid == "A" || mid == "B" || (c.op != "flip" && mid == "open")) << mid;

  RunResult load = Ctl({"load"});
  ASSERT_EQ(load.exit_code, 0) << load.Describe();
  EXPECT_EQ(absl::StrContains(load.out, "reconciled:"), c.damage) << load.out;

  json st = Status();
  EXPECT_TRUE(st["consistency"]["consistent"].get<bool>()) << st["consistency"].dump();
  EXPECT_EQ(st["consistency"]["orphan_keys"], 0);
  for (const auto& p : st["policies"]) {
    uint32_t refs = 0;
    for (const auto& e : st["cgroups"]) refs += e["policy_id"] == p["policy_id"];
    EXPECT_EQ(p["refcount"].get<uint32_t>(), refs) << p.dump();
  }

  json entry = EntryOf(st, *id), record = RecordOf(st, *id);
  const std::string now = Reaches(*cg);
  if (c.after == "none") {
    EXPECT_TRUE(entry.is_null()) << entry.dump();
    EXPECT_TRUE(record.is_null()) << record.dump();
    EXPECT_EQ(now, "open");
  } else {
    ASSERT_FALSE(entry.is_null());
    ASSERT_FALSE(record.is_null());
    EXPECT_EQ(record["current"]["policy_id"], entry["policy_id"]);
    // The record names what is enforced, and the probe agrees.
    const bool old = c.after == "old";
    EXPECT_EQ(now, old ? "A" : "B");
    EXPECT_EQ(record["current"]["policy"]["allowed"][0]["cidr"],
              std::string(old ? kPublicA4 : kPublicB4) + "/32")
        << record.dump();
    EXPECT_EQ(record["labels"]["run"], old ? "old" : "new") << record.dump();
    EXPECT_EQ(record["cgroup_path"], *cg);
  }
  EXPECT_EQ(Shared().lab().TcpAccepts(kPublicC4, 80), 0u);

  // The repaired state is an ordinary one: the sandbox can be removed, and
  // nothing of it is left.
  EXPECT_EQ(Ctl({"sandbox", "remove", "--cgroup", *cg}).exit_code, 0);
  json end = Status();
  EXPECT_TRUE(end["consistency"]["consistent"].get<bool>()) << end["consistency"].dump();
  EXPECT_TRUE(RecordOf(end, *id).is_null());
  EXPECT_EQ(end["policies"].size(), 0u) << end["policies"].dump();
  rmdir(cg->c_str());
}


// The other cases `load` reconciles (control/reconcile.h), each made by hand.
TEST_F(CrashConsistency, LoadReconcilesEntriesWithoutRecordsTamperedRecordsAndDeadCgroups) {
  const std::string records = dirs_.runtime_dir + "/sandboxes/";
  auto make = [&](const char* name, const char* host) {
    auto cg = Shared().lab().MakeCgroup(std::string("reconcile-") + name);
    EXPECT_TRUE(cg.ok());
    EXPECT_EQ(Ctl({"sandbox", "add", "--cgroup", *cg, "--egress", host, "--label", std::string("pod=") + name})
                  .exit_code,
              0);
    return std::make_pair(*cg, *CgroupIdOf(*cg));
  };
  auto [lost, lost_id] = make("lost", kPublicA4);      // its record is deleted
  auto [twin, twin_id] = make("twin", kPublicA4);      // shares lost's policy
  auto [forged, forged_id] = make("forged", kPublicB4);  // its record is edited
  auto [dead, dead_id] = make("dead", kPublicB4);      // its cgroup is removed
  auto [garbled, garbled_id] = make("garbled", kPublicF4);  // its record does not parse
  ASSERT_EQ(EntryOf(Status(), lost_id)["policy_id"], EntryOf(Status(), twin_id)["policy_id"]);

  ASSERT_EQ(unlink((records + std::to_string(lost_id) + ".json").c_str()), 0);
  {
    std::string path = records + std::to_string(forged_id) + ".json";
    std::ifstream in(path);
    json r = json::parse(in);
    r["current"]["policy"]["allowed"][0]["cidr"] = std::string(kPublicC4) + "/32";  // "more open"
    std::ofstream(path) << r.dump();
  }
  ASSERT_EQ(rmdir(dead.c_str()), 0);
  std::ofstream(records + std::to_string(garbled_id) + ".json") << "{\"version\": 1, \"cgroup_id\": ";
  // A record that does not parse stops no one else's register.
  auto other = Shared().lab().MakeCgroup("reconcile-other");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(Ctl({"sandbox", "add", "--cgroup", *other, "--egress", kPublicF4}).exit_code, 0);
  EXPECT_EQ(Ctl({"sandbox", "remove", "--cgroup", *other}).exit_code, 0);
  rmdir(other->c_str());
  json before = Status();
  EXPECT_EQ(before["consistency"]["corrupt_records"], 1);
  EXPECT_EQ(before["consistency"]["entries_without_record"], 2);
  EXPECT_EQ(before["consistency"]["records_not_in_force"], 1);

  RunResult load = Ctl({"load"});
  ASSERT_EQ(load.exit_code, 0) << load.Describe();
  EXPECT_TRUE(absl::StrContains(load.out, "1 repaired, 2 created; 1 dead cgroup(s)")) << load.out;
  EXPECT_TRUE(absl::StrContains(load.out, "1 corrupt record(s) set aside")) << load.out;
  json st = Status();
  EXPECT_TRUE(st["consistency"]["consistent"].get<bool>()) << st["consistency"].dump();
  // The entry without a record keeps its enforcement and gets its twin's
  // policy (same id) for names; path and labels are unknown.
  json r = RecordOf(st, lost_id);
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r["current"]["policy"]["allowed"][0]["cidr"], std::string(kPublicA4) + "/32") << r.dump();
  EXPECT_EQ(r["cgroup_path"], "");
  EXPECT_EQ(Reaches(lost), "A");
  // The forged record no longer claims a policy (no names); the maps still
  // enforce the real one.
  r = RecordOf(st, forged_id);
  ASSERT_FALSE(r.is_null());
  EXPECT_TRUE(r["current"]["policy"].is_null()) << r.dump();
  EXPECT_EQ(r["labels"]["pod"], "forged");
  EXPECT_EQ(Reaches(forged), "B");
  EXPECT_EQ(Shared().lab().TcpAccepts(kPublicC4, 80), 0u);
  // The garbled record is set aside and replaced by one from the maps.
  struct stat aside {};
  EXPECT_EQ(stat((records + std::to_string(garbled_id) + ".json.corrupt").c_str(), &aside), 0);
  r = RecordOf(st, garbled_id);
  ASSERT_FALSE(r.is_null());
  EXPECT_TRUE(r["current"]["policy"].is_null()) << r.dump();
  EXPECT_EQ(Reaches(garbled), "none") << "still judged by its policy (F only)";
  // The dead cgroup's entry and record are gone.
  EXPECT_TRUE(EntryOf(st, dead_id).is_null());
  EXPECT_TRUE(RecordOf(st, dead_id).is_null());

  for (const std::string* cg : {&lost, &twin, &forged, &garbled}) {
    EXPECT_EQ(Ctl({"sandbox", "remove", "--cgroup", *cg}).exit_code, 0);
    rmdir(cg->c_str());
  }
  EXPECT_EQ(Status()["policies"].size(), 0u);
}

TEST_F(CrashConsistency, TheRecordHoldsTheNetworkNamespaceAndABadOneIsExit2) {
  auto cg = Shared().lab().MakeCgroup("netns-record");
  ASSERT_TRUE(cg.ok());
  const std::string ns = Shared().lab().client_netns();
  RunResult bad = Ctl({"sandbox", "add", "--cgroup", *cg, "--egress", kPublicA4, "--netns", "/etc/hostname"});
  EXPECT_EQ(bad.exit_code, 2) << bad.Describe();
  EXPECT_TRUE(absl::StrContains(bad.err, "/etc/hostname")) << bad.err;
  EXPECT_TRUE(EntryOf(Status(), *CgroupIdOf(*cg)).is_null()) << "a bad --netns changed something";
  ASSERT_EQ(Ctl({"sandbox", "add", "--cgroup", *cg, "--egress", kPublicA4, "--netns", ns}).exit_code, 0);
  struct stat st {};
  ASSERT_EQ(stat(ns.c_str(), &st), 0);
  json r = RecordOf(Status(), *CgroupIdOf(*cg));
  EXPECT_EQ(r["netns_inode"], st.st_ino) << r.dump();
  EXPECT_NE(r["netns_cookie"], 0) << r.dump();
  EXPECT_EQ(Ctl({"sandbox", "remove", "--cgroup", *cg}).exit_code, 0);
  rmdir(cg->c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Points, CrashAt,
    testing::Values(
        // A register that died never registered: its record and policy go.
        Case{"register", "register:after-record", true, "none"},
        Case{"register", "register:after-policy-write", true, "none"},
        Case{"register", "register:after-flip", false, "new"},
        // A flip that died before the flip is still the old policy (the
        // record goes back to it); after it, the new one (the old policy's
        // leaked reference, header or keys are collected).
        Case{"flip", "flip:after-record", true, "old"},
        Case{"flip", "flip:after-policy-write", true, "old"},
        Case{"flip", "flip:after-flip", true, "new"},
        Case{"flip", "release:after-header", true, "new"},
        Case{"flip", "flip:after-release", false, "new"},
        // A remove that died after unregistering is finished by load.
        Case{"remove", "remove:after-unregister", true, "none"},
        Case{"remove", "release:after-header", true, "none"},
        Case{"remove", "remove:after-release", true, "none"}),
    Name);

}  // namespace
}  // namespace egressd::test
