// deploy/kubernetes rendered by `kubectl kustomize` (base and both overlays)
// and checked where a mistake would cost a node its enforcement or more
// than it needs: hostNetwork and hostPID, the rolling update (maxSurge 1,
// maxUnavailable 0, no container ports), exactly the daemon's capabilities
// and no privileged daemon, the hostPath mounts, bpffs mounted on the host
// by a bidirectional init container, the probes through `egressd --probe`,
// the config the daemon would read, the metrics Service.
#include <stdio.h>
#include <sys/wait.h>

#include <algorithm>
#include <map>
#include <utility>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/deploy/manifest.h"
#include "userspace/policy/deployment_config.h"

namespace egressd::test {
namespace {

using namespace manifest;

// What the daemon container may hold: the daemon's own three
// (tools/egressd/main.cc checks them at start) and CAP_SYS_PTRACE for the
// nsenter into pid 1's cgroup namespace (tests/priv/deploy_caps_test.cc
// drops each).
const std::set<std::string> kCaps = {"SYS_ADMIN", "NET_ADMIN", "DAC_OVERRIDE", "SYS_PTRACE"};

std::string Render(const std::string& dir, int* exit_code) {
  const std::string cmd = absl::StrCat(EGR_KUBECTL, " kustomize ", EGR_SOURCE_DIR, "/deploy/kubernetes/", dir, " 2>&1");
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *exit_code = -1;
    return "popen failed";
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int st = pclose(p);
  *exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

class Rendered : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // One render per directory for the whole binary (kubectl takes a second).
    static std::map<std::string, std::pair<int, std::string>> cache;
    auto it = cache.find(GetParam());
    if (it == cache.end()) {
      int rendered_code = 0;
      std::string out = Render(GetParam(), &rendered_code);
      it = cache.emplace(GetParam(), std::make_pair(rendered_code, out)).first;
    }
    const int code = it->second.first;
    text_ = it->second.second;
    ASSERT_EQ(code, 0) << EGR_KUBECTL << " kustomize " << GetParam() << ": " << text_;
    docs_ = Documents(walker_, text_);
    ASSERT_TRUE(errors_.empty()) << absl::StrJoin(errors_, "\n");
    ds_ = OfKind(docs_, "DaemonSet", "egressd");
    ASSERT_NE(ds_, nullptr) << text_;
    pod_ = At(ds_, "spec.template.spec");
    daemon_ = Find(Get(pod_, "containers"), "name", "egressd");
    ASSERT_NE(daemon_, nullptr) << text_;
  }
  // The hostPath behind the volume a container mounts at `path`.
  std::string HostPathAt(const Node* container, const std::string& path) {
    const Node* m = Find(Get(container, "volumeMounts"), "mountPath", path);
    const Node* v = Find(Get(pod_, "volumes"), "name", Scalar(Get(m, "name")));
    return Scalar(At(v, "hostPath.path"));
  }

