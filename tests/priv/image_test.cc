// The real image under Debian's podman + crun (issue 16): localhost/egressd
// built by deploy/image/build.sh from this build's binaries (reused when its
// inputs are unchanged), run with the DaemonSet's capabilities and mounts
// from deploy/kubernetes/base/daemonset.yaml, through deploy/image/podman.sh
// (the host fixes crun needs here: resource limits, hybrid cgroups):
//   - hostNetwork: the lab's node netns (--network ns:...), hostPID;
//   - the container's capabilities: exactly the manifest's (--cap-drop all,
//     --cap-add each), not privileged; seccomp and AppArmor unconfined, as
//     the kubelet runs a pod that sets no seccomp profile and the manifest's
//     appArmorProfile;
//   - the hostPath mounts: /sys/fs/bpf (rslave: HostToContainer), the cgroup
//     root, the runtime dir (the test instance's, at its own path), the
//     config directory read-only;
//   - the manifest's command: nsenter into the node's cgroup namespace (the
//     test's own: root cannot open /proc/1/ns here), egressd --config
//     /etc/egressd/egressd.yaml --socket ...;
//   - the probes as the kubelet's exec runs them (podman exec).
// The daemon in the image loads the programs itself, a lab pod is registered
// through the API, and an allowed and a denied connection, an allowed and a
// denied name behave.
//
// The build step's time is printed (CI's figure).  No image (no mirror, no
// podman) fails under REQUIRE_BPF=1 naming why; the vmtests guest has no
// podman and skips, saying so.
#include <linux/capability.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
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

constexpr const char* kUpstream = lab::kPublicE4;
constexpr const char* kName = "allowed.example";  // -> kPublicC4
constexpr const char* kDeniedName = "denied.example";
constexpr const char* kImage = "localhost/egressd:latest";

// One of the container's volumeMounts with its volume: a hostPath's path, or
// empty for a configMap (the test's config directory stands in for it).
struct Mount {
  std::string volume, host_path, mount_path, propagation;
  bool read_only = false, config_map = false;
};

struct Container {
  std::vector<std::string> caps;
  std::vector<std::string> command;
  std::vector<Mount> mounts;
};

Container FromManifest() {
  std::vector<std::string> errors;
  policy::yaml::Walker w("daemonset", &errors);
  const manifest::Node* ds = w.Load(kDaemonSetYaml, "daemonset.yaml");
  const manifest::Node* pod = manifest::At(ds, "spec.template.spec");
  const manifest::Node* daemon = manifest::Find(manifest::Get(pod, "containers"), "name", "egressd");
  Container c;
  c.caps = manifest::Scalars(manifest::At(daemon, "securityContext.capabilities.add"));
  c.command = manifest::Scalars(manifest::Get(daemon, "command"));
  const manifest::Node* mounts = manifest::Get(daemon, "volumeMounts");
  for (const manifest::Node* m : mounts && mounts->IsSequence() ? mounts->items : std::vector<const manifest::Node*>{}) {
    Mount mount{.volume = manifest::Scalar(manifest::Get(m, "name")),
                .mount_path = manifest::Scalar(manifest::Get(m, "mountPath")),
                .propagation = manifest::Scalar(manifest::Get(m, "mountPropagation")),
                .read_only = manifest::Scalar(manifest::Get(m, "readOnly")) == "true"};
    const manifest::Node* vol = manifest::Find(manifest::Get(pod, "volumes"), "name", mount.volume);
    mount.host_path = manifest::Scalar(manifest::At(vol, "hostPath.path"));
    mount.config_map = manifest::Get(vol, "configMap") != nullptr;
    EXPECT_TRUE(!mount.host_path.empty() || mount.config_map)
        << "volume " << mount.volume << ": neither a hostPath nor a configMap (the test maps only those)";
    c.mounts.push_back(std::move(mount));
  }
  EXPECT_TRUE(errors.empty()) << absl::StrJoin(errors, "\n");
  return c;
}

