// egressctl run: a transient sandbox around one command.
#include <limits.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "userspace/common/node.h"
#include "loader/loader.h"
#include "userspace/common/instance_lock.h"
#include "loader/probe.h"
#include "maps/lpm_keys.h"
#include "userspace/common/errors.h"
#include "userspace/common/fault.h"
#include "tools/egressctl/commands.h"
#include "userspace/sandbox/isolation.h"
#include "userspace/sandbox/no_lsm_fallback.h"
#include "tools/egressctl/policy_flags.h"
#include "tools/egressctl/run_dns.h"
#include "tools/egressctl/run_daemon.h"
#include "userspace/control/sandbox_record.h"
#include "tools/egressctl/sandbox_flags.h"
#include "userspace/common/cgroup_tree.h"
#include "userspace/control/reconcile.h"
#include "userspace/control/registry.h"
#include "userspace/audit/line_file.h"
#include "userspace/audit/trail.h"
#include "userspace/audit/lifecycle.h"
#include "userspace/audit/user_events.h"

namespace egressd::cli {
namespace {

absl::Status ResolveIdentity(const RunFlags& run, sandbox::IsolationSpec& spec) {
  if (run.host_root) {
    if (!run.user.empty()) return absl::InvalidArgumentError("--host-root and --user \"" + run.user + "\": choose one");
    spec.identity = sandbox::Identity::kHostRoot;
    return absl::OkStatus();
  }
  if (run.user.empty()) {
    spec.identity = sandbox::Identity::kNamespaceRoot;
    return absl::OkStatus();
  }
  uint32_t uid = 0;
  if (absl::SimpleAtoi(run.user, &uid)) {
    const passwd* pw = getpwuid(uid);
    spec.uid = uid;
    spec.gid = pw ? pw->pw_gid : uid;
  } else {
    const passwd* pw = getpwnam(run.user.c_str());
    if (!pw) return absl::InvalidArgumentError(absl::StrCat("--user \"", run.user, "\": no such user"));
    spec.uid = pw->pw_uid;
    spec.gid = pw->pw_gid;
  }
  if (spec.uid == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--user \"", run.user, "\" is the node's root: without --user the command is already root of its "
        "own user namespace; --host-root makes it the node's (see egressctl run --help)"));
  }
  spec.identity = sandbox::Identity::kUser;
  return absl::OkStatus();
}

// The working directory (written and started in) and the other writable
// directories. The current directory is the default working directory, but
// one that may not be writable ("/", /proc...) only stays read-only: the
// command still starts there.
absl::Status ResolveWritable(const RunFlags& run, sandbox::IsolationSpec& spec) {
  const auto& hidden = spec.view.hide_dirs;
  if (!run.workdir.empty()) {
    auto dir = sandbox::CheckWritableDir(run.workdir, hidden);
    if (!dir.ok()) return absl::InvalidArgumentError(absl::StrCat("--workdir ", dir.status().message()));
    spec.view.writable.push_back(*dir);
    spec.start_dir = *dir;
  } else {
    char buf[PATH_MAX];
    if (!getcwd(buf, sizeof(buf))) return ErrnoStatus(errno, "getcwd");
    spec.start_dir = buf;
    auto dir = sandbox::CheckWritableDir(buf, hidden);
    if (dir.ok()) {
      spec.view.writable.push_back(*dir);
    } else {
      spdlog::info("the current directory stays read-only in the sandbox: {}", std::string(dir.status().message()));
    }
  }
  for (const auto& w : run.writable) {
    auto dir = sandbox::CheckWritableDir(w, hidden);
    if (!dir.ok()) return absl::InvalidArgumentError(absl::StrCat("--writable ", dir.status().message()));
    spec.view.writable.push_back(*dir);
  }
  // The same rules as --writable (what would show a hidden directory is refused).
  // EGRESSD_RUN_READABLE (colon-separated) adds to --readable: the test suite
  // sets it to its build tree, which may lie under /tmp.
  std::vector<std::string> readable = run.readable;
  if (const char* env = std::getenv("EGRESSD_RUN_READABLE"); env != nullptr && *env != '\0') {
    for (absl::string_view d : absl::StrSplit(env, ':', absl::SkipEmpty())) readable.emplace_back(d);
  }
  for (const auto& r : readable) {
    auto dir = sandbox::CheckWritableDir(r, hidden);
    if (!dir.ok()) return absl::InvalidArgumentError(absl::StrCat("--readable ", dir.status().message()));
    spec.view.readable.push_back(*dir);
  }
  return absl::OkStatus();
}

