// sandbox add/remove/contain: register cgroups the caller manages (the
// orchestrator's path until the daemon's API arrives).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "userspace/common/node.h"
#include "absl/strings/str_cat.h"
#include "loader/loader.h"
#include "maps/lpm_keys.h"
#include "tools/egressctl/commands.h"
#include "tools/egressctl/policy_flags.h"
#include "tools/egressctl/run_dns.h"
#include "tools/egressctl/sandbox_flags.h"
#include "userspace/common/errors.h"
#include "maps/egressd_abi.h"
#include "userspace/common/cgroup_tree.h"
#include "userspace/control/registry.h"
#include "userspace/control/sandbox_caps.h"
#include "maps/flow_table.h"
#include "userspace/control/sandbox_runtime.h"
#include "userspace/policy/deployment_config.h"
#include "userspace/policy/yaml_walk.h"
#include "userspace/control/sandbox_record.h"
#include "userspace/audit/lifecycle.h"
#include "userspace/audit/user_events.h"

namespace egressd::cli {
namespace {

absl::StatusOr<uint64_t> LoadedCgroupId(const Paths& paths, const std::string& cgroup) {
  if (!IsLoaded(paths)) {
    return absl::FailedPreconditionError("egressd is not loaded under " + paths.pin_root +
                                         " (run `egressctl load` first)");
  }
  auto id = CgroupIdOf(cgroup);
  // A path that is not a cgroup is the caller's mistake (exit 2, nothing
  // changed); any other failure to read it is the system's (exit 1).
  if (!id.ok() && (absl::IsNotFound(id.status()) || absl::IsInvalidArgument(id.status()))) {
    return absl::InvalidArgumentError(absl::StrCat("--cgroup ", id.status().message()));
  }
  return id;
}

// The BPF sandbox lookup reads the ancestors at levels 1 ..
// EGR_MAX_CGROUP_DEPTH-1: a registration deeper would look enforced and
// never be found.
absl::Status CheckSandboxDepth(const std::string& cgroup2_mount, const std::string& dir) {
  EGR_ASSIGN_OR_RETURN(int level, CgroupLevel(cgroup2_mount, dir));
  constexpr int kDeepest = EGR_MAX_CGROUP_DEPTH - 1;
  if (level > kDeepest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cgroup ", dir, " is at level ", level, " of the cgroup tree; egressd's sandbox lookup walks levels 1 to ",
        kDeepest, " (EGR_MAX_CGROUP_DEPTH ", EGR_MAX_CGROUP_DEPTH,
        ", the root is level 0), so it would not be enforced: register a cgroup at level ", kDeepest,
        " or above"));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> RegistrableCgroupId(const Paths& paths, const std::string& cgroup) {
  EGR_ASSIGN_OR_RETURN(uint64_t id, LoadedCgroupId(paths, cgroup));
  EGR_ASSIGN_OR_RETURN(std::string cg2, FindCgroup2Mount());
  EGR_RETURN_IF_ERROR(CheckSandboxDepth(cg2, cgroup));
  return id;
}

}  // namespace

absl::Status CheckSocketContainment(const Paths& paths, bool accept_uncontained) {
  absl::Status s = RequireSocketContainment(paths);
  if (s.ok() || !accept_uncontained || !absl::IsFailedPrecondition(s)) return s;
  std::fprintf(stderr,
               "egressctl: WARNING: %s. Registered anyway (--accept-uncontained-packet-sockets): where its "
               "processes hold CAP_NET_RAW, packet sockets send frames no egressd hook judges\n",
               std::string(s.message()).c_str());
  return absl::OkStatus();
}

int ReportContainment(const absl::Status& s) {
  if (!absl::IsFailedPrecondition(s)) return Report(s);
  std::fprintf(stderr, "egressctl: refused, nothing was changed: %s\n", std::string(s.message()).c_str());
  return kExitNodeCannotContain;
}

namespace {

// The opt-out, from the flag or the environment (the test suite's, on a
// kernel without LSM programs).
bool AcceptsUncontained(const PolicyFlags& flags) {
  const char* env = std::getenv("EGRESSD_ACCEPT_UNCONTAINED_PACKET_SOCKETS");
  return flags.accept_uncontained_packet_sockets || (env != nullptr && std::string(env) == "1");
}

}  // namespace

// The deployment's per-sandbox caps (limits:, the defaults without
// --config), the daemon's check (control/sandbox_caps.h).
static absl::Status CheckConfigCaps(const std::string& config, const policy::CompiledPolicy& policy) {
  policy::SandboxLimits limits;
  if (!config.empty()) {
    auto text = policy::yaml::ReadInputFile(config);
    if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("--config ", text.status().message()));
    auto d = policy::ParseDeploymentConfig(*text, config, nullptr);
    if (!d.ok()) return d.status();
    limits = d->limits;
  }
  return control::CheckSandboxCaps(policy, limits);
}

