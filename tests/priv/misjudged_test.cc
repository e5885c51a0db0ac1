// Issue 9, items 1, 2, 3 and 8: destinations and sockets the kernel programs
// misjudged.  Each test is the attack, proven at the lab host (or at a
// listener on the node's loopback) next to a positive control on the same
// path.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "egressd_env.h"
#include "loopback_listener.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;  // addresses, Run, RunSpec, BinaryPath

class Misjudged : public testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    lab().ResetCounters();
  }
  Lab& lab() { return Shared().lab(); }
  // egressd-probe in `netns`, in cgroup `cg` ("" = none), hostile.
  std::vector<ProbeLine> ProbeAt(const std::string& netns, const std::string& cg,
                                 const std::vector<std::string>& args) {
    RunResult r = lab().ProbeIn(netns, args, cg, /*hostile=*/true);
    last_ = r.Describe();
    return Lines(r);
  }
  std::string last_;
};

// A sysctl of the node's, restored when the test ends.
class ScopedSysctl {
 public:
  ScopedSysctl(std::string netns, std::string key, const std::string& value)
      : netns_(std::move(netns)), key_(std::move(key)) {
    auto old = GetSysctl(netns_, key_);
    if (old.ok()) old_ = *old;
    ok_ = SetSysctl(netns_, key_, value).ok();
  }
  ~ScopedSysctl() {
    if (!old_.empty()) (void)SetSysctl(netns_, key_, old_);
  }
  bool ok() const { return ok_; }

 private:
  std::string netns_, key_, old_;
  bool ok_ = false;
};

// ---- item 1: the pod-loopback exemption must not leave the pod --------------------
// The node answers on its 127.0.0.1 for packets arriving from the pod's veth
// (route_localnet=1, as kube-proxy sets it).  A pod sandbox sends to
// 127.0.0.1 forced out of its eth0 in every way an unprivileged process can
// name the interface; nothing may reach the node's loopback services.
TEST_F(Misjudged, PodLoopbackForcedOntoTheLinkNeverReachesTheNode) {
  const Pod& pod = lab().pod(0);
  ScopedSysctl localnet(lab().node_netns(), "net.ipv4.conf." + pod.node_ifname + ".route_localnet", "1");
  ASSERT_TRUE(localnet.ok());
  // The pod's eth0 too (the lab's doing, not the sandbox's), so the node's
  // TCP answers from 127.0.0.1 are not martians there and a handshake
  // completes: without it the SYN still reaches the node's listener.
  ScopedSysctl pod_localnet(pod.netns, "net.ipv4.conf." + pod.ifname + ".route_localnet", "1");
  ASSERT_TRUE(pod_localnet.ok());
  LoopbackListener node_lo(lab().node_netns());
  ASSERT_TRUE(node_lo.ready());
  LoopbackListener pod_lo(pod.netns);
  ASSERT_TRUE(pod_lo.ready());
  const std::string tcp = std::to_string(node_lo.tcp_port()), udp = std::to_string(node_lo.udp_port());
  const std::string& dev = pod.ifname;

  // Positive control: outside any sandbox the path works (UDP and TCP).
  auto control = ProbeAt(pod.netns, "",
                         {"via-dev", "bindtodevice", "127.0.0.1", udp, dev, "--then", "via-dev",
                          "bindtodevice", "127.0.0.1", tcp, dev, "--tcp"});
  ASSERT_EQ(control.size(), 2u) << last_;
  ASSERT_TRUE(Lab::WaitFor([&] { return node_lo.udp_datagrams() == 1 && node_lo.tcp_accepts() == 1; }))
      << "the route_localnet path does not work here, the test proves nothing: " << last_;

  const std::vector<std::string> attack = {
      "via-dev", "bindtodevice", "127.0.0.1", udp, dev, "--then",
      "via-dev", "unicast-if", "127.0.0.1", udp, dev, "--then",
      "via-dev", "pktinfo", "127.0.0.1", udp, dev, "--then",
      "via-dev", "bindtodevice", "127.0.0.1", tcp, dev, "--tcp", "--timeout-ms", "1000", "--then",
      "via-dev", "unicast-if", "127.0.0.1", tcp, dev, "--tcp", "--timeout-ms", "1000", "--then",
      "via-dev", "pktinfo", "::1", udp, dev, "--then",
      "via-dev", "unicast-if", "::1", udp, dev, "--then",
      // The pod's own loopback is still the pod's: allowed.
      "udp-sendto", "127.0.0.1", std::to_string(pod_lo.udp_port()), "--then",
      "tcp", "127.0.0.1", std::to_string(pod_lo.tcp_port())};
  RunResult r = Shared().RunSandboxed({}, attack);
  auto lines = Lines(r);
  ASSERT_EQ(lines.size(), 9u) << r.Describe();
  // The bound-interface forms are refused at connect/sendmsg (EPERM); the
  // cmsg form only the backstop sees, which refuses it (EPERM from sendmsg).
  EXPECT_EQ(lines[0]["errno"], "EPERM") << r.Describe();
  EXPECT_EQ(lines[1]["errno"], "EPERM") << r.Describe();
  EXPECT_EQ(lines[2]["errno"], "EPERM") << r.Describe();
  EXPECT_EQ(lines[3]["errno"], "EPERM") << r.Describe();
  EXPECT_NE(lines[4]["result"], "ok") << r.Describe();
  EXPECT_EQ(lines[7]["result"], "ok") << r.Describe();
  EXPECT_EQ(lines[8]["result"], "ok") << r.Describe();
  ASSERT_TRUE(Lab::WaitFor([&] { return pod_lo.udp_datagrams() == 1 && pod_lo.tcp_accepts() == 1; }))
      << r.Describe();
  // The pod's packets were queued ahead of the markers on the same veth.
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(node_lo.udp_datagrams(), 1u) << "the node's 127.0.0.1 got a sandbox's datagram: " << r.Describe();
  EXPECT_EQ(node_lo.tcp_accepts(), 1u) << "the node's 127.0.0.1 accepted a sandbox's connection: "
                                        << r.Describe();
}

