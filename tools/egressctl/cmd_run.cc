// egressctl run: a transient sandbox around one command.
#include <pwd.h>
#include <sys/random.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "userspace/common/node.h"
#include "loader/loader.h"
#include "userspace/common/instance_lock.h"
#include "loader/probe.h"
#include "maps/lpm_keys.h"
#include "userspace/common/fault.h"
#include "tools/egressctl/commands.h"
#include "userspace/sandbox/isolation.h"
#include "tools/egressctl/policy_flags.h"
#include "tools/egressctl/sandbox_flags.h"
#include "userspace/common/cgroup_tree.h"
#include "userspace/control/reconcile.h"
#include "userspace/control/registry.h"

namespace egressd::cli {
namespace {

absl::Status ResolveUser(const std::string& user, sandbox::IsolationSpec& spec) {
  if (user.empty()) return absl::OkStatus();
  const passwd* pw = nullptr;
  uint32_t uid = 0;
  if (absl::SimpleAtoi(user, &uid)) {
    pw = getpwuid(uid);
    spec.uid = uid;
    spec.gid = pw ? pw->pw_gid : uid;
    return absl::OkStatus();
  }
  pw = getpwnam(user.c_str());
  if (!pw) return absl::InvalidArgumentError(absl::StrCat("--user \"", user, "\": no such user"));
  spec.uid = pw->pw_uid;
  spec.gid = pw->pw_gid;
  return absl::OkStatus();
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

}  // namespace

int CmdRun(const Paths& paths, const PolicyFlags& flags, const SandboxFlags& sandbox, const std::string& user,
           const std::vector<std::string>& command) {
  // Everything that can be wrong with the input is reported before anything
  // is created or the command starts.
  auto policy = CompileFlags(flags);
  if (!policy.ok()) return Report(policy.status());
  if (auto labels = ParseLabels(sandbox); !labels.ok()) return Report(labels.status());
  PrintWarnings(*policy);
  sandbox::IsolationSpec spec;
  spec.argv = command;
  if (auto s = ResolveUser(user, spec); !s.ok()) return Report(s);

  if (auto s = maps::CheckFitsMaps(*policy); !s.ok()) return Report(s);

  if (auto s = EnsureLoaded(paths); !s.ok()) return Report(s);
  if (auto s = CheckSocketContainment(paths, flags.require_socket_containment); !s.ok()) return Report(s);
  // From here until the command runs, a signal must not end egressctl with
  // its sandbox registered: it is held, then forwarded to the command.
  sandbox::DeferSignals deferred;
  auto cg2 = FindCgroup2Mount();
  if (!cg2.ok()) return Report(cg2.status());
  uint32_t nonce = 0;
  (void)getrandom(&nonce, sizeof(nonce), 0);
  spec.cgroup2_mount = *cg2;
  spec.cgroup_dir = absl::StrCat(*cg2, "/egressd/run-", getpid(), "-", nonce);
  spec.hide_dirs = {paths.bpffs, paths.pin_root, paths.runtime_dir};
  if (auto s = MakeDirs(spec.cgroup_dir, 0755); !s.ok()) return Report(s);

  control::Registry registry(paths);
  auto id = CgroupIdOf(spec.cgroup_dir);
  // The command shares egressctl's network namespace.
  auto sandbox_spec = id.ok() ? MakeSandboxSpec(sandbox, spec.cgroup_dir, *id, "/proc/self/ns/net")
                              : absl::StatusOr<control::SandboxSpec>(id.status());
  absl::Status registered = sandbox_spec.ok() ? registry.Register(*sandbox_spec, *policy) : sandbox_spec.status();
  if (!registered.ok()) {
    (void)KillAndRemoveCgroup(spec.cgroup_dir);
    return Report(registered);
  }
  spdlog::info("sandbox {} (cgroup id {}) registered; running {}", spec.cgroup_dir, *id, command[0]);
  CrashPoint("run:registered");

  auto code = sandbox::RunIsolated(spec);

  // Kill whatever the command left behind before its policy goes away.
  absl::Status cleanup = KillAndRemoveCgroup(spec.cgroup_dir);
  if (cleanup.ok()) cleanup = registry.Unregister(*id);
  if (!cleanup.ok()) spdlog::error("cleaning up sandbox {}: {}", spec.cgroup_dir, cleanup.ToString());
  if (!code.ok()) return Report(code.status());
  return *code;
}

}  // namespace egressd::cli
