// Issue 17: a sandbox registered by its interface alone (no cgroup), with
// `egressctl sandbox add --interface IF|--interface-netns NS` and no
// --cgroup.  Its id is its interface's (maps/if_sandbox_table.h: bit 63 set,
// the ifindex below), which no cgroup id can be; its record, status, removal
// and the reconcile of a vanished interface work by that id.  The pod's
// processes are in no registered cgroup (a gVisor netstack or a guest kernel
// stands behind the veth); "nothing arrived" is counted at the lab hosts after
// a Drain, next to an allowed destination that did arrive, and the tc
// program's drop counter shows the frames reached the hook.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include <net/if.h>
#include <fcntl.h>
#include <sched.h>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "egressd_env.h"
#include "maps/if_sandbox_table.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;

std::set<std::string> RecordFiles() {
  std::set<std::string> out;
  const std::string dir = Shared().runtime_dir() + "/sandboxes";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') out.insert(e->d_name);
    }
    closedir(d);
  }
  return out;
}

std::string RecordPath(uint64_t id) { return absl::StrCat(Shared().runtime_dir(), "/sandboxes/", id, ".json"); }


uint64_t TcDrops() {
  auto s = maps::ReadTcStats(Shared().pin_root());
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? (*s)[EGR_TC_STAT_DROP] : 0;
}

// The MAC of `pod`'s router: the node end of its veth (a packet socket's
// frames are addressed to it).
std::string RouterMac(const Pod& pod) {
  RunResult r = Run({.argv = {"nsenter", "--net=" + Shared().lab().node_netns(), "ip", "-j", "link", "show",
                              pod.node_ifname}});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (!j.is_array() || j.empty() || !j[0].contains("address")) return "";
  return j[0]["address"].get<std::string>();
}

nlohmann::json StatusJson() {
  RunResult r = Shared().Ctl({"status", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  return nlohmann::json::parse(r.out, nullptr, false);
}

class TcInterfaceOnly : public testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    lab().ResetCounters();
  }
  void TearDown() override {
    for (const auto& ifname : registered_) Shared().Ctl({"sandbox", "remove", "--interface", ifname});
    registered_.clear();
  }
  Lab& lab() { return Shared().lab(); }
  // A pod of this test's own (pods live as long as the lab).
  const Pod& NewPod() {
    auto p = lab().AddPod();
    EXPECT_TRUE(p.ok()) << p.status();
    return **p;
  }
  // sandbox add ARGS (no --cgroup unless given), the lab's Drain markers
  // allowed (as in tc_veth_test: every packet of the pod is the sandbox's).
  RunResult Add(std::vector<std::string> args, const std::string& remove_as = "") {
    std::vector<std::string> argv = {"sandbox", "add"};
    argv.insert(argv.end(), args.begin(), args.end());
    for (const char* marker : {kWorldLinkV4, kWorldLinkV6}) argv.insert(argv.end(), {"--egress", marker});
    RunResult r = Shared().Ctl(argv);
    if (r.exit_code == 0 && !remove_as.empty()) registered_.push_back(remove_as);
    return r;
  }
  std::vector<ProbeLine> InPod(const Pod& pod, const std::vector<std::string>& args) {
    RunResult r = lab().ProbeIn(pod.netns, args, "", /*hostile=*/true);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    last_ = r.Describe();
    return Lines(r);
  }
  std::vector<std::string> registered_;
  std::string last_;
};