// ---- item 2: connections the kernel opens, sockets that change hands ---------------
// An allowed MPTCP server announces a denied address (ADD_ADDR); the pod's
// path manager, in a kernel worker, opens a subflow there.  connect4 saw no
// sandbox (the caller is the worker) and the backstop took the record-less
// TCP socket for an inbound one.
TEST_F(Misjudged, MptcpSubflowToAnAnnouncedDeniedAddressNeverOpens) {
  auto ip = [&](const std::string& netns_name, const std::string& args) {
    RunSpec s;  // iproute2's ip, not a shell's (busybox sh would run its own applet)
    s.argv = {"ip", "-n", netns_name, "mptcp"};
    for (absl::string_view a : absl::StrSplit(args, ' ')) s.argv.emplace_back(a);
    return lab::Run(s);
  };
  ASSERT_EQ(*GetSysctl(lab().client_netns(), "net.mptcp.enabled"), "1");
  for (const auto& [ns, args] : std::vector<std::pair<std::string, std::string>>{
           {lab().world_netns_name(), absl::StrCat("endpoint add ", kPublicB4, " signal")},
           {lab().world_netns_name(), "limits set subflows 2 add_addr_accepted 0"},
           {lab().client_netns_name(), "limits set subflows 2 add_addr_accepted 2"}}) {
    RunResult r = ip(ns, args);
    ASSERT_EQ(r.exit_code, 0) << "configure the path manager: " << r.Describe();
  }
  struct Restore {
    std::function<void()> fn;
    ~Restore() { fn(); }
  } restore{[&] {
    ip(lab().world_netns_name(), "endpoint flush");
    ip(lab().client_netns_name(), "limits set subflows 0 add_addr_accepted 0");
  }};
  RunSpec serve;
  serve.argv = {BinaryPath("egressd-probe"), "mptcp-serve", "9000"};
  serve.netns = lab().world_netns();
  auto server = lab::Start(serve);
  ASSERT_TRUE(server.ok()) << server.status();
  auto ready = server->ReadOutLine(std::chrono::milliseconds(int(5000 * TimeScale())));
  ASSERT_TRUE(ready && absl::StrContains(*ready, "listening")) << server->err();

  // Positive control, outside any sandbox: the path manager joins the
  // announced address.
  auto control = ProbeAt(lab().client_netns(), "", {"mptcp", kPublicA4, "9000", "--hold-ms", std::to_string(int(5000 * TimeScale())), "--until-subflow"});
  ASSERT_EQ(control.size(), 1u) << last_;
  ASSERT_EQ(control[0]["subflows"], "1") << "no subflow here, the test proves nothing: " << last_;
  ASSERT_TRUE(lab().Drain().ok());
  ASSERT_GE(lab().FlowsOpenedTo(kPublicB4), 1u) << lab().CountersSummary();
  lab().ResetCounters();

  // Held until the path manager has tried (up to 5 s, scaled: it is slow in
  // an emulated guest), then 1.5 s more so the dropped SYN's retransmission
  // would be seen too.
  RunResult r = Shared().RunSandboxed(
      {"--egress", kPublicA4},
      {"mptcp", kPublicA4, "9000", "--hold-ms", std::to_string(int(5000 * TimeScale())),
       "--until-subflow", "--linger-ms", "1500"});
  auto lines = Lines(r);
  ASSERT_EQ(lines.size(), 1u) << r.Describe();
  EXPECT_EQ(lines[0]["echo"], "true") << "the allowed server works: " << r.Describe();
  // The path manager tried (MPTCP_INFO counts it); the lab host decides.
  EXPECT_EQ(lines[0]["subflows"], "1") << "the attack did not run: " << r.Describe();
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().FlowsOpenedTo(kPublicB4), 0u) << "a subflow opened to the denied address\n"
                                                << lab().CountersSummary() << "\n" << r.Describe();
  EXPECT_GE(lab().FlowsOpenedTo(kPublicA4), 1u) << lab().CountersSummary();
}

