#include "egressd_env.h"

#include <dirent.h>
#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include <nlohmann/json.hpp>

namespace egressd::test {

bool BpfRequired() {
  const char* v = std::getenv("REQUIRE_BPF");
  return v && std::string(v) == "1";
}

namespace {

constexpr char kAcceptUncontainedEnv[] = "EGRESSD_ACCEPT_UNCONTAINED_PACKET_SOCKETS";
constexpr char kPinPrefix[] = "/sys/fs/bpf/egr-test-";
constexpr char kRuntimePrefix[] = "/run/egressd-test-";
// Paths::DefaultRuntimeDir of a test pin root, used when none is given.
constexpr char kDefaultInstances[] = "/run/egressd/instances";
constexpr char kDefaultInstancePrefix[] = "/run/egressd/instances/sys_fs_bpf_egr-test-";

// The pid of the run that made "<prefix><pid>-<hex>[-suffix]", or 0.
pid_t OwnerOf(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return 0;
  return static_cast<pid_t>(std::atoi(name.c_str() + prefix.size()));
}

bool Gone(pid_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

std::vector<std::string> StaleIn(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> stale;
  DIR* d = opendir(dir.c_str());
  if (!d) return stale;
  while (dirent* e = readdir(d)) {
    std::string path = dir + "/" + e->d_name;
    if (Gone(OwnerOf(path, prefix))) stale.push_back(path);
  }
  closedir(d);
  return stale;
}

std::string RuntimeDirFor(const std::string& pin_root) {
  return kRuntimePrefix + pin_root.substr(std::string(kPinPrefix).size());
}

}  // namespace

int SweepStaleInstances() {
  int removed = 0;
  for (const auto& root : StaleIn("/sys/fs/bpf", kPinPrefix)) {
    lab::RunSpec spec;
    spec.argv = {lab::BinaryPath("egressctl"), "--pin-root", root, "--runtime-dir",
                 RuntimeDirFor(root), "unload", "--force"};
    lab::Run(spec);
    ++removed;
  }
  // After the unloads (which take the instance's lock in its runtime dir);
  // also the default runtime dirs of runs that did not name one.
  for (const auto& dir : StaleIn("/run", kRuntimePrefix)) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    ++removed;
  }
  for (const auto& dir : StaleIn(kDefaultInstances, kDefaultInstancePrefix)) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    ++removed;
  }
  return removed;
}

absl::StatusOr<std::unique_ptr<Egressd>> Egressd::Start() {
  SweepStaleInstances();
  auto e = std::unique_ptr<Egressd>(new Egressd);
  auto lab = lab::Lab::Create();
  if (!lab.ok()) return lab.status();
  e->lab_ = std::move(*lab);
  e->dirs_.pin_root = kPinPrefix + e->lab_->id();
  e->dirs_.runtime_dir = RuntimeDirFor(e->dirs_.pin_root);
  lab::RunResult r = e->Ctl({"load"});
  if (r.exit_code != 0) return absl::InternalError("egressctl load failed: " + r.Describe());
  // `sandbox add` refuses where the bpf LSM is not in force (this project's
  // 6.18 VM); the tests' registrations take the operator's opt-out there, and
  // only there, so a kernel with the LSM (6.1 in vmtests) runs the strict
  // default. Inherited by every egressctl the tests start, whatever instance.
  lab::RunResult st = e->Ctl({"status", "--json"});
  auto j = nlohmann::json::parse(st.out, nullptr, false);
  if (!j.is_object()) return absl::InternalError("egressctl status --json: " + st.Describe());
  if (!j.value("socket_containment", false)) setenv(kAcceptUncontainedEnv, "1", 1);
  return e;
}

Egressd::~Egressd() {
  lab::RunResult r = Ctl({"unload", "--force"});
  if (r.exit_code != 0) std::fprintf(stderr, "egressd test teardown: unload failed: %s\n", r.Describe().c_str());
  std::error_code ec;
  std::filesystem::remove_all(dirs_.runtime_dir, ec);
  // Other instances a failed test left loaded.
  for (const auto& d : others_) {
    if (std::filesystem::exists(d.pin_root, ec)) CtlAt(*lab_, d, {"unload", "--force"});
    std::filesystem::remove_all(d.runtime_dir, ec);
  }
}

InstanceDirs Egressd::Other(const std::string& suffix) const {
  InstanceDirs d{dirs_.pin_root + "-" + suffix, dirs_.runtime_dir + "-" + suffix};
  others_.push_back(d);
  return d;
}

std::map<std::string, std::string> Egressd::CtlEnv() const {
  return {{"EGRESSD_PIN_ROOT", dirs_.pin_root},
          {"EGRESSD_RUNTIME_DIR", dirs_.runtime_dir},
          {"EGRESSD_NODE_NETNS", lab_->node_netns()}};
}

lab::RunSpec Egressd::CtlSpec(const std::string& netns, std::vector<std::string> argv) const {
  lab::RunSpec spec;
  spec.argv = std::move(argv);
  spec.netns = netns;
  spec.env = CtlEnv();
  // A load verifies every program: seconds on a host, far more in a TCG guest.
  spec.timeout = std::chrono::milliseconds(static_cast<int64_t>(30000 * TimeScale()));
  return spec;
}