// The config's flows: settings (the tc flow table's quota and timeouts,
// node-wide) for a sandbox judged at its interface; without --config the
// node keeps what it has (the daemon's, or the defaults).
static absl::Status ApplyFlowConfig(const Paths& paths, const std::string& config) {
  if (config.empty()) return absl::OkStatus();
  auto text = policy::yaml::ReadInputFile(config);
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("--config ", text.status().message()));
  auto d = policy::ParseDeploymentConfig(*text, config, nullptr);
  if (!d.ok()) return d.status();
  return maps::WriteFlowConfig(paths.pin_root, {.quota = d->flows.max_per_sandbox,
                                                .tcp_idle_s = d->flows.tcp_idle_s,
                                                .tcp_transitory_s = d->flows.tcp_transitory_s,
                                                .udp_idle_s = d->flows.udp_idle_s});
}

// A sandbox add asks for enforcement: where the bpf LSM is not in force it
// is refused (a pod keeps CAP_NET_RAW, and its packet sockets would go
// unjudged) unless the operator accepts that.
int CmdSandboxAdd(const Paths& paths, const std::string& cgroup, const PolicyFlags& flags,
                  const SandboxFlags& sandbox_flags) {
  if (flags.require_socket_containment && flags.accept_uncontained_packet_sockets) {
    return Report(absl::InvalidArgumentError(
        "--require-socket-containment and --accept-uncontained-packet-sockets: choose one"));
  }
  // The config's dns.endpoint4/6 unless --dns-endpoint4/6 name the endpoint
  // (a config that does not parse is reported with every other problem).
  SandboxFlags sandbox = sandbox_flags;
  const absl::Status config_endpoints = EndpointsFromConfig(flags.config, sandbox);
  // A sandbox given a DNS endpoint has its names served (egressctl dns serve).
  auto policy = CompileFlags(flags, !sandbox.dns_endpoint4.empty() || !sandbox.dns_endpoint6.empty(), &sandbox);
  if (!policy.ok()) {
    if (absl::IsInvalidArgument(policy.status())) {
      audit::WriteOneUserEvent(
          paths, audit::PolicyRejectedJson(0, "sandbox add", cgroup, std::string(policy.status().message())), 0);
    }
    return Report(policy.status());
  }
  if (!config_endpoints.ok()) return Report(config_endpoints);
  if (auto labels = ParseLabels(sandbox); !labels.ok()) return Report(labels.status());
  control::SandboxSpec dns_check;
  if (auto s = ParseDnsEndpoints(sandbox, dns_check); !s.ok()) return Report(s);
  PrintWarnings(*policy);
  if (auto s = maps::CheckFitsMaps(*policy); !s.ok()) return Report(s);
  if (auto s = CheckConfigCaps(flags.config, *policy); !s.ok()) return Report(s);
  const bool by_interface = !sandbox.interface.empty() || !sandbox.interface_netns.empty();
  auto hint = control::ParseRuntimeHint(sandbox.runtime_hint, "--sandbox-runtime");
  if (!hint.ok()) return Report(hint.status());
  if (auto s = control::CheckRuntimeRegistration(*hint, by_interface, "--sandbox-runtime",
                                                 "--interface or --interface-netns");
      !s.ok()) {
    return Report(s);
  }
  uint64_t cgroup_id = 0;
  if (!cgroup.empty()) {
    auto id = RegistrableCgroupId(paths, cgroup);
    if (!id.ok()) return Report(id.status());
    cgroup_id = *id;
  } else if (!by_interface) {
    return Report(absl::InvalidArgumentError(
        "--cgroup, --interface or --interface-netns is required: the sandbox's cgroup, or the node end of its "
        "pod's veth (or both)"));
  } else if (!IsLoaded(paths)) {
    return Report(absl::FailedPreconditionError("egressd is not loaded under " + paths.pin_root +
                                                " (run `egressctl load` first)"));
  }
  // The packet-socket rule (lib/lsm_socket.h) is a cgroup's: a sandbox
  // registered by interface alone has none, and needs none, since every
  // frame its pod sends (gVisor's netstack writes them on a packet socket)
  // is judged at its veth.  Only a sandbox with a cgroup asks for the bpf LSM.
  if (!cgroup.empty()) {
    const bool accept = !flags.require_socket_containment && AcceptsUncontained(flags);
    if (auto s = CheckSocketContainment(paths, accept); !s.ok()) return ReportContainment(s);
  }
  auto spec = MakeSandboxSpec(sandbox, cgroup, cgroup_id, "");
  if (!spec.ok()) return Report(spec.status());
  if (spec->ifindex) {
    if (auto f = ApplyFlowConfig(paths, flags.config); !f.ok()) return Report(f);
  }
  const uint64_t* id = &spec->cgroup_id;
  absl::Status s = control::Registry(paths).Register(*spec, *policy);
  if (s.ok()) {
    audit::WriteOneUserEvent(paths, audit::SandboxJson("registered", *id, "sandbox add", cgroup, spec->labels,
                                                                    spec->interface), *id);
    audit::WriteOneUserEvent(paths, audit::PolicyAppliedJson(*id, "sandbox add", *policy), *id);
  }
  return Report(s);
}