// A socket made outside the sandbox and passed in over SCM_RIGHTS is judged
// by the sandbox's policy when the sandbox connects it; a socket made inside
// and passed out never opens a connection the sandbox did not connect: the
// backstop refuses its SYN, whoever called connect().
TEST_F(Misjudged, SocketsPassedOverScmRightsAreJudgedByTheSandbox) {
  auto cg = lab().MakeCgroup("scm");
  ASSERT_TRUE(cg.ok()) << cg.status();
  ASSERT_EQ(Shared().Ctl({"sandbox", "add", "--cgroup", *cg, "--egress", kPublicA4}).exit_code, 0);
  const std::string path = "/tmp/egl-" + lab().id() + "-scm.sock";
  // give: in `giver_cg`; connect: in `taker_cg`, to addr.
  auto pass = [&](const std::string& giver_cg, const std::string& taker_cg, const char* addr) {
    auto giver = lab().StartProbe({"scm-give", path}, giver_cg);
    EXPECT_TRUE(giver.ok()) << giver.status();
    if (!giver.ok()) return ProbeLine{};
    auto ready = giver->ReadOutLine(std::chrono::milliseconds(int(5000 * TimeScale())));
    EXPECT_TRUE(ready && absl::StrContains(*ready, "listening")) << giver->err();
    auto lines = ProbeAt(lab().client_netns(), taker_cg,
                         {"scm-connect", path, addr, "80", "--timeout-ms", "1000"});
    giver->Wait();
    unlink(path.c_str());
    return lines.size() == 1 ? lines[0] : ProbeLine{};
  };
  // Into the sandbox.
  EXPECT_EQ(pass("", *cg, kPublicB4)["errno"], "EPERM") << last_;
  EXPECT_EQ(pass("", *cg, kPublicA4)["result"], "ok") << last_;
  // Out of the sandbox.
  EXPECT_NE(pass(*cg, "", kPublicB4)["result"], "ok") << last_;
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().FlowsOpenedTo(kPublicB4), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(kPublicA4, 80), 1u) << lab().CountersSummary();
  EXPECT_EQ(Shared().Ctl({"sandbox", "remove", "--cgroup", *cg}).exit_code, 0);
}