TEST_F(TcInterfaceOnly, BadInputIsRefusedNamingTheValueAndNothingChanges) {
  const Pod& pod = NewPod();
  auto cg = lab().MakeCgroup("ifonly-bad");
  ASSERT_TRUE(cg.ok()) << cg.status();
  const std::set<std::string> before = RecordFiles();
  struct Case {
    std::vector<std::string> args;
    std::string names;
  };
  const std::vector<Case> cases = {
      {{"--egress", kPublicA4}, "--cgroup, --interface or --interface-netns is required"},
      {{"--egress", kPublicA4, "--interface", "lo"}, "--interface \"lo\""},
      {{"--egress", kPublicA4, "--interface", "egl-nosuch0"}, "--interface \"egl-nosuch0\""},
      {{"--egress", kPublicA4, "--interface-netns", "/proc/self/status"}, "--interface-netns \"/proc/self/status\""},
      {{"--egress", kPublicA4, "--interface", pod.node_ifname, "--interface-netns", pod.netns}, "excludes"},
      {{"--egress", kPublicA4, "--interface", pod.node_ifname, "--sandbox-runtime", "nosuch"},
       "--sandbox-runtime \"nosuch\""},
      // The runtime hint: gVisor sends from its own stack, a cgroup-only
      // registration of it would not hold (gvisor_test.cc shows it).
      {{"--egress", kPublicA4, "--cgroup", *cg, "--sandbox-runtime", "gvisor"}, "--sandbox-runtime \"gvisor\""},
      {{"--egress", kPublicA4, "--cgroup", *cg, "--sandbox-runtime", "kata"}, "--interface or --interface-netns"},
  };
  for (const auto& c : cases) {
    RunResult r = Add(c.args);
    EXPECT_EQ(r.exit_code, 2) << r.Describe();
    EXPECT_NE(r.err.find(c.names), std::string::npos) << "should name " << c.names << ": " << r.Describe();
  }
  EXPECT_EQ(RecordFiles(), before) << "a refused registration wrote a record";
  // Nothing attached either: the pod is free.
  auto l = InPod(pod, {"tcp", kPublicB4, "80"});
  ASSERT_EQ(l.size(), 1u) << last_;
  EXPECT_TRUE(Ok(l[0])) << last_;
  // The runtime hint with an interface is fine, with or without a cgroup.
  RunResult ok = Add({"--egress", kPublicA4, "--cgroup", *cg, "--interface", pod.node_ifname, "--sandbox-runtime",
                      "gvisor"},
                     pod.node_ifname);
  EXPECT_EQ(ok.exit_code, 0) << ok.Describe();
}

