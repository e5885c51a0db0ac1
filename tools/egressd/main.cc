// egressd: the node daemon (userspace/daemon).  Flags to options, one
// io_context, run until SIGINT/SIGTERM, which stop serving and tear nothing
// down (only `egressctl unload` does).
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "loader/libbpf_log.h"
#include "userspace/daemon/daemon.h"

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
  bool quiet = false;
  app.add_flag("-q,--quiet", quiet, "Warnings and errors only");
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
  if (quiet) spdlog::set_level(spdlog::level::warn);
  signal(SIGPIPE, SIG_IGN);

  boost::asio::io_context io;
  // Before anything starts: a signal during start-up stops the loop at once.
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    spdlog::info("signal {}: stopping (enforcement stays in force; `egressctl unload` removes it)", sig);
    io.stop();
  });
  auto d = daemon::Daemon::Create(io, o);
  if (!d.ok()) {
    std::fprintf(stderr, "egressd: %s\n", d.status().ToString().c_str());
    return absl::IsInvalidArgument(d.status()) ? 2 : 1;
  }
  // For whoever waits on it (tests, scripts): the API is up.
  std::printf("ready: %s\n", (*d)->socket_path().c_str());
  std::fflush(stdout);
  io.run();
  return 0;
}
