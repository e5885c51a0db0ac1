// The DaemonSet's container on the lab (issue 16): egressd started the way
// deploy/kubernetes/base/daemonset.yaml starts it, with exactly its
// capabilities and no others, on a node that has never had it loaded.
//
//   - The container: a lab cgroup of its own, the node's netns (hostNetwork),
//     a private cgroup namespace (what the runtime gives a container), a
//     bounding set of only the manifest's capabilities (setpriv), then the
//     manifest's command: nsenter into the node's cgroup namespace (the
//     test's own: root cannot open /proc/1/ns here) and egressd.  The
//     hostPath mounts are the host's own paths (/sys/fs/bpf, the cgroup2
//     root, the runtime dir), so the container sees what the host sees; the
//     test's instance lives under them.  The daemon loads the programs
//     itself (the node's first start: the load and its self-test run with
//     those capabilities), then a pod is registered through the API and
//     enforcement, DNS, the audit stream and the probes work.
//   - One capability fewer: the start fails at once, exit 1, naming it (the
//     nsenter's CAP_SYS_PTRACE: nsenter names the namespace it cannot open).
//   - Without the nsenter (the container's private cgroup namespace) the
//     daemon refuses to start, saying why.
#include <linux/capability.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_join.h"
#include "deploy_daemonset.h"
#include "egressd_env.h"
#include "lab_dns.h"
#include "tests/deploy/manifest.h"
#include "userspace/daemon/client.h"