// podman's --volume for a manifest mount.  The lab's substitutions, as the
// kubelet's would be on a node: the runtime dir is the test instance's own
// (at its own path on both sides: its records name it), the configMap is
// the test's config directory; every other hostPath is the host's own path.
// Propagation as the kubelet maps it: HostToContainer is rslave,
// Bidirectional rshared.
std::string VolumeFlag(const Mount& m, const std::string& runtime_dir, const std::string& config_dir) {
  std::string host = m.host_path, inside = m.mount_path;
  if (m.config_map) host = config_dir;
  if (m.host_path == "/run/egressd") host = inside = runtime_dir;
  std::vector<std::string> opts;
  if (m.read_only) opts.push_back("ro");
  if (m.propagation == "HostToContainer") opts.push_back("rslave");
  if (m.propagation == "Bidirectional") opts.push_back("rshared");
  return absl::StrCat(host, ":", inside, opts.empty() ? "" : ":", absl::StrJoin(opts, ","));
}

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

std::string PodmanSh() { return std::string(EGR_SOURCE_DIR) + "/deploy/image/podman.sh"; }

class Image : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin() || access("/vmtest/config", F_OK) == 0) return;
    // The build step (cached by its inputs): CI's cost of this test.
    const auto t0 = std::chrono::steady_clock::now();
    RunSpec b;
    b.argv = {std::string(EGR_SOURCE_DIR) + "/deploy/image/build.sh", EGR_BINARY_DIR};
    b.timeout = 40min;
    RunResult built = lab::Run(b);
    build_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("image_test: deploy/image/build.sh took %.1f s: %s", build_seconds_, built.out.c_str());
    if (built.exit_code != 0) {
      build_error_ = absl::StrCat("deploy/image/build.sh failed (exit ", built.exit_code, "): ", built.err, built.out);
      return;
    }
    lab::Lab& lab = Shared().lab();
    auto up = DnsServer::Start(DnsServerSpec{.netns = lab.world_netns(),
                                             .listen = {kUpstream},
                                             .records = {{kName, {lab::kPublicC4}}, {kDeniedName, {lab::kPublicD4}}}});
    ASSERT_TRUE(up.ok()) << up.status();
    upstream_ = std::move(*up).release();
    dirs_ = Shared().Other("image");
    config_dir_ = dirs_.runtime_dir + "-config";
    std::filesystem::create_directories(config_dir_);
    std::filesystem::create_directories(dirs_.runtime_dir);
    std::ofstream(config_dir_ + "/egressd.yaml") << "dns:\n  upstreams: [" << kUpstream
                                                 << "]\n  endpoint4: " << lab::kPodGatewayV4 << "\n";
  }
  static void TearDownTestSuite() {
    if (upstream_ == nullptr) return;
    Egressd::CtlAt(Shared().lab(), dirs_, {"unload"});
    delete upstream_;
    upstream_ = nullptr;
    std::error_code ec;
    std::filesystem::remove_all(config_dir_, ec);
  }
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    if (access("/vmtest/config", F_OK) == 0) {
      GTEST_SKIP() << "the vmtests guest has no podman/crun: the image runs on the host kernel (issue 16)";
    }
    if (!build_error_.empty()) {
      if (BpfRequired()) FAIL() << "REQUIRE_BPF=1: no image: " << build_error_;
      GTEST_SKIP() << "no image: " << build_error_;
    }
    ASSERT_NE(upstream_, nullptr);
    container_ = FromManifest();
    ASSERT_FALSE(container_.caps.empty());
    // The mounts the DaemonSet gives the daemon, all of which the run uses.
    std::vector<std::string> paths;
    for (const Mount& m : container_.mounts) paths.push_back(m.mount_path);
    ASSERT_EQ(absl::StrJoin(paths, " "), "/sys/fs/bpf /sys/fs/cgroup /run/egressd /etc/egressd");
    ASSERT_EQ(container_.command.at(0), "nsenter");
    name_ = absl::StrCat("egl-image-", getpid());
  }
  void TearDown() override {
    if (!name_.empty()) Podman({"rm", "--force", "--time", "0", name_});
    if (daemon_) daemon_->Stop();
    for (const auto& cg : registered_) Egressd::CtlAt(Shared().lab(), dirs_, {"sandbox", "remove", "--cgroup", cg});
  }
  static std::string socket() { return dirs_.runtime_dir + "/egressd.sock"; }
  static RunResult Podman(std::vector<std::string> args, std::chrono::milliseconds timeout = 60s) {
    RunSpec s;
    s.argv = {PodmanSh()};
    s.argv.insert(s.argv.end(), args.begin(), args.end());
    s.timeout = timeout;
    return lab::Run(s);
  }

  // podman run with the manifest's securityContext, volumes and command.
  RunSpec RunSpecFor(const std::string& cgroup) {
    lab::Lab& lab = Shared().lab();
    RunSpec s;
    s.cgroup = cgroup;  // the pod's cgroup: the container stays in it (podman.sh)
    s.timeout = 10min;
    s.argv = {PodmanSh(), "run", "--rm", "--name", name_, "--network", "ns:" + lab.node_netns(), "--pid", "host",
              // The kubelet's on cgroup v2 (podman's own default on v1 is the host's).
              "--cgroupns", "private", "--cap-drop", "all"};
    for (const auto& c : container_.caps) s.argv.insert(s.argv.end(), {"--cap-add", c});
    s.argv.insert(s.argv.end(),
                  {"--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined"});
    for (const Mount& m : container_.mounts) {
      s.argv.insert(s.argv.end(), {"--volume", VolumeFlag(m, dirs_.runtime_dir, config_dir_)});
    }
    // The lab's own: the node netns is a file under /var/run/netns, not the
    // host's /proc/1/ns/net that a real node's egressd would use.
    s.argv.insert(s.argv.end(),
                  {"--volume", lab.node_netns() + ":" + lab.node_netns() + ":ro", "--env", "EGRESSD_PIN_ROOT=" + dirs_.pin_root, "--env", "EGRESSD_RUNTIME_DIR=" + dirs_.runtime_dir,
                   "--env", "EGRESSD_NODE_NETNS=" + lab.node_netns(), "--entrypoint", container_.command[0], kImage});
    // The lab's hosts without the bpf LSM: the shared instance's opt-out
    // (egressd_env.cc), which the container does not inherit by itself.
    if (const char* v = std::getenv("EGRESSD_ACCEPT_UNCONTAINED_PACKET_SOCKETS"); v && std::string(v) == "1") {
      s.argv.insert(s.argv.end() - 1, {"--env", "EGRESSD_ACCEPT_UNCONTAINED_PACKET_SOCKETS=1"});
    }
    for (size_t i = 1; i < container_.command.size(); ++i) {
      std::string a = container_.command[i];
      if (a == "--cgroup=/proc/1/ns/cgroup") a = absl::StrCat("--cgroup=/proc/", getpid(), "/ns/cgroup");
      if (a == "/run/egressd/egressd.sock") a = socket();
      // The kubelet's expansion of the downward API's status.hostIP: the
      // lab node's address its pods reach.
      a = absl::StrReplaceAll(a, {{"$(NODE_IP)", lab::kPodGatewayV4}});
      s.argv.push_back(a);
    }
    return s;
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
  static inline std::string config_dir_;
  static inline std::string build_error_;
  static inline double build_seconds_ = 0;
  Container container_;
  std::string name_;
  std::optional<lab::Background> daemon_;
  std::vector<std::string> registered_;
};

