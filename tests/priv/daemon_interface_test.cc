// The daemon's PUT of a sandbox by interface alone (issue 17): no cgroup and
// no pod UID, only `interface` or `interface_netns`.  The sandbox's id is its
// interface's (maps/if_sandbox_table.h), it is judged at its veth, it needs
// no bpf LSM (the packet-socket rule is a cgroup's), it survives a kill -9 and
// a restart (the start's reconcile and the cgroup-removal watch leave it: its
// interface lives) and a config reload (recompiled, still at its veth), and
// DELETE frees the pod; its DNS is steered at the veth to the daemon's proxy
// (dig and glibc in the pod).  Bad input is a 400 naming the
// field and the value, and nothing changes; a `sandbox_runtime` that sends
// from its own stack (gvisor) without an interface is refused with the reason.
#include <signal.h>
#include <unistd.h>

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon_harness.h"
#include "egressd_env.h"
#include "lab_dns.h"
#include "maps/if_sandbox_table.h"
#include "userspace/daemon/client.h"

namespace egressd::test {
namespace {

using namespace std::chrono_literals;
using lab::Lab;
using lab::ProbeLine;
using lab::RunResult;
using lab::RunSpec;


class DaemonInterface : public ::testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    config_ = Shared().runtime_dir() + "-ifonly.yaml";
    std::ofstream(config_) << "dns:\n  upstreams: [" << lab::kPublicE4 << "]\n"
                           << "runtimeClasses:\n  sandboxed: runsc\n  standard: runc\n";
    lab().ResetCounters();
  }
  void TearDown() override {
    for (const auto& id : registered_) {
      if (daemon_) DeleteSandboxBestEffort(socket(), id);
    }
    for (const auto& ifname : interfaces_) Shared().Ctl({"sandbox", "remove", "--interface", ifname});
    if (daemon_) daemon_->Stop();
    for (const auto& ifname : links_) lab::Run({.argv = {"nsenter", "--net=" + lab().node_netns(), "ip", "link", "del", ifname}});
    unlink(config_.c_str());
  }
  Lab& lab() { return Shared().lab(); }
  static std::string socket() { return DaemonSocket(); }
  void StartDaemon() {
    auto d = StartDaemonProcess(config_, {}, std::chrono::milliseconds(30000));
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
  }
  void Kill9() {
    ASSERT_TRUE(daemon_);
    kill(daemon_->pid(), SIGKILL);
    daemon_->Wait();
    daemon_.reset();
  }
  daemon::ClientResponse Call(const std::string& method, const std::string& target, const nlohmann::json& body = {}) {
    return CallDaemon(method, target, body);
  }
  static nlohmann::json Egress(std::vector<std::string> egress) {
    for (const char* marker : {lab::kWorldLinkV4, lab::kWorldLinkV6}) egress.push_back(marker);
    return egress;
  }
  std::vector<ProbeLine> InPod(const lab::Pod& pod, const std::vector<std::string>& args) {
    RunResult r = lab().ProbeIn(pod.netns, args, "", /*hostile=*/true);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    last_ = r.Describe();
    return Lines(r);
  }

  std::string config_;
  std::optional<lab::Background> daemon_;
  std::vector<std::string> registered_, interfaces_, links_;
  std::string last_;
};