// ---- item 3: registrations deeper than the sandbox lookup's walk -------------------
// The walk reads the ancestors at levels 1 .. EGR_MAX_CGROUP_DEPTH-1 (23): a
// sandbox at level 23 is enforced, also for processes below it; at 24 and 25
// the registration is refused, naming the limit, and nothing changes.
TEST_F(Misjudged, RegistrationDeeperThanTheLookupWalksIsRefused) {
  // cgroup_base() is level 1; each component below it adds one.
  auto at_level = [&](int level) {
    std::string rel = "deep";
    for (int l = 3; l <= level; ++l) rel += "/d";
    auto cg = lab().MakeCgroup(rel);
    EXPECT_TRUE(cg.ok()) << cg.status();
    return cg.ok() ? *cg : std::string();
  };
  const std::string l23 = at_level(23), l24 = at_level(24), l25 = at_level(25);
  ASSERT_FALSE(l25.empty());

  for (const std::string* cg : {&l24, &l25}) {
    RunResult r = Shared().Ctl({"sandbox", "add", "--cgroup", *cg, "--egress", kPublicA4});
    EXPECT_EQ(r.exit_code, 2) << r.Describe();
    if (r.exit_code == 0) {  // accepted: then it must be enforced
      auto l = ProbeAt(lab().client_netns(), *cg, {"tcp", kPublicB4, "80"});
      EXPECT_TRUE(l.size() == 1 && l[0]["errno"] == "EPERM") << "registered, not enforced: " << last_;
      Shared().Ctl({"sandbox", "remove", "--cgroup", *cg});
    }
    EXPECT_TRUE(absl::StrContains(r.err, "EGR_MAX_CGROUP_DEPTH 24")) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "levels 1 to 23")) << r.err;
    struct stat st {};
    ASSERT_EQ(stat(cg->c_str(), &st), 0);  // a cgroup2 id is its directory's inode
    RunResult status = Shared().Ctl({"status"});
    EXPECT_FALSE(absl::StrContains(status.out, "cgroup " + std::to_string(st.st_ino) + " "))
        << "a refused registration changed the table: " << status.Describe();
  }
  RunResult contain = Shared().Ctl({"sandbox", "contain", "--cgroup", l24});
  EXPECT_EQ(contain.exit_code, 2) << contain.Describe();

  RunResult add = Shared().Ctl({"sandbox", "add", "--cgroup", l23, "--egress", kPublicA4});
  ASSERT_EQ(add.exit_code, 0) << add.Describe();
  for (const std::string* cg : {&l23, &l24, &l25}) {
    auto lines = ProbeAt(lab().client_netns(), *cg, {"tcp", kPublicA4, "80", "--then", "tcp", kPublicB4, "80"});
    ASSERT_EQ(lines.size(), 2u) << last_;
    EXPECT_EQ(lines[0]["result"], "ok") << *cg << ": " << last_;
    EXPECT_EQ(lines[1]["errno"], "EPERM") << *cg << " is below the level-23 sandbox: " << last_;
  }
  EXPECT_EQ(Shared().Ctl({"sandbox", "remove", "--cgroup", l23}).exit_code, 0);
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(lab().PacketsTo(kPublicB4), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().TcpAccepts(kPublicA4, 80), 3u) << lab().CountersSummary();
}