// Registered by interface only: judged at its veth (v4 and v6, packet-socket
// frames too), its id the interface's, its record named by it, its status
// saying so; registered again it flips; another sandbox cannot take its
// interface; removed by interface, the pod is free again.
TEST_F(TcInterfaceOnly, SandboxWithoutCgroupIsJudgedAtItsVethAndRemovedByInterface) {
  const Pod& pod = NewPod();
  const uint32_t ifindex = Shared().lab().NodeIfindex(pod.node_ifname);
  ASSERT_NE(ifindex, 0u);
  const uint64_t id = maps::InterfaceSandboxId(ifindex);
  // Positive control: unregistered, the pod reaches the hosts the policy denies.
  auto free_before = InPod(pod, {"tcp", kPublicB4, "80"});
  ASSERT_EQ(free_before.size(), 1u) << last_;
  ASSERT_TRUE(Ok(free_before[0])) << last_;
  lab().ResetCounters();

  RunResult add = Add({"--egress", kPublicA4, "--egress", kPublicA6, "--interface", pod.node_ifname,
                       "--label", "pod=ifonly"},
                      pod.node_ifname);
  ASSERT_EQ(add.exit_code, 0) << add.Describe();
  EXPECT_EQ(access(RecordPath(id).c_str(), F_OK), 0) << "the record is named by the interface's id " << id;
  nlohmann::json st = StatusJson();
  bool listed = false;
  for (const auto& c : st["cgroups"]) listed |= c["cgroup_id"].get<uint64_t>() == id && c.value("interface_only", false);
  EXPECT_TRUE(listed) << st["cgroups"].dump();
  EXPECT_TRUE(st["consistency"]["consistent"].get<bool>()) << st["consistency"].dump();

  const std::string mac = RouterMac(pod);
  ASSERT_FALSE(mac.empty());
  const uint64_t drops0 = TcDrops();
  auto l = InPod(pod, {"tcp", kPublicA4, "80", "--then", "tcp", kPublicA6, "443", "--then", "tcp", kPublicB4, "80",
                       "--timeout-ms", "300", "--then", "raw-icmp", kImds4, "--then", "raw-udp", kPrivate10, "7000",
                       "--then", "udp-sendto", kDns4, "7000", "--then", "packet-udp", kPublicB4, "7001", mac,
                       "--then", "packet-udp", kPublicA4, "7000", mac});
  ASSERT_EQ(l.size(), 8u) << last_;
  EXPECT_TRUE(Ok(l[0])) << last_;
  EXPECT_TRUE(Ok(l[1])) << last_;
  EXPECT_FALSE(Ok(l[2])) << last_;
  if (absl::Status d = lab().Drain(pod.netns); !d.ok()) FAIL() << d;
  EXPECT_EQ(lab().TcpAccepts(kPublicA4, 80), 1u) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(kPublicA6, 443), 1u) << lab().CountersSummary();
  EXPECT_EQ(lab().UdpDatagrams(kPublicA4, 7000), 1u) << "a packet socket's allowed frame: " << lab().CountersSummary();
  for (const char* denied : {kPublicB4, kImds4, kPrivate10, kDns4}) {
    EXPECT_EQ(lab().PacketsTo(denied), 0u) << denied << ": " << lab().CountersSummary();
  }
  EXPECT_GE(TcDrops() - drops0, 5u) << "the denied frames reached the tc hook";

  // Registered again: the same sandbox (same id, same record) flips.
  ASSERT_EQ(Add({"--egress", kPublicB4, "--interface-netns", pod.netns}).exit_code, 0) << last_;
  EXPECT_EQ(RecordFiles().count(absl::StrCat(id, ".json")), 1u);
  lab().ResetCounters();
  auto f = InPod(pod, {"tcp", kPublicB4, "80", "--then", "tcp", kPublicA4, "80", "--timeout-ms", "300"});
  ASSERT_EQ(f.size(), 2u) << last_;
  EXPECT_TRUE(Ok(f[0])) << last_;
  EXPECT_FALSE(Ok(f[1])) << last_;

  // One interface, one sandbox: a cgroup sandbox cannot take it.
  auto cg = lab().MakeCgroup("ifonly-taken");
  ASSERT_TRUE(cg.ok());
  RunResult taken = Add({"--egress", kPublicA4, "--cgroup", *cg, "--interface", pod.node_ifname});
  EXPECT_NE(taken.exit_code, 0) << taken.Describe();
  EXPECT_NE(taken.err.find(absl::StrCat("is judged for sandbox ", id)), std::string::npos) << taken.Describe();
  struct stat sb {};
  ASSERT_EQ(stat(cg->c_str(), &sb), 0);
  EXPECT_NE(access(RecordPath(sb.st_ino).c_str(), F_OK), 0) << "the refused cgroup got a record";

  RunResult rm = Shared().Ctl({"sandbox", "remove", "--interface", pod.node_ifname});
  ASSERT_EQ(rm.exit_code, 0) << rm.Describe();
  registered_.clear();
  EXPECT_NE(access(RecordPath(id).c_str(), F_OK), 0);
  RunResult again = Shared().Ctl({"sandbox", "remove", "--interface", pod.node_ifname});
  EXPECT_EQ(again.exit_code, 2) << again.Describe();
  auto free_after = InPod(pod, {"tcp", kPublicA4, "80"});
  ASSERT_EQ(free_after.size(), 1u) << last_;
  EXPECT_TRUE(Ok(free_after[0])) << "unregistered, the pod is free: " << last_;

  // The audit trail names it by its id and interface, with no cgroup.
  RunResult a = Shared().Ctl({"audit"});
  ASSERT_EQ(a.exit_code, 0) << a.Describe();
  int registered = 0, removed = 0, applied = 0;
  for (const auto& line : absl::StrSplit(a.out, '\n', absl::SkipEmpty())) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("sandbox") || !j["sandbox"].is_object()) continue;
    if (j["sandbox"].value("id", uint64_t{0}) != id) continue;
    if (j.value("type", "") == "policy" && j.value("event", "") == "applied") ++applied;
    if (j.value("type", "") != "sandbox") continue;
    EXPECT_EQ(j["sandbox"].value("interface", ""), pod.node_ifname) << j.dump();
    EXPECT_FALSE(j["sandbox"].contains("cgroup")) << j.dump();
    // The first registration's labels (the flip gave none).
    if (registered == 0 && j.value("event", "") == "registered") {
      EXPECT_EQ(j["sandbox"].value("labels", nlohmann::json::object()).value("pod", ""), "ifonly") << j.dump();
    }
    registered += j.value("event", "") == "registered";
    removed += j.value("event", "") == "removed";
  }
  EXPECT_EQ(registered, 2) << "sandbox add says registered at each add: " << a.out;
  EXPECT_EQ(removed, 1) << a.out;
  EXPECT_EQ(applied, 2) << "the registration and its flip: " << a.out;
}

// The packet-socket rule (lib/lsm_socket.h) is a cgroup's: where the bpf LSM
// is not in force a cgroup registration asking for it is refused (exit 3),
// an interface-only one is not (its frames are judged at the veth, a packet
// socket's included, and it has no cgroup the rule could hold).
TEST_F(TcInterfaceOnly, InterfaceOnlySandboxNeedsNoSocketContainment) {
  const Pod& pod = NewPod();
  nlohmann::json st = StatusJson();
  auto cg = lab().MakeCgroup("ifonly-contain");
  ASSERT_TRUE(cg.ok());
  if (!st.value("socket_containment", true)) {
    // Positive control: this node cannot contain a cgroup's packet sockets.
    RunResult refused = Add({"--egress", kPublicA4, "--cgroup", *cg, "--require-socket-containment"});
    EXPECT_EQ(refused.exit_code, 3) << refused.Describe();
  }
  RunResult add = Add({"--egress", kPublicA4, "--interface", pod.node_ifname, "--require-socket-containment"},
                      pod.node_ifname);
  ASSERT_EQ(add.exit_code, 0) << add.Describe();
  const std::string mac = RouterMac(pod);
  ASSERT_FALSE(mac.empty());
  auto l = InPod(pod, {"packet-udp", kImds4, "7000", mac, "--then", "packet-udp", kPublicA4, "7001", mac});
  ASSERT_EQ(l.size(), 2u) << last_;
  for (auto& line : l) EXPECT_TRUE(Ok(line)) << "the packet socket may send (no cgroup rule): " << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().UdpDatagrams(kPublicA4, 7001) == 1; })) << lab().CountersSummary();
  if (absl::Status d = lab().Drain(pod.netns); !d.ok()) FAIL() << d;
  EXPECT_EQ(lab().PacketsTo(kImds4), 0u) << "judged at the veth: " << lab().CountersSummary();
}