namespace egressd::test {
namespace {

using namespace std::chrono_literals;
using lab::DnsServer;
using lab::DnsServerSpec;
using lab::RunResult;
using lab::RunSpec;

constexpr const char* kUpstream = lab::kPublicE4;  // the config's dns.upstreams
constexpr const char* kName = "allowed.example";   // -> kPublicC4, allowed by name
constexpr const char* kDeniedName = "denied.example";

// What the manifest gives the daemon container.
struct Container {
  std::vector<std::string> caps;     // "SYS_ADMIN", ...
  std::vector<std::string> command;  // nsenter ... egressd --config ... --socket ...
};

Container FromManifest() {
  std::vector<std::string> errors;
  policy::yaml::Walker w("daemonset", &errors);
  const manifest::Node* ds = w.Load(kDaemonSetYaml, "daemonset.yaml");
  Container c;
  const manifest::Node* pod = manifest::At(ds, "spec.template.spec");
  const manifest::Node* daemon = manifest::Find(manifest::Get(pod, "containers"), "name", "egressd");
  c.caps = manifest::Scalars(manifest::At(daemon, "securityContext.capabilities.add"));
  c.command = manifest::Scalars(manifest::Get(daemon, "command"));
  EXPECT_TRUE(errors.empty()) << absl::StrJoin(errors, "\n");
  return c;
}

// setpriv's spelling: -all,+sys_admin,...
std::string BoundingSet(const std::vector<std::string>& caps) {
  std::string out = "-all";
  for (const auto& c : caps) absl::StrAppend(&out, ",+", absl::AsciiStrToLower(c));
  return out;
}

// The capabilities the manifest may name (linux/capability.h's numbers).
int CapBit(const std::string& name) {
  static const std::vector<std::pair<std::string, int>> kBits = {
      {"DAC_OVERRIDE", CAP_DAC_OVERRIDE}, {"NET_ADMIN", CAP_NET_ADMIN}, {"NET_RAW", CAP_NET_RAW},
      {"SYS_PTRACE", CAP_SYS_PTRACE},     {"SYS_ADMIN", CAP_SYS_ADMIN}, {"SYS_RESOURCE", CAP_SYS_RESOURCE},
      {"PERFMON", CAP_PERFMON},           {"BPF", CAP_BPF}};
  for (const auto& [n, b] : kBits) {
    if (n == name) return b;
  }
  return -1;
}

class DeployCaps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    lab::Lab& lab = Shared().lab();
    auto up = DnsServer::Start(DnsServerSpec{.netns = lab.world_netns(),
                                             .listen = {kUpstream},
                                             .records = {{kName, {lab::kPublicC4}}, {kDeniedName, {lab::kPublicD4}}}});
    ASSERT_TRUE(up.ok()) << up.status();
    upstream_ = std::move(*up).release();
    // A node where egressd was never loaded: the daemon loads it.
    dirs_ = Shared().Other("deploy");
    config_ = dirs_.runtime_dir + "-deploy.yaml";
    std::ofstream(config_) << "dns:\n  upstreams: [" << kUpstream << "]\n  endpoint4: " << lab::kPodGatewayV4
                           << "\n";
  }
  static void TearDownTestSuite() {
    if (upstream_ == nullptr) return;
    Egressd::CtlAt(Shared().lab(), dirs_, {"unload"});
    delete upstream_;
    upstream_ = nullptr;
    unlink(config_.c_str());
  }
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    ASSERT_NE(upstream_, nullptr);
    container_ = FromManifest();
    ASSERT_FALSE(container_.caps.empty());
    ASSERT_GE(container_.command.size(), 4u);
    ASSERT_EQ(container_.command[0], "nsenter");
    auto cg = Shared().lab().MakeCgroup(absl::StrCat("deploy-container-", counter_++));
    ASSERT_TRUE(cg.ok()) << cg.status();
    container_cgroup_ = *cg;
  }
  void TearDown() override {
    if (daemon_) daemon_->Stop();
    for (const auto& cg : registered_) Egressd::CtlAt(Shared().lab(), dirs_, {"sandbox", "remove", "--cgroup", cg});
  }
  static std::string socket() { return dirs_.runtime_dir + "/egressd.sock"; }

  // The container's argv: private cgroupns, the bounding set, the manifest's
  // command with the test's paths for /proc/1 (the node's cgroupns), the
  // config and the socket.
  RunSpec ContainerSpec(const std::vector<std::string>& caps, bool with_nsenter = true) {
    RunSpec s;
    s.netns = Shared().lab().node_netns();
    s.cgroup = container_cgroup_;
    s.env = Shared().CtlEnv();
    s.env["EGRESSD_PIN_ROOT"] = dirs_.pin_root;
    s.env["EGRESSD_RUNTIME_DIR"] = dirs_.runtime_dir;
    s.timeout = 10min;
    s.argv = {"unshare", "--cgroup", "--", "setpriv", "--inh-caps", "-all", "--bounding-set", BoundingSet(caps), "--"};
    for (size_t i = with_nsenter ? 0 : 3; i < container_.command.size(); ++i) {
      std::string a = container_.command[i];
      if (a == "--cgroup=/proc/1/ns/cgroup") a = absl::StrCat("--cgroup=/proc/", getpid(), "/ns/cgroup");
      if (a == "/usr/local/bin/egressd") a = lab::BinaryPath("egressd");
      if (a == "/etc/egressd/egressd.yaml") a = config_;
      if (a == "/run/egressd/egressd.sock") a = socket();
      // The kubelet's expansion of the downward API's status.hostIP: the
      // lab node's address its pods reach.
      a = absl::StrReplaceAll(a, {{"$(NODE_IP)", lab::kPodGatewayV4}});
      s.argv.push_back(a);
    }
    return s;
  }
  // The manifest's probe, run inside the container the way the kubelet's
  // exec is (its cgroup, its capabilities).
  RunResult Probe(const std::string& endpoint) {
    RunSpec s = ContainerSpec(container_.caps);
    s.argv = {"setpriv", "--inh-caps", "-all", "--bounding-set", BoundingSet(container_.caps), "--",
              lab::BinaryPath("egressd"), "--probe", endpoint, "--socket", socket()};
    s.timeout = 20s;
    return lab::Run(s);
  }
  RunResult InPod(const std::string& cgroup, std::vector<std::string> argv) {
    RunSpec s;
    s.argv = std::move(argv);
    s.netns = Shared().lab().pod().netns;
    s.cgroup = cgroup;
    s.hostile = true;
    s.timeout = 20s;
    return lab::Run(s);
  }
  lab::ProbeLine Connect(const std::string& cgroup, const std::string& addr) {
    RunResult r = InPod(cgroup, {lab::BinaryPath("egressd-probe"), "batch", absl::StrCat("tcp ", addr, " 80")});
    auto lines = Lines(r);
    EXPECT_EQ(lines.size(), 1u) << r.Describe();
    return lines.empty() ? lab::ProbeLine{} : lines[0];
  }

  static inline DnsServer* upstream_ = nullptr;
  static inline InstanceDirs dirs_;
  static inline std::string config_;
  static inline int counter_ = 0;
  Container container_;
  std::string container_cgroup_;
  std::optional<lab::Background> daemon_;
  std::vector<std::string> registered_;
};