  std::vector<std::string> errors_;
  policy::yaml::Walker walker_{"manifest", &errors_};
  std::string text_;
  std::vector<const Node*> docs_;
  const Node* ds_ = nullptr;
  const Node* pod_ = nullptr;
  const Node* daemon_ = nullptr;
};

TEST_P(Rendered, HostNetworkHostPidAndARollingUpdateThatCanSurge) {
  EXPECT_EQ(Scalar(Get(pod_, "hostNetwork")), "true");
  EXPECT_EQ(Scalar(Get(pod_, "hostPID")), "true") << "the API's peer check reads callers' /proc/<pid>";
  EXPECT_EQ(Scalar(At(ds_, "spec.updateStrategy.type")), "RollingUpdate");
  EXPECT_EQ(Scalar(At(ds_, "spec.updateStrategy.rollingUpdate.maxSurge")), "1");
  EXPECT_EQ(Scalar(At(ds_, "spec.updateStrategy.rollingUpdate.maxUnavailable")), "0");
  // With hostNetwork a declared port is a host port: the surge pod would
  // never schedule beside the old one.
  for (const char* list : {"containers", "initContainers"}) {
    const Node* seq = Get(pod_, list);
    ASSERT_TRUE(seq && seq->IsSequence()) << list;
    for (const Node* c : seq->items) {
      EXPECT_EQ(Get(c, "ports"), nullptr) << list << " " << Scalar(Get(c, "name")) << " declares ports";
    }
  }
}

TEST_P(Rendered, TheDaemonHasExactlyItsCapabilitiesAndIsNotPrivileged) {
  const Node* sc = Get(daemon_, "securityContext");
  ASSERT_NE(sc, nullptr);
  EXPECT_NE(Scalar(Get(sc, "privileged")), "true");
  EXPECT_EQ(Scalars(At(sc, "capabilities.drop")), std::vector<std::string>{"ALL"});
  std::vector<std::string> add = Scalars(At(sc, "capabilities.add"));
  EXPECT_EQ(std::set<std::string>(add.begin(), add.end()), kCaps) << absl::StrJoin(add, ",");
  EXPECT_EQ(add.size(), kCaps.size()) << "listed twice: " << absl::StrJoin(add, ",");
  // Only the one-line init container is privileged (bidirectional mount
  // propagation requires it), and it runs nothing but the bpffs mount.
  for (const Node* c : Get(pod_, "containers")->items) {
    EXPECT_NE(Scalar(At(c, "securityContext.privileged")), "true") << Scalar(Get(c, "name"));
  }
  const Node* init = Find(Get(pod_, "initContainers"), "name", "mount-bpffs");
  ASSERT_NE(init, nullptr);
  EXPECT_EQ(Get(pod_, "initContainers")->items.size(), 1u);
  std::vector<std::string> cmd = Scalars(Get(init, "command"));
  ASSERT_FALSE(cmd.empty());
  EXPECT_NE(cmd.back().find("mount -t bpf bpf /sys/fs/bpf"), std::string::npos) << cmd.back();
  // The daemon joins the node's cgroup namespace before it starts.
  std::vector<std::string> run = Scalars(Get(daemon_, "command"));
  ASSERT_GE(run.size(), 4u);
  EXPECT_EQ(run[0], "nsenter");
  EXPECT_EQ(run[1], "--cgroup=/proc/1/ns/cgroup");
  EXPECT_EQ(run[3], "/usr/local/bin/egressd");
}

TEST_P(Rendered, BpffsCgroupRootAndRuntimeDirAreTheHostsAndBpffsIsMountedBidirectionally) {
  EXPECT_EQ(HostPathAt(daemon_, "/sys/fs/bpf"), "/sys/fs/bpf");
  EXPECT_EQ(HostPathAt(daemon_, "/sys/fs/cgroup"), "/sys/fs/cgroup");
  EXPECT_EQ(HostPathAt(daemon_, "/run/egressd"), "/run/egressd");
  const Node* bpf = Find(Get(daemon_, "volumeMounts"), "mountPath", "/sys/fs/bpf");
  EXPECT_EQ(Scalar(Get(bpf, "mountPropagation")), "HostToContainer")
      << "the init container's mount must be seen by the daemon";
  const Node* init = Find(Get(pod_, "initContainers"), "name", "mount-bpffs");
  EXPECT_EQ(HostPathAt(init, "/sys/fs/bpf"), "/sys/fs/bpf");
  const Node* im = Find(Get(init, "volumeMounts"), "mountPath", "/sys/fs/bpf");
  EXPECT_EQ(Scalar(Get(im, "mountPropagation")), "Bidirectional");
  const Node* config = Find(Get(pod_, "volumes"), "name", "config");
  EXPECT_EQ(Scalar(At(config, "configMap.name")), "egressd-config");
  EXPECT_EQ(Scalar(Get(Find(Get(daemon_, "volumeMounts"), "name", "config"), "mountPath")), "/etc/egressd");
}

TEST_P(Rendered, ProbesAskTheHealthEndpointsThroughTheSocket) {
  const std::vector<std::string> socket = {"--socket", "/run/egressd/egressd.sock"};
  for (const auto& [probe, endpoint] : std::vector<std::pair<std::string, std::string>>{
           {"livenessProbe", "healthz"}, {"readinessProbe", "readyz"}, {"startupProbe", "healthz"}}) {
    std::vector<std::string> cmd = Scalars(At(daemon_, probe + ".exec.command"));
    ASSERT_EQ(cmd.size(), 5u) << probe;
    EXPECT_EQ(cmd[0], "/usr/local/bin/egressd") << probe;
    EXPECT_EQ(cmd[1], "--probe") << probe;
    EXPECT_EQ(cmd[2], endpoint) << probe;
    EXPECT_EQ(std::vector<std::string>(cmd.begin() + 3, cmd.end()), socket) << probe;
  }
  std::vector<std::string> run = Scalars(Get(daemon_, "command"));
  EXPECT_NE(std::search(run.begin(), run.end(), socket.begin(), socket.end()), run.end())
      << "the daemon listens where the probes ask";
}

TEST_P(Rendered, TheMetricsServiceSelectsTheDaemonByPortNumber) {
  const Node* svc = OfKind(docs_, "Service", "egressd-metrics");
  ASSERT_NE(svc, nullptr);
  EXPECT_EQ(Scalar(At(svc, "spec.clusterIP")), "None");
  const Node* labels = At(ds_, "spec.template.metadata.labels");
  const Node* sel = At(svc, "spec.selector");
  ASSERT_TRUE(sel && sel->IsMap());
  for (const auto& [k, v] : sel->map) EXPECT_EQ(Scalar(Get(labels, k->scalar)), v->scalar) << k->scalar;
  const Node* port = Find(At(svc, "spec.ports"), "name", "metrics");
  EXPECT_EQ(Scalar(Get(port, "targetPort")), "9464");
  EXPECT_EQ(Scalar(At(ds_, "spec.template.spec.serviceAccountName")), "egressd");
  EXPECT_NE(OfKind(docs_, "ServiceAccount", "egressd"), nullptr);
}

// The daemon serves /metrics on its node's own IP at the port the Service
// scrapes: --metrics-address $(NODE_IP):PORT, NODE_IP from the downward API's
// status.hostIP (the address the headless Service lists for a hostNetwork
// pod), and the daemon accepts that form once the kubelet expanded it.
TEST_P(Rendered, TheDaemonServesMetricsOnItsNodesIpAtTheServicesPort) {
  const std::vector<std::string> run = Scalars(Get(daemon_, "command"));
  auto flag = std::find(run.begin(), run.end(), "--metrics-address");
  ASSERT_NE(flag, run.end()) << "the daemon is given no --metrics-address";
  ASSERT_NE(flag + 1, run.end());
  const std::string value = *(flag + 1);
  const Node* env = Find(Get(daemon_, "env"), "name", "NODE_IP");
  ASSERT_NE(env, nullptr) << "NODE_IP is not in the daemon's env";
  EXPECT_EQ(Scalar(At(env, "valueFrom.fieldRef.fieldPath")), "status.hostIP");
  ASSERT_EQ(value.rfind("$(NODE_IP):", 0), 0u) << value;
  const std::string port = value.substr(std::string("$(NODE_IP):").size());
  const Node* svc = OfKind(docs_, "Service", "egressd-metrics");
  ASSERT_NE(svc, nullptr);
  EXPECT_EQ(Scalar(Get(Find(At(svc, "spec.ports"), "name", "metrics"), "targetPort")), port)
      << "the Service scrapes another port than the daemon listens on";
  // As the kubelet expands it on a node, the daemon's parse takes it.
  auto parsed = policy::ParseMetricsAddress("192.0.2.7:" + port);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->addr.ToString(), "192.0.2.7");
  EXPECT_EQ(std::to_string(parsed->port), port);
  // The config itself names no metrics.address (a shared one would be one
  // node's IP on every node).
  const std::string yaml = Scalar(Get(Get(OfKind(docs_, "ConfigMap", "egressd-config"), "data"), "egressd.yaml"));
  std::vector<std::string> errs;
  policy::yaml::Walker w("config", &errs);
  const Node* cfg = w.Load(yaml, "egressd.yaml");
  ASSERT_NE(cfg, nullptr) << absl::StrJoin(errs, "\n");
  EXPECT_EQ(Get(cfg, "metrics"), nullptr);
}