lab::RunResult Egressd::Ctl(const std::vector<std::string>& args) const {
  return CtlIn(lab_->node_netns(), args);
}

lab::RunResult Egressd::CtlIn(const std::string& netns, const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {lab::BinaryPath("egressctl")};
  argv.insert(argv.end(), args.begin(), args.end());
  return lab::Run(CtlSpec(netns, std::move(argv)));
}

lab::RunResult Egressd::CtlAt(const lab::Lab& lab, const InstanceDirs& dirs,
                              const std::vector<std::string>& args) {
  lab::RunSpec spec;
  spec.argv = {lab::BinaryPath("egressctl"), "--pin-root", dirs.pin_root, "--runtime-dir",
               dirs.runtime_dir};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.netns = lab.node_netns();
  spec.env["EGRESSD_NODE_NETNS"] = lab.node_netns();
  // A load verifies every program: seconds on a host, far more in a TCG guest.
  spec.timeout = std::chrono::milliseconds(static_cast<int64_t>(30000 * TimeScale()));
  return lab::Run(spec);
}

std::vector<std::string> Egressd::SandboxedArgv(const std::vector<std::string>& policy,
                                                const std::vector<std::string>& probe) const {
  // --host-root: the hostile client stays uid 0 of the initial user namespace
  // with CAP_NET_RAW, so raw attacks meet egressd's hooks, not a refused
  // socket() (the default sandbox's root is only its own namespace's).
  std::vector<std::string> argv = {lab::BinaryPath("egressctl"), "run", "--host-root"};
  argv.insert(argv.end(), policy.begin(), policy.end());
  argv.insert(argv.end(), {"--", "setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all",
                           "--", lab::BinaryPath("egressd-probe")});
  argv.insert(argv.end(), probe.begin(), probe.end());
  return argv;
}

lab::RunResult Egressd::RunSandboxed(const std::vector<std::string>& policy,
                                     const std::vector<std::string>& probe) const {
  return RunSandboxedIn(lab_->client_netns(), policy, probe);
}

lab::RunResult Egressd::RunSandboxedIn(const std::string& netns,
                                       const std::vector<std::string>& policy,
                                       const std::vector<std::string>& probe) const {
  return lab::Run(CtlSpec(netns, SandboxedArgv(policy, probe)));
}

absl::StatusOr<lab::Background> Egressd::StartSandboxed(const std::vector<std::string>& policy,
                                                        const std::vector<std::string>& probe) const {
  lab::RunSpec spec = CtlSpec(lab_->client_netns(), SandboxedArgv(policy, probe));
  spec.timeout = std::chrono::milliseconds(10000);
  return lab::Start(spec);
}

namespace {
std::unique_ptr<Egressd> g_shared;
std::once_flag g_once;

void DestroyShared() { g_shared.reset(); }
}  // namespace

Egressd& Shared() {
  std::call_once(g_once, [] {
    auto e = Egressd::Start();
    if (!e.ok()) {
      std::fprintf(stderr, "cannot start the lab + egressd: %s\n", e.status().ToString().c_str());
      std::abort();
    }
    g_shared = std::move(*e);
    std::atexit(DestroyShared);
  });
  return *g_shared;
}

std::vector<lab::ProbeLine> Lines(const lab::RunResult& r) { return lab::ParseProbeLines(r.out); }

lab::ProbeLine Only(const lab::RunResult& r) {
  auto lines = Lines(r);
  EXPECT_EQ(lines.size(), 1u) << r.Describe();
  return lines.empty() ? lab::ProbeLine{} : lines[0];
}

bool Ok(const lab::ProbeLine& l) {
  auto it = l.find("result");
  return it != l.end() && it->second == "ok";
}

bool SocketMadeAndSent(const lab::ProbeLine& l) {
  auto sock = l.find("socket");
  return sock != l.end() && sock->second == "created" && l.count("send_ret") == 1;
}

std::string Errno(const lab::ProbeLine& l) {
  auto it = l.find("errno");
  return it == l.end() ? "" : it->second;
}

std::string PodRouterMac(lab::Lab& lab) {
  lab::RunSpec s;
  s.argv = {"ip", "-j", "-n", lab.node_netns_name(), "link", "show", lab.pod().node_ifname};
  lab::RunResult r = lab::Run(s);
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (!j.is_array() || j.empty() || !j[0].contains("address")) return "";
  return j[0]["address"].get<std::string>();
}

std::map<std::string, uint32_t> LinkPrograms(const std::string& pins, const std::vector<std::string>& names) {
  std::vector<std::string> links = names;
  if (links.empty()) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(pins + "/links", ec)) links.push_back(e.path().filename());
  }
  std::map<std::string, uint32_t> out;
  for (const auto& name : links) {
    lab::RunSpec spec;
    spec.argv = {"bpftool", "-j", "link", "show", "pinned", pins + "/links/" + name};
    auto j = nlohmann::json::parse(lab::Run(spec).out, nullptr, false);
    if (j.is_object()) out[name] = j.value("prog_id", 0u);
  }
  return out;
}

}  // namespace egressd::test