TEST_F(DaemonInterface, PutWithoutCgroupIsJudgedAtTheVethAndSurvivesARestart) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  auto pod = lab().AddPod();
  ASSERT_TRUE(pod.ok()) << pod.status();
  const std::string id = absl::StrCat("ifonly-", getpid());
  const uint64_t sandbox_id = maps::InterfaceSandboxId(Shared().lab().NodeIfindex((*pod)->node_ifname));
  // require_socket_containment holds for it even on a node without the bpf
  // LSM: the packet-socket rule is a cgroup's, its frames are judged at the veth.
  auto put = Call("PUT", "/v1/sandboxes/" + id,
                  {{"interface_netns", (*pod)->netns},
                   {"egress", Egress({lab::kPublicA4})},
                   {"sandbox_runtime", "gvisor"},
                   {"require_socket_containment", true},
                   {"labels", {{"pod", "ifonly"}}}});
  ASSERT_EQ(put.status, 201) << put.body.dump();
  registered_.push_back(id);
  interfaces_.push_back((*pod)->node_ifname);
  EXPECT_EQ(put.body["cgroup_id"].get<uint64_t>(), sandbox_id) << put.body.dump();
  EXPECT_TRUE(put.body["interface_only"].get<bool>()) << put.body.dump();
  EXPECT_EQ(put.body["interface"], (*pod)->node_ifname) << put.body.dump();
  EXPECT_EQ(put.body["state"], "enforced") << put.body.dump();

  auto judged = [&](const char* what) {
    lab().ResetCounters();
    auto l = InPod(**pod, {"tcp", lab::kPublicA4, "80", "--then", "tcp", lab::kPublicB4, "80", "--timeout-ms", "300"});
    ASSERT_EQ(l.size(), 2u) << last_;
    EXPECT_TRUE(Ok(l[0])) << what << ": " << last_;
    EXPECT_FALSE(Ok(l[1])) << what << ": " << last_;
    ASSERT_TRUE(lab().Drain((*pod)->netns).ok());
    EXPECT_EQ(lab().TcpAccepts(lab::kPublicA4, 80), 1u) << what << ": " << lab().CountersSummary();
    EXPECT_EQ(lab().PacketsTo(lab::kPublicB4), 0u) << what << ": " << lab().CountersSummary();
  };
  judged("registered");

  // kill -9 and a restart: the start's reconcile and its cgroup-removal
  // watch must not take an id that is no cgroup's for a removed cgroup.
  Kill9();
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  auto get = Call("GET", "/v1/sandboxes/" + id);
  ASSERT_EQ(get.status, 200) << get.body.dump();
  EXPECT_EQ(get.body["cgroup_id"].get<uint64_t>(), sandbox_id) << get.body.dump();
  EXPECT_EQ(get.body["state"], "enforced") << get.body.dump();
  judged("after a restart");
  // A config reload recompiles it (a new protected range changes every
  // policy): its interface and pod entries stay, judged by the new policy.
  std::ofstream(config_) << "dns:\n  upstreams: [" << lab::kPublicE4 << "]\nprotected: [" << lab::kPublicD4
                         << "/32]\n";
  auto reload = Call("POST", "/v1/config:reload");
  ASSERT_EQ(reload.status, 200) << reload.body.dump();
  std::string outcome;
  for (const auto& sb : reload.body["sandboxes"]) {
    if (sb.value("id", nlohmann::json()) == id) outcome = sb.value("outcome", "");
  }
  EXPECT_EQ(outcome, "recompiled") << reload.body.dump();
  judged("after a config reload");
  // A PUT again (the same interface) flips it; another id cannot take it.
  auto again = Call("PUT", "/v1/sandboxes/" + id,
                    {{"interface", (*pod)->node_ifname}, {"egress", Egress({lab::kPublicA4})}});
  EXPECT_EQ(again.status, 200) << again.body.dump();
  auto other = Call("PUT", "/v1/sandboxes/" + id + "-other",
                    {{"interface", (*pod)->node_ifname}, {"egress", Egress({lab::kPublicB4})}});
  EXPECT_EQ(other.status, 409) << other.body.dump();

  auto del = Call("DELETE", "/v1/sandboxes/" + id);
  ASSERT_EQ(del.status, 200) << del.body.dump();
  registered_.clear();
  EXPECT_EQ(Call("GET", "/v1/sandboxes/" + id).status, 404);
  auto free_after = InPod(**pod, {"tcp", lab::kPublicB4, "80"});
  ASSERT_EQ(free_after.size(), 1u) << last_;
  EXPECT_TRUE(Ok(free_after[0])) << "deleted, the pod is free: " << last_;
}