// The sandbox's files belong to its node uid: say so when its working
// directory will refuse it (the mount is writable, the permissions are not).
void WarnIfNotWritable(const sandbox::IsolationSpec& spec, bool explicit_workdir) {
  if (spec.identity == sandbox::Identity::kHostRoot || spec.view.writable.empty()) return;
  const std::string& dir = spec.view.writable.front();
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return;
  bool ok = (st.st_uid == spec.view.run_owner && (st.st_mode & S_IWUSR)) ||
            (st.st_gid == spec.view.run_group && (st.st_mode & S_IWGRP)) || (st.st_mode & S_IWOTH);
  if (ok) return;
  auto level = explicit_workdir ? spdlog::level::warn : spdlog::level::info;
  spdlog::log(level, "{} is not writable by uid {}, which the sandbox's command is on the node", dir,
              spec.view.run_owner);
}

// The first `egressctl run` on a machine loads egressd itself.
absl::Status EnsureLoaded(const Paths& paths) {
  if (IsLoaded(paths)) return absl::OkStatus();
  if (auto s = RequireKernel(paths); !s.ok()) return s;
  auto lock = InstanceLock::Acquire(paths);
  if (!lock.ok()) return lock.status();
  if (IsLoaded(paths)) return absl::OkStatus();
  if (auto r = LoadEnforcement(paths, *lock); !r.ok()) return r.status();
  return control::Reconcile(paths, *lock).status();
}

// Where the bpf LSM is not in force, the command runs under the seccomp
// fallback instead (userspace/sandbox/no_lsm_fallback.h), which egressctl
// says in one line: a workload that asked to be contained is never run
// uncontained, and `run` always asks. --require-socket-containment refuses
// instead.
absl::Status ChooseSocketContainment(const Paths& paths, bool required, sandbox::IsolationSpec& spec) {
  absl::Status s = RequireSocketContainment(paths);
  if (s.ok() || required || !absl::IsFailedPrecondition(s)) return s;
  spec.no_lsm_fallback = true;
  const char* net_raw = spec.identity == sandbox::Identity::kHostRoot
                            ? "--host-root keeps CAP_NET_RAW for raw IP sockets, which the skb backstop judges"
                            : "the command has no CAP_NET_RAW";
  const char* unix = sandbox::AbstractUnixScopeAvailable()
                         ? "abstract unix sockets are its own only (Landlock scope)"
                         : "the node's abstract unix sockets stay reachable (this kernel has no Landlock scope)";
  std::fprintf(stderr,
               "egressctl: WARNING: the bpf LSM is not in force on this node (see `egressctl probe`), so the "
               "sandbox runs under a seccomp filter instead: sockets only of AF_INET, AF_INET6, AF_UNIX and "
               "AF_NETLINK (no packet socket at all), no io_uring; %s; %s\n",
               net_raw, unix);
  return absl::OkStatus();
}

}  // namespace

