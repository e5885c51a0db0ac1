// egressd: the node daemon (userspace/daemon).  Flags to options, one
// io_context, run until SIGINT/SIGTERM, which stop serving and tear nothing
// down (only `egressctl unload` does); SIGHUP reloads the config.  `egressd --probe healthz|readyz` is
// the orchestrator's probe of a running daemon (its API is a unix socket).
#include <linux/capability.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "loader/libbpf_log.h"
#include "loader/pin_check.h"
#include "userspace/daemon/client.h"
#include "userspace/daemon/daemon.h"
#include "userspace/policy/deployment_config.h"

namespace {

// What the daemon does with each capability it needs (docs/operations.md,
// Capabilities; tests/priv/deploy_caps_test.cc drops each and sees the
// start fail).  CAP_SYS_ADMIN also makes bpf() and the LSM programs' loads
// pass (bpf_capable, perfmon_capable), so CAP_BPF and CAP_PERFMON add nothing.
struct NeededCap {
  int cap;
  const char* name;
  const char* why;
};
constexpr NeededCap kNeededCaps[] = {
    {CAP_SYS_ADMIN, "CAP_SYS_ADMIN",
     "setns into the node netns to read its cookie, the load's self-test's private netns, bpf() and "
     "the LSM programs"},
    {CAP_NET_ADMIN, "CAP_NET_ADMIN", "the load's self-test, which brings up lo with an address in its private netns"},
    {CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE", "the load's self-test, which makes its cgroup in the cgroup2 root (mode 0555)"},
};

// The first needed capability this process lacks (effective set), or null.
const NeededCap* MissingCapability() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return &kNeededCaps[0];
  for (const NeededCap& c : kNeededCaps) {
    if ((data[c.cap / 32].effective & (1u << (c.cap % 32))) == 0) return &c;
  }
  return nullptr;
}

std::string Cgroup2Line(const std::string& file) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

// The API judges a caller by /proc/<pid>/cgroup, which the kernel writes
// relative to the reader's cgroup namespace.  In a namespace below the
// node's (a container's private one) a sandbox's path reads "/../..", names
// no cgroup the daemon knows, and the sandbox's root would be served: so
// the daemon runs only in a cgroup namespace holding pid 1's cgroup and the
// whole cgroup2 mount it uses.  Empty when it does, else why not.
std::string ForeignCgroupNamespace() {
  const std::string init = Cgroup2Line("/proc/1/cgroup");
  if (init.rfind("/..", 0) == 0) {
    return "pid 1's cgroup reads " + init;
  }
  std::ifstream mounts("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mounts, line)) {
    // id parent major:minor root mountpoint ... - fstype source options
    std::istringstream fields(line);
    std::string id, parent, dev, root, point, f;
    fields >> id >> parent >> dev >> root >> point;
    while (fields >> f && f != "-") {
    }
    std::string fstype;
    fields >> fstype;
    if (fstype == "cgroup2" && root.rfind("/..", 0) == 0) {
      return "the cgroup2 mount at " + point + " reads as root " + root;
    }
  }
  return "";
}

// `egressd --probe healthz|readyz`: 0 when the daemon answers 200, else 1
// with its answer (or why there is none) on stderr.
int Probe(const std::string& socket_path, const std::string& what) {
  auto r = egressd::daemon::Call(socket_path, "GET", "/" + what);
  if (!r.ok()) {
    std::fprintf(stderr, "egressd: %s: %s\n", what.c_str(), r.status().ToString().c_str());
    return 1;
  }
  if (r->status != 200) {
    std::fprintf(stderr, "egressd: %s: %d %s\n", what.c_str(), r->status, r->body.dump().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace egressd;
  auto logger = spdlog::stderr_color_mt("egressd");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("egressd: %^%l%$: %v");
  spdlog::set_level(spdlog::level::info);
  BridgeLibbpfLogging();

  CLI::App app{"egressd: the node daemon (control API, DNS proxy, audit reader)"};
  daemon::DaemonOptions o;
  o.paths = Paths::FromEnvironment();
  app.add_option("--config", o.config_path, "Deployment config (egressd.yaml); default: the embedded one "
                                            "(floor connected, no DNS upstream)");
  app.add_option("--socket", o.socket_path, "The API's unix socket (default <runtime dir>/egressd.sock)");
  app.add_option("--pin-root", o.paths.pin_root, "bpffs directory of this instance")->capture_default_str();
  auto* runtime_dir = app.add_option("--runtime-dir", o.paths.runtime_dir, "Runtime state of this instance");
  app.add_option("--node-netns", o.paths.node_netns, "The node's network namespace (EGRESSD_NODE_NETNS)")
      ->capture_default_str();
  app.add_flag("--accept-uncontained-packet-sockets", o.accept_uncontained,
               "Register sandboxes even where the bpf LSM is not in force (also "
               "EGRESSD_ACCEPT_UNCONTAINED_PACKET_SOCKETS=1); see README, Sockets");
  app.add_option("--audit-window-ms", o.audit_window_ms, "Audit fold window")->capture_default_str();
  app.add_option("--kubelet-cgroup-root", o.kubelet_cgroup_roots,
                 "Where the kubelet's kubepods cgroups live, for PUTs naming a pod_uid (repeatable; default: "
                 "the cgroup2 mount)");
  app.add_option("--metrics-address", o.metrics_address,
                 "Serve Prometheus /metrics on IP:PORT or [IPv6]:PORT (overrides the config's metrics.address; "
                 "one address of the node, guarded from every sandbox)");
  bool quiet = false;
  app.add_flag("-q,--quiet", quiet, "Warnings and errors only");
  std::string probe;
  app.add_option("--probe", probe, "Ask a running daemon's /healthz or /readyz at --socket and exit 0 if 200, else 1 "
                                   "(the orchestrator's liveness and readiness probes)")
      ->check(CLI::IsMember({"healthz", "readyz"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (runtime_dir->count() == 0 && std::getenv("EGRESSD_RUNTIME_DIR") == nullptr) {
    o.paths.runtime_dir = Paths::DefaultRuntimeDir(o.paths.pin_root);
  }
  if (const char* env = std::getenv("EGRESSD_ACCEPT_UNCONTAINED_PACKET_SOCKETS"); env && std::string(env) == "1") {
    o.accept_uncontained = true;
  }
  if (o.audit_window_ms <= 0) {
    std::fprintf(stderr, "egressd: --audit-window-ms %d must be positive\n", o.audit_window_ms);
    return 2;
  }
  if (!o.metrics_address.empty()) {
    if (auto a = policy::ParseMetricsAddress(o.metrics_address); !a.ok()) {
      std::fprintf(stderr, "egressd: --metrics-address: %s\n", std::string(a.status().message()).c_str());
      return 2;
    }
  }
  if (quiet) spdlog::set_level(spdlog::level::warn);
  signal(SIGPIPE, SIG_IGN);
  if (!probe.empty()) {
    return Probe(o.socket_path.empty() ? daemon::DefaultSocketPath(o.paths) : o.socket_path, probe);
  }
  if (const NeededCap* missing = MissingCapability()) {
    std::fprintf(stderr, "egressd: missing capability %s (needed for: %s): give the daemon %s", missing->name,
                 missing->why, kNeededCaps[0].name);
    for (size_t i = 1; i < std::size(kNeededCaps); ++i) std::fprintf(stderr, ", %s", kNeededCaps[i].name);
    std::fprintf(stderr, " (docs/operations.md, Capabilities)\n");
    return 1;
  }
  if (std::string why = ForeignCgroupNamespace(); !why.empty()) {
    std::fprintf(stderr,
                 "egressd: runs in a cgroup namespace below the node's (%s): callers' cgroups would read relative "
                 "to it and the API could not tell a sandbox's caller; run egressd in the node's cgroup namespace "
                 "(deploy/kubernetes: nsenter --cgroup=/proc/1/ns/cgroup)\n",
                 why.c_str());
    return 1;
  }

  boost::asio::io_context io;
  // Before anything starts: a signal during start-up stops the loop at once.
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    spdlog::info("signal {}: stopping (enforcement stays in force; `egressctl unload` removes it)", sig);
    io.stop();
  });
  // SIGHUP re-reads --config (Daemon::Reload); caught from here on, so one
  // during start-up waits for the loop instead of killing the daemon.
  boost::asio::signal_set hup(io, SIGHUP);
  // Superseded by a new daemon (a rolling update): it serves our sockets
  // and every query we read is answered, so this one exits.
  o.on_superseded = [&] { io.stop(); };
  auto d = daemon::Daemon::Create(io, o);
  if (!d.ok()) {
    std::fprintf(stderr, "egressd: %s\n", d.status().ToString().c_str());
    // 4: the pinned state cannot be adopted (loader/pin_check.h), as egressctl's.
    return absl::IsInvalidArgument(d.status()) ? 2 : egressd::IsPinnedStateError(d.status()) ? 4 : 1;
  }
  // For whoever waits on it (tests, scripts): the API is up.
  std::printf("ready: %s\n", (*d)->socket_path().c_str());
  std::fflush(stdout);
  std::function<void()> await_hup = [&] {
    hup.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec || (*d)->superseded()) return;  // superseded: the new daemon's config counts
      daemon::Response r = (*d)->Reload("SIGHUP");
      // For whoever waits on it, as "ready:" is: the reload's HTTP status
      // and its answer on one line.
      std::printf("reloaded: %d %s\n", r.status, r.body.dump().c_str());
      std::fflush(stdout);
      await_hup();
    });
  };
  await_hup();
  io.run();
  return 0;
}