// DNS through the daemon for an interface-only sandbox: the pod asks a
// resolver no host has (dig, then glibc), the tc program steers the query at
// the veth to the daemon's proxy (its endpoint on the pod gateway), which asks
// the lab's dnsmasq for a name in scope and releases the answer from the
// address asked; the learned address then connects.  A denied name is
// NXDOMAIN and never reaches dnsmasq (its log, beside the allowed name's
// query), and the address asked sees nothing.
TEST_F(DaemonInterface, InterfaceOnlySandboxResolvesThroughTheDaemon) {
  const std::string tag = absl::StrCat(getpid());
  const std::string allowed = absl::StrCat("ifdns-", tag, ".example"), denied = absl::StrCat("ifdeny-", tag, ".example");
  const std::string later = absl::StrCat("ifdns-later-", tag, ".example");  // orders dnsmasq's log
  constexpr const char* kAsked4 = "192.0.2.53";  // TEST-NET: no lab host has it
  auto upstream = lab::DnsServer::Start(lab::DnsServerSpec{
      .netns = lab().world_netns(),
      .listen = {lab::kPublicE4},
      .records = {{allowed, {lab::kPublicC4}}, {later, {lab::kPublicC4}}, {denied, {lab::kPublicB4}}}});
  ASSERT_TRUE(upstream.ok()) << upstream.status();
  std::ofstream(config_) << "dns:\n  upstreams: [" << lab::kPublicE4 << "]\n  endpoint4: " << lab::kPodGatewayV4
                         << "\n  endpoint6: " << lab::kPodGatewayV6 << "\n";
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  auto pod = lab().AddPod();
  ASSERT_TRUE(pod.ok()) << pod.status();
  auto connect = [&](const char* addr) {
    auto l = InPod(**pod, {"tcp", addr, "80", "--timeout-ms", "500"});
    EXPECT_EQ(l.size(), 1u) << last_;
    return !l.empty() && Ok(l[0]);
  };
  const std::string id = absl::StrCat("ifdns-", tag);
  auto put = Call("PUT", "/v1/sandboxes/" + id,
                  {{"interface", (*pod)->node_ifname}, {"egress", Egress({allowed, later})}, {"sandbox_runtime", "gvisor"}});
  ASSERT_EQ(put.status, 201) << put.body.dump();
  registered_.push_back(id);
  interfaces_.push_back((*pod)->node_ifname);
  ASSERT_TRUE(put.body["interface_only"].get<bool>()) << put.body.dump();
  EXPECT_FALSE(connect(lab::kPublicC4)) << "before the name, its address is refused";

  auto in_pod = [&](std::vector<std::string> argv) {
    RunSpec spec;
    spec.argv = std::move(argv);
    spec.netns = (*pod)->netns;
    spec.timeout = std::chrono::milliseconds(static_cast<int>(20000 * TimeScale()));
    return lab::Run(spec);
  };
  RunResult d = in_pod({"dig", "+time=2", "+tries=2", absl::StrCat("@", kAsked4), allowed});
  EXPECT_NE(d.out.find("status: NOERROR"), std::string::npos) << d.Describe();
  EXPECT_NE(d.out.find(absl::StrCat("SERVER: ", kAsked4, "#53(", kAsked4, ")")), std::string::npos)
      << "the answer came from the address asked: " << d.Describe();
  EXPECT_NE(d.out.find(lab::kPublicC4), std::string::npos) << d.Describe();
  EXPECT_TRUE(connect(lab::kPublicC4)) << "the learned address connects";
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(lab::kPublicC4, 80) == 1; })) << lab().CountersSummary();

  // glibc's getaddrinfo, its resolv.conf naming the TEST-NET resolver.
  char dir[] = "/tmp/egr-ifdns-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string conf = absl::StrCat(dir, "/resolv.conf");
  std::ofstream(conf) << "nameserver " << kAsked4 << "\noptions timeout:2 attempts:2\n";
  RunResult g = in_pod({"unshare", "--mount", "--", "sh", "-c",
                        absl::StrCat("mount --bind ", conf, " /etc/resolv.conf && getent ahostsv4 ", allowed)});
  unlink(conf.c_str());
  rmdir(dir);
  EXPECT_EQ(g.exit_code, 0) << g.Describe();
  EXPECT_TRUE(absl::StartsWith(g.out, lab::kPublicC4)) << g.Describe();

  RunResult nx = in_pod({"dig", "+time=2", "+tries=2", absl::StrCat("@", kAsked4), denied});
  EXPECT_NE(nx.out.find("status: NXDOMAIN"), std::string::npos) << nx.Describe();
  // An allowed name asked after it: once dnsmasq logged that one, it would
  // have logged the denied one before it.
  RunResult l = in_pod({"dig", "+time=2", "+tries=2", absl::StrCat("@", kAsked4), later});
  EXPECT_NE(l.out.find("status: NOERROR"), std::string::npos) << l.Describe();
  ASSERT_TRUE(Lab::WaitFor([&] { return absl::StrContains((*upstream)->Log(), absl::StrCat("] ", later, " from")); }))
      << "positive control: " << (*upstream)->Log();
  const std::string log = (*upstream)->Log();
  EXPECT_NE(log.find(absl::StrCat("] ", allowed, " from")), std::string::npos) << "positive control: " << log;
  EXPECT_EQ(log.find(absl::StrCat("] ", denied, " from")), std::string::npos) << "a denied name reached dnsmasq: " << log;
  EXPECT_FALSE(connect(lab::kPublicB4)) << "the denied name's address";
  ASSERT_TRUE(lab().Drain((*pod)->netns).ok());
  EXPECT_EQ(lab().PacketsTo(kAsked4), 0u) << "the address asked saw nothing: " << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(lab::kPublicB4), 0u) << lab().CountersSummary();
}