int CmdRun(const Paths& paths, const PolicyFlags& flags, const SandboxFlags& sandbox_flags, const RunFlags& run,
           const std::vector<std::string>& command) {
  // Everything that can be wrong with the input is reported before anything
  // is created or the command starts.  run serves its sandbox's DNS itself
  // whenever an upstream is known, and refuses a policy with names when none
  // is: its names are always enforced.
  auto policy = CompileFlags(flags, /*dns_served=*/true, &sandbox_flags);
  if (!policy.ok()) {
    if (absl::IsInvalidArgument(policy.status())) {
      audit::WriteOneUserEvent(paths, audit::PolicyRejectedJson(0, "run", "", std::string(policy.status().message())), 0);
    }
    return Report(policy.status());
  }
  // A running daemon takes the sandbox (tools/egressctl/run_daemon.h): it
  // compiles under its own deployment and serves the DNS.
  const std::optional<std::string> daemon_socket = RunDaemonSocket(paths, flags, run);
  auto config_dns = ConfigDns(flags.config);
  if (!config_dns.ok()) return Report(config_dns.status());
  std::string resolv_conf;
  if (run.upstream_dns.empty() && config_dns->upstreams.empty()) {
    std::ifstream in("/etc/resolv.conf");
    std::stringstream ss;
    ss << in.rdbuf();
    resolv_conf = ss.str();
  }
  auto upstreams = daemon_socket ? absl::StatusOr<std::vector<dns::UpstreamServer>>(std::vector<dns::UpstreamServer>{})
                                 : RunUpstreams(run.upstream_dns, ToUpstreams(config_dns->upstreams), resolv_conf, *policy);
  if (!upstreams.ok()) return Report(upstreams.status());
  SandboxFlags sandbox = sandbox_flags;
  // The endpoint is in the netns egressctl (and so the command) runs in: its
  // loopback unless --dns-endpoint4/6 names another address.
  const bool serve_dns = !upstreams->empty();
  if (serve_dns && sandbox.dns_endpoint4.empty() && sandbox.dns_endpoint6.empty()) {
    sandbox.dns_endpoint4 = "127.0.0.1";
    sandbox.dns_endpoint6 = "::1";
  }
  if (auto labels = ParseLabels(sandbox); !labels.ok()) return Report(labels.status());
  control::SandboxSpec dns_check;
  if (auto s = ParseDnsEndpoints(sandbox, dns_check); !s.ok()) return Report(s);
  PrintWarnings(*policy);
  sandbox::IsolationSpec spec;
  spec.argv = command;
  if (auto s = ResolveIdentity(run, spec); !s.ok()) return Report(s);
  spec.view.hide_dirs = {paths.bpffs, paths.pin_root, paths.runtime_dir};
  if (auto s = ResolveWritable(run, spec); !s.ok()) return Report(s);
  switch (spec.identity) {
    case sandbox::Identity::kNamespaceRoot:
      spec.view.run_owner = sandbox::kNamespaceRootUid;
      spec.view.run_group = sandbox::kNamespaceRootGid;
      break;
    case sandbox::Identity::kUser:
      spec.view.run_owner = spec.uid;
      spec.view.run_group = spec.gid;
      break;
    case sandbox::Identity::kHostRoot:
      break;
  }
  WarnIfNotWritable(spec, !run.workdir.empty());

  if (auto s = maps::CheckFitsMaps(*policy); !s.ok()) return Report(s);
  // --audit FILE: opened (and so checked) before anything is created.
  std::optional<audit::LineFile> audit_file;
  if (!run.audit.empty() && run.audit != "-") {
    auto f = audit::LineFile::Open(run.audit);
    if (!f.ok()) return Report(absl::InvalidArgumentError(absl::StrCat("--audit ", f.status().message())));
    audit_file = *std::move(f);
  }

  if (auto s = EnsureLoaded(paths); !s.ok()) return Report(s);
  if (auto s = ChooseSocketContainment(paths, flags.require_socket_containment, spec); !s.ok()) {
    return ReportContainment(s);
  }
  // From here until the command runs, a signal must not end egressctl with
  // its sandbox registered: it is held, then forwarded to the command.
  sandbox::DeferSignals deferred;
  auto cg2 = FindCgroup2Mount();
  if (!cg2.ok()) return Report(cg2.status());
  uint32_t nonce = 0;
  (void)getrandom(&nonce, sizeof(nonce), 0);
  spec.view.cgroup2_mount = *cg2;
  spec.cgroup_dir = absl::StrCat(*cg2, "/egressd/run-", getpid(), "-", nonce);
  if (auto s = MakeDirs(spec.cgroup_dir, 0755); !s.ok()) return Report(s);

  control::Registry registry(paths);
  auto id = CgroupIdOf(spec.cgroup_dir);
  // The command shares egressctl's network namespace.
  auto sandbox_spec = id.ok() ? MakeSandboxSpec(sandbox, spec.cgroup_dir, *id, "/proc/self/ns/net")
                              : absl::StatusOr<control::SandboxSpec>(id.status());
  // Its API id is the cgroup's name.
  const std::string api_id = spec.cgroup_dir.substr(spec.cgroup_dir.rfind('/') + 1);
  absl::Status registered = !sandbox_spec.ok() ? sandbox_spec.status()
                            : daemon_socket    ? [&] {
                                auto req = RunRequest(flags, sandbox, spec.cgroup_dir);
                                return req.ok() ? RegisterWithDaemon(*daemon_socket, api_id, *req) : req.status();
                              }()
                                               : registry.Register(*sandbox_spec, *policy);
  if (!registered.ok()) {
    (void)KillAndRemoveCgroup(spec.cgroup_dir);
    return absl::IsFailedPrecondition(registered) ? ReportContainment(registered) : Report(registered);
  }
  spdlog::info("sandbox {} (cgroup id {}) registered; running {}", spec.cgroup_dir, *id, command[0]);
  if (!daemon_socket) {  // the daemon records its own
    audit::WriteOneUserEvent(paths, audit::SandboxJson("registered", *id, "run", spec.cgroup_dir, sandbox_spec->labels),
                             *id);
    audit::WriteOneUserEvent(paths, audit::PolicyAppliedJson(*id, "run", *policy), *id);
  }
  CrashPoint("run:registered");

  // The sandbox's DNS proxy, in this process (outside the sandbox's cgroup),
  // bound before the command starts.
  std::unique_ptr<RunDns> run_dns;
  if (serve_dns) {
    auto record = control::SandboxRecords(paths).Load(*id);
    absl::StatusOr<std::unique_ptr<RunDns>> d =
        !record.ok()  ? absl::StatusOr<std::unique_ptr<RunDns>>(record.status())
        : !*record    ? absl::StatusOr<std::unique_ptr<RunDns>>(absl::InternalError("the sandbox's record is gone"))
                      : RunDns::Start(paths, **record, *upstreams, dns::LifetimeOf(*config_dns),
                                      BoundsOf(*config_dns));
    if (!d.ok()) {
      spdlog::error("dns for sandbox {}: {}", *id, d.status().ToString());
      (void)KillAndRemoveCgroup(spec.cgroup_dir);
      (void)registry.Unregister(*id);
      return Report(absl::InternalError(absl::StrCat("serving the sandbox's DNS: ", d.status().message())));
    }
    run_dns = std::move(*d);
  }

  // The sandbox's audit lines, complete: the reader finishes only once every
  // occurrence up to the command's end is written (userspace/audit/trail.h).
  std::atomic<bool> command_done{false};
  absl::Status audit_status;
  std::thread audit_reader;
  if (!run.audit.empty()) {
    audit_reader = std::thread([&, sandbox_id = *id] {
      audit::TrailOptions o;
      o.sandbox_id = sandbox_id;
      auto out = [&](const std::string& line) {
        if (audit_file) {
          audit_file->Write(line);
        } else {
          std::fwrite(line.data(), 1, line.size(), stdout);
          std::fputc('\n', stdout);
          std::fflush(stdout);
        }
      };
      audit_status = audit::ReadTrail(paths, o, out, [&] { return command_done.load(); });
    });
  }

  // The sandbox's PID namespace into its record before anything runs in
  // it, so its audit records can name their pids there (`process.ns_pid`).
  spec.on_pid_namespace = [&, sandbox_id = *id](uint64_t dev, uint64_t inode) {
    absl::Status s = registry.SetPidNamespace(sandbox_id, dev, inode);
    if (!s.ok()) spdlog::warn("sandbox {}: its pid namespace is not recorded (audit records name node pids only): {}",
                              sandbox_id, s.ToString());
  };
  auto code = sandbox::RunIsolated(spec);

  // Kill whatever the command left behind before its policy goes away.
  absl::Status cleanup = KillAndRemoveCgroup(spec.cgroup_dir);
  // The sandbox's DNS records are in the channel before the reader's last
  // window: its --audit holds them all.
  if (run_dns) run_dns->FlushAudit();
  if (audit_reader.joinable()) {
    command_done = true;
    audit_reader.join();
    if (!audit_status.ok()) spdlog::error("--audit: {}", audit_status.ToString());
  }
  run_dns.reset();  // its endpoint closes: queries from now on are refused
  if (cleanup.ok() && daemon_socket) {
    // A daemon that is down (or restarted without it) leaves the record to
    // us: unregistered directly, as without a daemon.
    cleanup = DeleteFromDaemon(*daemon_socket, api_id);
    if (!cleanup.ok()) {
      spdlog::warn("sandbox {}: {}; unregistering directly", api_id, cleanup.ToString());
      cleanup = registry.Unregister(*id);
    }
  } else if (cleanup.ok()) {
    cleanup = registry.Unregister(*id);
  }
  if (!cleanup.ok()) spdlog::error("cleaning up sandbox {}: {}", spec.cgroup_dir, cleanup.ToString());
  if (cleanup.ok() && !daemon_socket) {
    nlohmann::json removed = audit::SandboxJson("removed", *id, "run", spec.cgroup_dir, sandbox_spec->labels);
    if (code.ok()) removed["exit_code"] = *code;
    audit::WriteOneUserEvent(paths, std::move(removed), *id);
  }
  if (!code.ok()) return Report(code.status());
  return *code;
}

}  // namespace egressd::cli