// ---- item 8: whose netns is the node's ----------------------------------------------
// An instance loaded first from a pod's netns, with no node netns configured.
// Before: the pod's netns became "the node's", and every sandbox in the real
// node netns reached the node's 127.0.0.1 as if it were its own pod loopback.
// Now the default is the init process's netns (here a PID namespace whose
// init lives in the lab's node netns), and a later load naming another
// namespace is refused, naming both.
TEST_F(Misjudged, NodeNetnsIsTheInitProcessesNotTheFirstLoadersAndIsPinned) {
  const InstanceDirs dirs = Shared().Other("nodens");
  RunSpec load;
  load.argv = {"unshare", "--pid", "--fork", "--mount-proc", "sh", "-c",
               // Not the last command, so no shell execs it as PID 1 in its place.
               "nsenter --net=\"$0\" env -u EGRESSD_NODE_NETNS \"$1\" --pin-root \"$2\" --runtime-dir \"$3\" load; "
               "exit $?",
               lab().client_netns(), BinaryPath("egressctl"), dirs.pin_root, dirs.runtime_dir};
  load.netns = lab().node_netns();  // the PID namespace's init (sh) lives here
  load.timeout = std::chrono::milliseconds(int(30000 * TimeScale()));
  RunResult loaded = lab::Run(load);
  ASSERT_EQ(loaded.exit_code, 0) << loaded.Describe();

  LoopbackListener node_lo(lab().node_netns());
  ASSERT_TRUE(node_lo.ready());
  auto cg = lab().MakeCgroup("node-ns-hosted");
  ASSERT_TRUE(cg.ok()) << cg.status();
  RunResult add = Shared().CtlAt(lab(), dirs, {"sandbox", "add", "--cgroup", *cg, "--floor", "hosted"});
  ASSERT_EQ(add.exit_code, 0) << add.Describe();
  auto lines = ProbeAt(lab().node_netns(), *cg,
                       {"tcp", "127.0.0.1", std::to_string(node_lo.tcp_port()), "--then", "udp-sendto",
                        "127.0.0.1", std::to_string(node_lo.udp_port()), "--then", "tcp", "::1",
                        std::to_string(node_lo.tcp_port())});
  ASSERT_EQ(lines.size(), 3u) << last_;
  for (ProbeLine l : lines) EXPECT_EQ(l["errno"], "EPERM") << "hosted reached the node's loopback: " << last_;

  // A reload naming the pod's netns disagrees with the pinned one: refused.
  RunResult reload = Shared().CtlAt(lab(), dirs, {"--node-netns", lab().client_netns(), "load"});
  EXPECT_EQ(reload.exit_code, 2) << reload.Describe();
  EXPECT_TRUE(absl::StrContains(reload.err, lab().client_netns())) << reload.err;
  EXPECT_TRUE(absl::StrContains(reload.err, "pinned in " + dirs.pin_root)) << reload.err;
  // ... and changed nothing: still denied.
  lines = ProbeAt(lab().node_netns(), *cg, {"tcp", "127.0.0.1", std::to_string(node_lo.tcp_port())});
  ASSERT_EQ(lines.size(), 1u) << last_;
  EXPECT_EQ(lines[0]["errno"], "EPERM") << last_;
  // A reload naming the same namespace is an ordinary upgrade.
  EXPECT_EQ(Shared().CtlAt(lab(), dirs, {"--node-netns", lab().node_netns(), "load"}).exit_code, 0);

  EXPECT_EQ(node_lo.tcp_accepts(), 0u);
  EXPECT_EQ(node_lo.udp_datagrams(), 0u);
  // Positive control on the same loopback path, from no sandbox.
  auto control = ProbeAt(lab().node_netns(), "", {"tcp", "127.0.0.1", std::to_string(node_lo.tcp_port())});
  ASSERT_EQ(control.size(), 1u) << last_;
  EXPECT_EQ(control[0]["result"], "ok") << last_;
  EXPECT_EQ(Shared().CtlAt(lab(), dirs, {"unload", "--force"}).exit_code, 0);
}

}  // namespace
}  // namespace egressd::test