// The config the daemon reads: the base's and the mixed pool's parse as the
// daemon parses them (a bad one would exit 2 on every node), with the
// cluster DNS named as the upstream.  The sandbox-only pool's names its
// contained roots (containedRoots: parsed by the daemon once issue 14's
// reload work lands).
TEST_P(Rendered, TheConfigNamesTheClusterDnsAndTheDaemonAcceptsIt) {
  const Node* cm = OfKind(docs_, "ConfigMap", "egressd-config");
  ASSERT_NE(cm, nullptr);
  const std::string yaml = Scalar(Get(Get(cm, "data"), "egressd.yaml"));
  ASSERT_FALSE(yaml.empty()) << text_;
  if (GetParam() == "overlays/sandbox-only") {
    std::vector<std::string> errs;
    policy::yaml::Walker w("config", &errs);
    const Node* cfg = w.Load(yaml, "egressd.yaml");
    ASSERT_NE(cfg, nullptr) << absl::StrJoin(errs, "\n");
    EXPECT_EQ(Scalars(Get(cfg, "containedRoots")),
              (std::vector<std::string>{"/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice",
                                        "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice"}));
    EXPECT_EQ(Scalar(Get(Get(pod_, "nodeSelector"), "egressd.io/pool")), "sandbox");
    return;
  }
  auto parsed = policy::ParseDeploymentConfig(yaml, "egressd.yaml", nullptr);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->dns.upstreams.size(), 1u);
  EXPECT_EQ(parsed->dns.upstreams[0].addr.ToString(), "10.96.0.10");
  EXPECT_TRUE(parsed->dns.endpoint4.has_value());
  if (GetParam() == "overlays/mixed") {
    EXPECT_EQ(Scalar(Get(Get(pod_, "nodeSelector"), "egressd.io/pool")), "mixed");
  }
}

INSTANTIATE_TEST_SUITE_P(Kustomize, Rendered,
                         ::testing::Values("base", "overlays/sandbox-only", "overlays/mixed"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace_if(n.begin(), n.end(), [](char c) { return !isalnum(c); }, '_');
                           return n;
                         });

}  // namespace
}  // namespace egressd::test