// A sandbox whose interface vanished (its pod went) is collected by the
// next load's reconcile, its entries with it; a live one stays.
TEST_F(TcInterfaceOnly, VanishedInterfaceIsCollectedByReconcile) {
  const Pod& pod = NewPod();
  const std::string ifname = absl::StrCat("egi", getpid() % 1000000, "a");
  const std::string peer = absl::StrCat("egi", getpid() % 1000000, "b");
  RunResult mk = lab::Run({.argv = {"nsenter", "--net=" + lab().node_netns(), "ip", "link", "add", ifname, "type", "veth", "peer",
                               "name", peer}});
  ASSERT_EQ(mk.exit_code, 0) << mk.Describe();
  ASSERT_EQ(lab::Run({.argv = {"nsenter", "--net=" + lab().node_netns(), "ip", "link", "set", ifname, "up"}}).exit_code, 0);
  // Its "pod" end has an address (no host route names one): a registration
  // whose pod's addresses are unknown is refused (tc_pod_identity_test).
  ASSERT_EQ(lab::Run({.argv = {"nsenter", "--net=" + lab().node_netns(), "ip", "addr", "add", "10.244.251.9/32", "dev",
                               peer}})
                .exit_code,
            0);
  const uint32_t gone_ifindex = Shared().lab().NodeIfindex(ifname);
  ASSERT_NE(gone_ifindex, 0u);
  const uint64_t gone = maps::InterfaceSandboxId(gone_ifindex);
  const uint64_t live = maps::InterfaceSandboxId(Shared().lab().NodeIfindex(pod.node_ifname));
  ASSERT_EQ(Add({"--egress", kPublicA4, "--interface", ifname}, ifname).exit_code, 0);
  ASSERT_EQ(Add({"--egress", kPublicA4, "--interface", pod.node_ifname}, pod.node_ifname).exit_code, 0);
  ASSERT_EQ(access(RecordPath(gone).c_str(), F_OK), 0);

  ASSERT_EQ(lab::Run({.argv = {"nsenter", "--net=" + lab().node_netns(), "ip", "link", "del", ifname}}).exit_code, 0);
  RunResult load = Shared().Ctl({"load"});
  ASSERT_EQ(load.exit_code, 0) << load.Describe();
  EXPECT_NE(load.out.find("1 sandbox(es) of vanished interfaces collected"), std::string::npos) << load.Describe();
  EXPECT_NE(access(RecordPath(gone).c_str(), F_OK), 0) << "the vanished interface's record stayed";
  EXPECT_EQ(access(RecordPath(live).c_str(), F_OK), 0) << "a live interface's sandbox was collected";
  auto ifs = maps::IfSandboxTable::Open(Shared().pin_root());
  ASSERT_TRUE(ifs.ok()) << ifs.status();
  auto e = ifs->Get(gone_ifindex);
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->has_value()) << "its egr_ifsbox_v1 entry stayed";
  nlohmann::json st = StatusJson();
  bool listed = false;
  for (const auto& c : st["cgroups"]) listed |= c["cgroup_id"].get<uint64_t>() == gone;
  EXPECT_FALSE(listed) << st["cgroups"].dump();
  EXPECT_TRUE(st["consistency"]["consistent"].get<bool>()) << st["consistency"].dump();
  // The live one still judges its pod.
  auto l = InPod(pod, {"tcp", kPublicA4, "80", "--then", "tcp", kPublicB4, "80", "--timeout-ms", "300"});
  ASSERT_EQ(l.size(), 2u) << last_;
  EXPECT_TRUE(Ok(l[0])) << last_;
  EXPECT_FALSE(Ok(l[1])) << last_;
  registered_ = {pod.node_ifname};
}

}  // namespace
}  // namespace egressd::test