TEST_F(DeployCaps, WithExactlyTheManifestsCapabilitiesTheDaemonLoadsEnforcesResolvesAuditsAndAnswers) {
  auto bg = lab::Start(ContainerSpec(container_.caps));
  ASSERT_TRUE(bg.ok()) << bg.status();
  daemon_ = std::move(*bg);
  auto line = daemon_->ReadOutLine(std::chrono::milliseconds(int(120000 * TimeScale())));
  ASSERT_TRUE(line && absl::StartsWith(*line, "ready:")) << "egressd never said ready: " << daemon_->err();
  // Only the manifest's capabilities: read from the daemon's own status.
  std::ifstream st(absl::StrCat("/proc/", daemon_->pid(), "/status"));
  std::string status((std::istreambuf_iterator<char>(st)), {});
  uint64_t want = 0;
  for (const auto& c : container_.caps) {
    const int bit = CapBit(c);
    ASSERT_GE(bit, 0) << c;
    want |= uint64_t{1} << bit;
  }
  char line_want[64];
  std::snprintf(line_want, sizeof(line_want), "CapEff:\t%016llx\n", static_cast<unsigned long long>(want));
  EXPECT_TRUE(absl::StrContains(status, line_want)) << "want " << line_want << status;

  // The probes, as the kubelet runs them.
  RunResult healthz = Probe("healthz");
  EXPECT_EQ(healthz.exit_code, 0) << healthz.Describe();
  RunResult readyz = Probe("readyz");
  EXPECT_EQ(readyz.exit_code, 0) << readyz.Describe();

  // The daemon loaded the programs itself (nothing was pinned).
  auto s = daemon::Call(socket(), "GET", "/v1/status");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->body.value("programs", ""), "loaded") << s->body.dump();
  EXPECT_TRUE(s->body.value("enforcing", false)) << s->body.dump();
  EXPECT_TRUE(s->body["audit"].value("reader", false)) << s->body.dump();

  // A lab pod registered through the API.
  auto cg = Shared().lab().MakeCgroup("deploy-pod");
  ASSERT_TRUE(cg.ok()) << cg.status();
  registered_.push_back(*cg);
  nlohmann::json body = {{"cgroup", *cg}, {"egress", {lab::kPublicA4, kName}}};
  auto put = daemon::Call(socket(), "PUT", "/v1/sandboxes/deploy-pod", body.dump());
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(put->status, 201) << put->body.dump(2);
  EXPECT_TRUE(put->body.value("enforced", false)) << put->body.dump(2);

  // An allowed and a denied connection; an allowed and a denied name.
  EXPECT_TRUE(Ok(Connect(*cg, lab::kPublicA4)));
  EXPECT_EQ(Errno(Connect(*cg, lab::kPublicB4)), "EPERM");
  RunResult named = InPod(*cg, {"dig", "+time=2", "+tries=1", "+short", "@8.8.8.8", kName});
  EXPECT_EQ(std::string(absl::StripAsciiWhitespace(named.out)), lab::kPublicC4) << named.Describe();
  EXPECT_TRUE(Ok(Connect(*cg, lab::kPublicC4))) << "the name's address, learned through the daemon's proxy";
  const uint64_t denied_asked = upstream_->QueriesFor(kDeniedName);
  RunResult denied = InPod(*cg, {"dig", "+time=2", "+tries=1", "+short", "@8.8.8.8", kDeniedName});
  EXPECT_FALSE(absl::StrContains(denied.out, lab::kPublicD4)) << denied.Describe();
  EXPECT_EQ(upstream_->QueriesFor(kDeniedName), denied_asked) << "a name outside the policy is never asked";
  EXPECT_EQ(Errno(Connect(*cg, lab::kPublicD4)), "EPERM");

  // The audit stream the daemon's reader writes (its spool, which every
  // `egressctl audit` reader follows): the denied connect, by sandbox.
  const std::string spool = dirs_.runtime_dir + "/audit/spool/all.jsonl";
  RunResult audit;
  EXPECT_TRUE(lab::Lab::WaitFor(
      [&] {
        audit = Egressd::CtlAt(Shared().lab(), dirs_, {"audit", "--input", spool, "--verdict", "deny", "-o", "json"});
        return absl::StrContains(audit.out, lab::kPublicB4);
      },
      std::chrono::milliseconds(int(20000 * TimeScale()))))
      << audit.Describe();
  EXPECT_TRUE(absl::StrContains(audit.out, "deploy-pod")) << audit.out;
  EXPECT_FALSE(absl::StrContains(audit.out, absl::StrCat("\"", lab::kPublicA4, "\""))) << "allowed, not denied: "
                                                                                       << audit.out;

  auto del = daemon::Call(socket(), "DELETE", "/v1/sandboxes/deploy-pod");
  ASSERT_TRUE(del.ok()) << del.status();
  EXPECT_EQ(del->status, 200);
}

