#include "egressd_env.h"

#include <dirent.h>
#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>

namespace egressd::test {

bool BpfRequired() {
  const char* v = std::getenv("REQUIRE_BPF");
  return v && std::string(v) == "1";
}

namespace {

// Unloads egressd instances left by test runs whose process is gone (a run
// killed before its teardown), so pins never accumulate.
void SweepStalePinRoots() {
  const std::string prefix = "egr-test-";
  DIR* d = opendir("/sys/fs/bpf");
  if (!d) return;
  std::vector<std::string> stale;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind(prefix, 0) != 0) continue;
    pid_t owner = std::atoi(n.c_str() + prefix.size());
    if (owner > 0 && kill(owner, 0) != 0 && errno == ESRCH) stale.push_back("/sys/fs/bpf/" + n);
  }
  closedir(d);
  for (const auto& root : stale) {
    lab::RunSpec spec;
    spec.argv = {lab::BinaryPath("egressctl"), "--pin-root", root, "unload", "--force"};
    lab::Run(spec);
  }
}

}  // namespace

double TimeScale() {
  const char* v = std::getenv("EGR_TIME_SCALE");
  double scale = v ? std::atof(v) : 1.0;
  return scale >= 1.0 ? scale : 1.0;
}

absl::StatusOr<std::unique_ptr<Egressd>> Egressd::Start() {
  SweepStalePinRoots();
  auto e = std::unique_ptr<Egressd>(new Egressd);
  auto lab = lab::Lab::Create();
  if (!lab.ok()) return lab.status();
  e->lab_ = std::move(*lab);
  e->pin_root_ = "/sys/fs/bpf/egr-test-" + e->lab_->id();
  lab::RunResult r = e->Ctl({"load"});
  if (r.exit_code != 0) return absl::InternalError("egressctl load failed: " + r.Describe());
  return e;
}

Egressd::~Egressd() {
  lab::RunResult r = Ctl({"unload", "--force"});
  if (r.exit_code != 0) std::fprintf(stderr, "egressd test teardown: unload failed: %s\n", r.Describe().c_str());
}

lab::RunResult Egressd::Ctl(const std::vector<std::string>& args, const std::string& netns) const {
  lab::RunSpec spec;
  spec.argv = {lab::BinaryPath("egressctl")};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.netns = netns;
  spec.env["EGRESSD_PIN_ROOT"] = pin_root_;
  spec.timeout = std::chrono::milliseconds(30000);
  return lab::Run(spec);
}

std::vector<std::string> Egressd::SandboxedArgv(const std::vector<std::string>& policy,
                                                const std::vector<std::string>& probe) const {
  std::vector<std::string> argv = {lab::BinaryPath("egressctl"), "run"};
  argv.insert(argv.end(), policy.begin(), policy.end());
  argv.insert(argv.end(), {"--", "setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all",
                           "--", lab::BinaryPath("egressd-probe")});
  argv.insert(argv.end(), probe.begin(), probe.end());
  return argv;
}

lab::RunResult Egressd::RunSandboxed(const std::vector<std::string>& policy,
                                     const std::vector<std::string>& probe) const {
  lab::RunSpec spec;
  spec.argv = SandboxedArgv(policy, probe);
  spec.netns = lab_->client_netns();
  spec.env["EGRESSD_PIN_ROOT"] = pin_root_;
  spec.timeout = std::chrono::milliseconds(30000);
  return lab::Run(spec);
}

absl::StatusOr<lab::Background> Egressd::StartSandboxed(const std::vector<std::string>& policy,
                                                        const std::vector<std::string>& probe) const {
  lab::RunSpec spec;
  spec.argv = SandboxedArgv(policy, probe);
  spec.netns = lab_->client_netns();
  spec.env["EGRESSD_PIN_ROOT"] = pin_root_;
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

std::string Errno(const lab::ProbeLine& l) {
  auto it = l.find("errno");
  return it == l.end() ? "" : it->second;
}

}  // namespace egressd::test