TEST_F(Image, UnderPodmanAndCrunWithTheManifestsCapabilitiesAndMountsItEnforcesAndResolves) {
  auto cg = Shared().lab().MakeCgroup("image-container");
  ASSERT_TRUE(cg.ok()) << cg.status();
  auto bg = lab::Start(RunSpecFor(*cg));
  ASSERT_TRUE(bg.ok()) << bg.status();
  daemon_ = std::move(*bg);
  auto line = daemon_->ReadOutLine(std::chrono::milliseconds(int(180000 * TimeScale())));
  ASSERT_TRUE(line && absl::StartsWith(*line, "ready:")) << "the image's egressd never said ready: " << daemon_->err();

  // The kubelet's probes: exec in the container.
  for (const char* endpoint : {"healthz", "readyz"}) {
    RunResult p = Podman({"exec", name_, "/usr/local/bin/egressd", "--probe", endpoint, "--socket", socket()});
    EXPECT_EQ(p.exit_code, 0) << endpoint << ": " << p.Describe();
  }
  // The container's capabilities are the manifest's: egressd's own (the
  // nsenter execs it, so it is the container's pid 1), read from the host.
  RunResult pid = Podman({"inspect", "--format", "{{.State.Pid}}", name_});
  std::ifstream st(absl::StrCat("/proc/", absl::StripAsciiWhitespace(pid.out), "/status"));
  std::string status((std::istreambuf_iterator<char>(st)), {});
  uint64_t want = 0;
  for (const auto& c : container_.caps) {
    const int bit = CapBit(c);
    ASSERT_GE(bit, 0) << c;
    want |= uint64_t{1} << bit;
  }
  char cap_eff[64];
  std::snprintf(cap_eff, sizeof(cap_eff), "CapEff:\t%016llx\n", static_cast<unsigned long long>(want));
  EXPECT_TRUE(absl::StrContains(status, cap_eff)) << "want " << cap_eff << pid.Describe() << status;
  EXPECT_TRUE(absl::StrContains(status, "Name:\tegressd")) << status;

  auto s = daemon::Call(socket(), "GET", "/v1/status");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->body.value("programs", ""), "loaded") << s->body.dump();
  EXPECT_TRUE(s->body.value("enforcing", false)) << s->body.dump();

  // A lab pod registered through the API.
  auto pod_cg = Shared().lab().MakeCgroup("image-pod");
  ASSERT_TRUE(pod_cg.ok()) << pod_cg.status();
  registered_.push_back(*pod_cg);
  nlohmann::json body = {{"cgroup", *pod_cg}, {"egress", {lab::kPublicA4, kName}}};
  auto put = daemon::Call(socket(), "PUT", "/v1/sandboxes/image-pod", body.dump());
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(put->status, 201) << put->body.dump(2);
  EXPECT_TRUE(put->body.value("enforced", false)) << put->body.dump(2);

  // An allowed and a denied connection; an allowed and a denied name.
  EXPECT_TRUE(Ok(Connect(*pod_cg, lab::kPublicA4)));
  EXPECT_EQ(Errno(Connect(*pod_cg, lab::kPublicB4)), "EPERM");
  RunResult named = InPod(*pod_cg, {"dig", "+time=2", "+tries=1", "+short", "@8.8.8.8", kName});
  EXPECT_EQ(std::string(absl::StripAsciiWhitespace(named.out)), lab::kPublicC4) << named.Describe();
  EXPECT_TRUE(Ok(Connect(*pod_cg, lab::kPublicC4))) << "the name's address, learned through the image's proxy";
  const uint64_t denied_asked = upstream_->QueriesFor(kDeniedName);
  RunResult denied = InPod(*pod_cg, {"dig", "+time=2", "+tries=1", "+short", "@8.8.8.8", kDeniedName});
  EXPECT_FALSE(absl::StrContains(denied.out, lab::kPublicD4)) << denied.Describe();
  EXPECT_EQ(upstream_->QueriesFor(kDeniedName), denied_asked) << "a name outside the policy is never asked";
  EXPECT_EQ(Errno(Connect(*pod_cg, lab::kPublicD4)), "EPERM");

  auto del = daemon::Call(socket(), "DELETE", "/v1/sandboxes/image-pod");
  ASSERT_TRUE(del.ok()) << del.status();
  EXPECT_EQ(del->status, 200);
  registered_.clear();
}

}  // namespace
}  // namespace egressd::test