TEST_F(DaemonInterface, BadPutIs400NamingTheFieldAndNothingChanges) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  auto cg = lab().MakeCgroup("ifonly-put-bad");
  ASSERT_TRUE(cg.ok()) << cg.status();
  const std::string ifname = lab().pod(0).node_ifname;
  // A veth the node has no host route through and whose other end has no
  // address: its pod's sources could not be checked.
  const std::string unknown = absl::StrCat("egd", getpid() % 1000000, "a");
  RunResult mk = lab::Run({.argv = {"nsenter", "--net=" + lab().node_netns(), "ip", "link", "add", unknown, "type",
                                    "veth", "peer", "name", absl::StrCat("egd", getpid() % 1000000, "b")}});
  ASSERT_EQ(mk.exit_code, 0) << mk.Describe();
  links_.push_back(unknown);
  struct Case {
    nlohmann::json body;
    std::string names;
  };
  const std::vector<Case> cases = {
      {{{"egress", Egress({lab::kPublicA4})}}, "field cgroup: is required, or pod_uid, interface or interface_netns"},
      {{{"interface", "lo"}, {"egress", Egress({lab::kPublicA4})}}, "field interface \"lo\""},
      {{{"interface", unknown}, {"egress", Egress({lab::kPublicA4})}},
       absl::StrCat("field interface \"", unknown, "\": the pod's addresses behind ", unknown,
                    " are unknown: the node has no host route (/32 or /128) through it")},
      {{{"interface_netns", "/proc/self/status"}, {"egress", Egress({lab::kPublicA4})}},
       "field interface_netns \"/proc/self/status\""},
      {{{"interface", ifname}, {"interface_netns", lab().pod(0).netns}, {"egress", Egress({lab::kPublicA4})}},
       "field interface_netns: and field interface: give one of the two"},
      {{{"cgroup", *cg}, {"sandbox_runtime", "gvisor"}, {"egress", Egress({lab::kPublicA4})}},
       "field sandbox_runtime: \"gvisor\": gVisor's network stack"},
      {{{"interface", ifname}, {"sandbox_runtime", "nosuch"}, {"egress", Egress({lab::kPublicA4})}},
       "field sandbox_runtime: \"nosuch\" is not a runtime"},
      // The pod's RuntimeClass, through the config's runtimeClasses.
      {{{"cgroup", *cg}, {"runtime_class", "sandboxed"}, {"egress", Egress({lab::kPublicA4})}},
       "field runtime_class \"sandboxed\" is runtime \"runsc\": gVisor's network stack"},
      {{{"cgroup", *cg}, {"runtime_class", "nosuch"}, {"egress", Egress({lab::kPublicA4})}},
       "field runtime_class \"nosuch\": the deployment's runtimeClasses do not name it (they name \"sandboxed\", "
       "\"standard\")"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    auto r = Call("PUT", absl::StrCat("/v1/sandboxes/ifonly-bad-", i), cases[i].body);
    EXPECT_EQ(r.status, 400) << cases[i].body.dump() << " -> " << r.body.dump();
    std::string quoted = nlohmann::json(cases[i].names).dump();  // as the body's JSON text has it
    quoted = quoted.substr(1, quoted.size() - 2);
    EXPECT_NE(r.body.dump().find(quoted), std::string::npos)
        << "should name " << cases[i].names << ": " << r.body.dump();
  }
  auto list = Call("GET", "/v1/sandboxes");
  ASSERT_EQ(list.status, 200);
  EXPECT_TRUE(list.body["sandboxes"].empty()) << list.body.dump();
  auto l = InPod(lab().pod(0), {"tcp", lab::kPublicB4, "80"});
  ASSERT_EQ(l.size(), 1u) << last_;
  EXPECT_TRUE(Ok(l[0])) << "nothing attached: " << last_;
  // The positive control: a class the config maps to runc registers by cgroup.
  auto mapped = Call("PUT", "/v1/sandboxes/ifonly-class-ok",
                     {{"cgroup", *cg}, {"runtime_class", "standard"}, {"egress", Egress({lab::kPublicA4})}});
  EXPECT_EQ(mapped.status, 201) << mapped.body.dump();
  if (mapped.status == 201) registered_.push_back("ifonly-class-ok");
}

}  // namespace
}  // namespace egressd::test