// The manifest's command without each capability: the nsenter needs
// CAP_SYS_ADMIN (setns) and CAP_SYS_PTRACE (opening pid 1's namespace) and
// says so in its own words; egressd itself, started without the nsenter,
// names each of its own that is missing (its check comes before anything
// else, the cgroup namespace's included).
TEST_F(DeployCaps, OneCapabilityFewerFailsAtStartNamingIt) {
  for (const std::string& drop : container_.caps) {
    std::vector<std::string> fewer;
    std::copy_if(container_.caps.begin(), container_.caps.end(), std::back_inserter(fewer),
                 [&](const std::string& c) { return c != drop; });
    for (bool with_nsenter : {true, false}) {
      RunSpec spec = ContainerSpec(fewer, with_nsenter);
      spec.timeout = std::chrono::milliseconds(int(60000 * TimeScale()));
      RunResult r = lab::Run(spec);
      const std::string context = absl::StrCat("without ", drop, with_nsenter ? " (the manifest's command)" : " (egressd alone)");
      EXPECT_EQ(r.exit_code, 1) << context << ": " << r.Describe();
      EXPECT_FALSE(absl::StrContains(r.out, "ready:")) << context << ": " << r.Describe();
      if (with_nsenter && drop == "SYS_PTRACE") {
        EXPECT_TRUE(absl::StrContains(r.err, "ns/cgroup: Permission denied")) << context << ": " << r.Describe();
      } else if (with_nsenter && drop == "SYS_ADMIN") {
        EXPECT_TRUE(absl::StrContains(r.err, "reassociate to namespace 'ns/cgroup' failed")) << context << ": "
                                                                                            << r.Describe();
      } else if (with_nsenter || drop != "SYS_PTRACE") {
        EXPECT_TRUE(absl::StrContains(r.err, "missing capability CAP_" + drop)) << context << ": " << r.Describe();
      } else {
        // egressd alone does not need CAP_SYS_PTRACE: it gets past the
        // capability check and stops at the private cgroup namespace.
        EXPECT_TRUE(absl::StrContains(r.err, "cgroup namespace below the node's")) << context << ": "
                                                                                 << r.Describe();
      }
    }
  }
}

TEST_F(DeployCaps, InTheContainersOwnCgroupNamespaceTheDaemonRefusesToStart) {
  RunSpec spec = ContainerSpec(container_.caps, /*with_nsenter=*/false);
  spec.timeout = std::chrono::milliseconds(int(60000 * TimeScale()));
  RunResult r = lab::Run(spec);
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.err, "cgroup namespace below the node's")) << r.Describe();
  // What it guards against: from there a sandbox's cgroup reads as a path
  // the daemon cannot match ("/.." first).
  RunSpec peek = spec;
  peek.argv = {"unshare", "--cgroup", "--", "cat", "/proc/1/cgroup"};
  RunResult seen = lab::Run(peek);
  EXPECT_TRUE(absl::StrContains(seen.out, "0::/..")) << seen.Describe();
}

}  // namespace
}  // namespace egressd::test