int CmdSandboxRemove(const Paths& paths, const std::string& cgroup, const std::string& interface) {
  uint64_t id = 0;
  if (!cgroup.empty()) {
    auto cg = LoadedCgroupId(paths, cgroup);
    if (!cg.ok()) return Report(cg.status());
    id = *cg;
  } else if (interface.empty()) {
    return Report(absl::InvalidArgumentError("--cgroup or --interface is required: the sandbox to remove"));
  } else {
    if (!IsLoaded(paths)) {
      return Report(absl::FailedPreconditionError("egressd is not loaded under " + paths.pin_root +
                                                  " (run `egressctl load` first)"));
    }
    // The record naming it (found even once the interface vanished).
    auto all = control::SandboxRecords(paths).List();
    if (!all.ok()) return Report(all.status());
    for (const auto& r : *all) {
      if (r.interface == interface) id = r.cgroup_id;
    }
    if (id == 0) {
      return Report(absl::InvalidArgumentError(
          absl::StrCat("--interface \"", interface, "\" is no registered sandbox's interface")));
    }
  }
  // The labels, while the record still holds them.
  control::Labels labels;
  std::string recorded_interface;
  if (auto rec = control::SandboxRecords(paths).Load(id); rec.ok() && rec->has_value()) {
    labels = (*rec)->labels;
    recorded_interface = (*rec)->interface;
  }
  absl::Status s = control::Registry(paths).Unregister(id);
  if (s.ok()) audit::WriteOneUserEvent(paths, audit::SandboxJson("removed", id, "sandbox remove", cgroup, labels,
                                                                   recorded_interface), id);
  return Report(s);
}

int CmdSandboxContain(const Paths& paths, const std::string& cgroup) {
  auto id = RegistrableCgroupId(paths, cgroup);
  if (!id.ok()) return Report(id.status());
  return Report(control::Registry(paths).Contain(*id));
}

}  // namespace egressd::cli
