// egressctl: the command line over egressd's libraries (xdp-tools' shape: a
// thin binary; every behaviour lives in a component the daemon shares).
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "loader/libbpf_log.h"
#include "tools/egressctl/commands.h"
#include "userspace/common/enum_names.h"
#include "userspace/policy/compiled_policy.h"
#include "userspace/policy/compiler.h"
#include "userspace/policy/floor.h"

namespace {

// A table's names in order, "a (note) | b | c", so the help lists exactly
// what the parser accepts.
template <typename E, size_t N>
std::string Choices(const egressd::EnumNames<E, N>& table,
                    std::initializer_list<std::pair<E, const char*>> notes) {
  std::string out;
  for (const auto& row : table.rows) {
    if (!out.empty()) out += " | ";
    out += row.name;
    for (const auto& [value, note] : notes) {
      if (value == row.value) out += std::string(" (") + note + ")";
    }
  }
  return out;
}

// The policy inputs of run, sandbox add and policy check/compile.  `after`
// collects what can only be known once parsing is done.
void AddPolicyFlags(CLI::App* cmd, egressd::cli::PolicyFlags& f,
                    std::vector<std::function<void()>>& after) {
  cmd->add_option("--egress", f.egress,
                  "Allowed destination: a name, *.suffix, address or CIDR (repeatable). "
                  "Any --egress makes the sandbox deny-by-default")
      ->type_size(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  using egressd::policy::DenyAction;
  using egressd::policy::Floor;
  using egressd::policy::WorkloadKind;
  auto* floor = cmd->add_option("--floor", f.floor,
                                Choices(egressd::policy::kFloorNames, {{Floor::kConnected, "default"}}));
  auto* on_deny = cmd->add_option(
      "--on-deny", f.on_deny,
      Choices(egressd::policy::kDenyActionNames,
              {{DenyAction::kReject, "default: EPERM at once"}, {DenyAction::kDrop, "silent"}}));
  cmd->add_option("--config", f.config, "Deployment config (YAML), instead of --floor");
  cmd->add_option("--policy", f.policy, "Task declaration (YAML: egress: {allow: [...]})");
  cmd->add_option("--runtime", f.runtime, "Runtime declaration (YAML: sandbox: {egress: {allow: [...]}})");
  cmd->add_option("--kind", f.kind,
                  Choices(egressd::policy::kWorkloadKindNames,
                          {{WorkloadKind::kTask, "default"}, {WorkloadKind::kRuntime, "default with --runtime"}}));
  cmd->add_option("--grant", f.grants, "Orchestrator grant ADDR:PORTS, e.g. 192.0.2.5:80,8000-8100 (repeatable)")
      ->type_size(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--compose", f.compose, "The task ships compose services (reaches platform.containerRegistry)");
  after.push_back([&f, floor, on_deny] {
    f.floor_given = floor->count() > 0;
    f.on_deny_given = on_deny->count() > 0;
  });
}

void AddSandboxFlags(CLI::App* cmd, egressd::cli::SandboxFlags& f) {
  cmd->add_option("--label", f.labels,
                  "KEY=VALUE recorded with the sandbox (repeatable), e.g. pod=web-1, namespace=ci, task=T, run=R")
      ->type_size(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--dns-endpoint4", f.dns_endpoint4,
                  "IPv4 address of the sandbox's DNS endpoint (its queries to port 53 are steered there, a port "
                  "of its own): one its netns routes to this node, e.g. a pod's gateway, or 127.0.0.1 in the "
                  "node's netns.  Without an endpoint of a family, the sandbox's DNS in it is refused");
  cmd->add_option("--dns-endpoint6", f.dns_endpoint6, "IPv6 address of the sandbox's DNS endpoint (as --dns-endpoint4)");
  cmd->add_flag("--audit-only", f.audit_only,
                "Audit only, NOT enforced: the policy's denials are recorded as would-deny and allowed (protected "
                "ranges and structural refusals stay denied). Refused unless the deployment config (--config) has "
                "audit: {allowAuditOnly: true}");
  cmd->add_flag("--strict-audit", f.strict_audit,
                "Refuse a connect or send whose audit event cannot be recorded (ring full and no fold slot)");
}

// --interface / --interface-netns / --sandbox-runtime of sandbox add and apply.
void AddInterfaceFlags(CLI::App* cmd, egressd::cli::SandboxFlags& f) {
  auto* by_if = cmd->add_option("--interface", f.interface,
                                "Judge the sandbox at this interface of the node's netns (the node end of its pod's "
                                "veth, or its VM's tap): every frame the pod sends, whatever sends it (gVisor, a "
                                "guest kernel, a packet socket), by the same policy. With --cgroup: judged at both; "
                                "without: the sandbox is the interface's (its id is the interface's, no cgroup)");
  cmd->add_option("--interface-netns", f.interface_netns,
                  "As --interface, the node end of the one veth in this network namespace (the pod's)")
      ->excludes(by_if);
  cmd->add_option("--sandbox-runtime", f.runtime_hint,
                  "The runtime running the sandbox: runc, crun, gvisor (runsc), kata, firecracker. The last three "
                  "send from their own network stack, which no cgroup hook sees: they must be registered with "
                  "--interface or --interface-netns (exit code 2 otherwise)");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace egressd;
  auto logger = spdlog::stderr_color_mt("egressctl");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("egressctl: %^%l%$: %v");
  spdlog::set_level(spdlog::level::warn);
  BridgeLibbpfLogging();

  CLI::App app{"egressctl: egress policy for sandboxes, enforced in the kernel by eBPF"};
  app.require_subcommand(1);
  Paths paths = Paths::FromEnvironment();
  int verbosity = 0;
  app.add_option("--pin-root", paths.pin_root, "bpffs directory of this egressd instance")
      ->capture_default_str();
  auto* runtime_dir = app.add_option("--runtime-dir", paths.runtime_dir,
                                     "Runtime state of this instance (lock, sandbox records); default "
                                     "/run/egressd, or /run/egressd/instances/<pin root> for another pin root");
  app.add_option("--node-netns", paths.node_netns,
                 "The node's network namespace, whose loopback the policy governs (EGRESSD_NODE_NETNS); "
                 "fixed by the first load, a load naming another is refused")
      ->capture_default_str();
  app.add_flag("-v,--verbose", verbosity, "More logging (-vv: debug)");

  auto* load = app.add_subcommand("load", "Load and attach the programs (idempotent; upgrades in place)");
  bool force = false;
  auto* unload = app.add_subcommand("unload", "Detach everything and remove the pins");
  unload->add_flag("--force", force, "Unload even while sandboxes are registered");
  auto* probe = app.add_subcommand("probe", "Check what this kernel offers egressd");
  bool json = false;
  auto* status = app.add_subcommand("status", "Show sandboxes, policies and counters");
  status->add_flag("--json", json, "Print JSON (as -o json)");

  std::vector<std::function<void()>> after_parse;
  auto* sandbox = app.add_subcommand("sandbox", "Register cgroups as sandboxes");
  sandbox->require_subcommand(1);
  std::string cgroup;
  cli::PolicyFlags add_flags;
  auto* add = sandbox->add_subcommand(
      "add", "Register a cgroup and/or a pod's interface with a policy, or flip its policy");
  add->add_option("--cgroup", cgroup, "cgroup v2 directory (or --interface / --interface-netns alone)");
  AddPolicyFlags(add, add_flags, after_parse);
  cli::SandboxFlags add_sandbox, run_sandbox;
  AddSandboxFlags(add, add_sandbox);
  add->add_option("--netns", add_sandbox.netns, "The sandbox's network namespace (/proc/PID/ns/net or "
                                                "/var/run/netns/NAME), recorded for the DNS proxy and audit");
  AddInterfaceFlags(add, add_sandbox);
  add->add_flag("--require-socket-containment", add_flags.require_socket_containment,
                "Refuse where packet/AF_XDP/AF_VSOCK sockets and abstract unix peers cannot be judged (no bpf "
                "LSM): the default, exit code 3");
  add->add_flag("--accept-uncontained-packet-sockets", add_flags.accept_uncontained_packet_sockets,
                "Register even where the bpf LSM is not in force (also "
                "EGRESSD_ACCEPT_UNCONTAINED_PACKET_SOCKETS=1). RISK: a process of the sandbox with CAP_NET_RAW "
                "sends frames on packet sockets (and AF_XDP, AF_VSOCK) that no egressd hook judges");
  auto* remove = sandbox->add_subcommand("remove", "Unregister a sandbox, by its cgroup or its interface");
  std::string remove_interface;
  auto* remove_cg = remove->add_option("--cgroup", cgroup, "cgroup v2 directory");
  remove->add_option("--interface", remove_interface,
                     "The interface it was registered with (the sandbox judged there, with or without a cgroup)")
      ->excludes(remove_cg);
  auto* contain = sandbox->add_subcommand(
      "contain", "Make a cgroup a contained root: unregistered cgroups below it get no egress");
  contain->add_option("--cgroup", cgroup, "cgroup v2 directory")->required();

  // The daemon's API (docs/api.md).
  cli::ApiFlags api;
  std::string api_id;
  cli::PolicyFlags apply_flags;
  cli::SandboxFlags apply_sandbox;
  auto add_api = [&](CLI::App* cmd) {
    cmd->add_option("--socket", api.socket, "The daemon's socket (default: EGRESSD_SOCKET, else <runtime dir>/egressd.sock)");
    cmd->add_option("-o,--output", api.output, "text (default) | json")->check(CLI::IsMember({"text", "json"}));
  };
  // status asks the daemon when one answers (else reads the maps itself).
  add_api(status);
  auto* apply = sandbox->add_subcommand("apply", "Register or flip a sandbox through the daemon (PUT /v1/sandboxes/ID)");
  apply->add_option("id", api_id, "The sandbox's id (a pod name or UID)")->required();
  apply->add_option("--cgroup", cgroup, "cgroup v2 directory (or --interface / --interface-netns alone)");
  AddPolicyFlags(apply, apply_flags, after_parse);
  AddSandboxFlags(apply, apply_sandbox);
  AddInterfaceFlags(apply, apply_sandbox);
  apply->add_flag("--require-socket-containment", apply_flags.require_socket_containment,
                  "Refuse where the bpf LSM is not in force even if the daemon accepts uncontained sandboxes");
  add_api(apply);
  auto* get = sandbox->add_subcommand("get", "One sandbox as the daemon has it (GET /v1/sandboxes/ID)");
  get->add_option("id", api_id, "The sandbox's id")->required();
  add_api(get);
  auto* list = sandbox->add_subcommand("list", "The daemon's sandboxes (GET /v1/sandboxes)");
  add_api(list);
  auto* del = sandbox->add_subcommand("delete", "Unregister a sandbox through the daemon (DELETE /v1/sandboxes/ID)");
  del->add_option("id", api_id, "The sandbox's id")->required();
  add_api(del);
  std::string explain_dest, explain_proto = "tcp";
  auto* explain = app.add_subcommand(
      "explain", "Which rule allows or denies a sandbox's destination, and why (GET /v1/sandboxes/ID/explain)");
  explain->add_option("sandbox", api_id, "The sandbox's id (as the daemon's API names it)")->required();
  explain->add_option("dest", explain_dest, "ADDRESS, ADDRESS:PORT or [IPv6]:PORT")->required();
  explain->add_option("--proto", explain_proto, "tcp (default) | udp");
  add_api(explain);

  cli::PolicyFlags run_flags;
  cli::RunFlags run_as;
  std::vector<std::string> command;

  cli::AuditFlags audit_flags;
  auto* audit = app.add_subcommand("audit", "The audit trail as JSON lines (docs/audit.md)");
  audit->add_option("--input", audit_flags.input, "Read a JSON-lines file instead of the kernel's trail");
  audit->add_flag("--follow", audit_flags.follow, "Keep reading (until SIGINT/SIGTERM)");
  audit->add_option("--sandbox", audit_flags.sandbox, "Only this sandbox (its id: the cgroup id)");
  audit->add_option("--verdict", audit_flags.verdict, "allow | deny | would-deny (audit-only sandboxes)");
  audit->add_option("-o,--output", audit_flags.output, "json (default) | compact");
  audit->add_option("--window-ms", audit_flags.window_ms, "Fold window while reading the ring (default 1000)");
  audit->add_option("--type", audit_flags.type, "Only records of this type (connect, send, backstop, dns, ...)");
  audit->add_option("--since", audit_flags.since, "Only records at or after this RFC 3339 time");
  cli::SuggestFlags suggest_flags;
  cli::PolicyFlags suggest_policy;
  auto* suggest = audit->add_subcommand(
      "suggest", "The smallest task.yaml allow list that would have allowed a stream's denials");
  suggest->add_option("--input", suggest_flags.input, "A JSON-lines file (- for stdin; default: the kernel's trail)");
  suggest->add_option("--sandbox", suggest_flags.sandbox, "Only this sandbox's denials (its cgroup id)");
  AddPolicyFlags(suggest, suggest_policy, after_parse);
  audit->add_option("--metrics", audit_flags.metrics,
                    "Write Prometheus metrics to FILE (atomically) every 10 s while reading, and at exit");
  std::string metrics_file;
  auto* metrics = app.add_subcommand("metrics", "Prometheus metrics (text format) of this instance");
  metrics->add_option("-o,--output", metrics_file, "Write FILE atomically (temp + rename) instead of stdout");
  auto* run = app.add_subcommand("run", "Run a command in a fresh transient sandbox");
  AddPolicyFlags(run, run_flags, after_parse);
  AddSandboxFlags(run, run_sandbox);
  run->add_flag("--require-socket-containment", run_flags.require_socket_containment,
                "Refuse (exit code 3) where the bpf LSM is not in force, instead of running the command under "
                "the seccomp fallback");
  run->add_option("--user", run_as.user,
                  "Run the command as this unprivileged node user (name or uid) instead of as root of "
                  "its own user namespace (nobody on the node)");
  run->add_flag("--host-root", run_as.host_root,
                "Run the command as the node's uid 0 with CAP_NET_RAW (raw sockets, DAC_OVERRIDE, "
                "SETUID...): for a hostile client that must reach egressd's datapath hooks, never for "
                "code that should not be root of the node");
  run->add_option("--workdir", run_as.workdir,
                  "The directory the command starts in and may write (default: the current one)");
  run->add_option("--readable", run_as.readable,
                  "A directory carried in read-only even where the private /tmp, /run or /dev/shm would "
                  "hide it (repeatable)")
      ->type_size(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  run->add_option("--writable", run_as.writable,
                  "Another directory the command may write (repeatable); whatever reads it outside "
                  "the sandbox reads what the sandbox put there")
      ->type_size(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  run->add_option("--audit", run_as.audit,
                  "Write this sandbox's audit lines (JSON) to FILE, or - for stdout, complete when run exits");
  run->add_option("--upstream-dns", run_as.upstream_dns,
                  "The resolver egressctl's own DNS proxy asks for the sandbox's allowed names, IP[:PORT] "
                  "(repeatable; tried in order; default: dns.upstreams of --config, else the nameservers of "
                  "/etc/resolv.conf)")
      ->type_size(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  run->add_option("command", command, "-- CMD [ARGS...]")->required();

  auto* policy = app.add_subcommand("policy", "Check or compile a policy without applying it (no root needed)");
  policy->require_subcommand(1);
  cli::PolicyFlags check_flags, compile_flags;
  auto* check = policy->add_subcommand("check", "Validate the inputs: exit 0, or 2 naming every problem");
  AddPolicyFlags(check, check_flags, after_parse);
  auto* compile = policy->add_subcommand("compile", "Print the compiled policy");
  AddPolicyFlags(compile, compile_flags, after_parse);
  std::string format = "text";
  compile->add_option("-o,--output", format, "text (default) | json | nft (the incumbent's nftables ruleset, for nft -f)")
      ->check(CLI::IsMember({"text", "json", "nft"}));

  auto* dns = app.add_subcommand("dns", "The DNS proxy");
  dns->require_subcommand(1);
  std::vector<std::string> upstream_dns;
  int upstream_timeout_ms = 2000, upstream_tries = 2;
  auto* dns_serve = dns->add_subcommand(
      "serve", "Serve every registered sandbox's DNS endpoint (from the records) until SIGINT/SIGTERM");
  dns_serve->add_option("--upstream-dns", upstream_dns, "Upstream resolver IP[:PORT] (repeatable; tried in order)")
      ->type_size(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  dns_serve->add_option("--upstream-timeout-ms", upstream_timeout_ms, "Per try")->capture_default_str();
  dns_serve->add_option("--upstream-tries", upstream_tries, "Rounds over the upstreams")->capture_default_str();
  std::string dns_config;
  dns_serve->add_option("--config", dns_config,
                        "Deployment config (YAML): its dns.upstreams when no --upstream-dns is given");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "egressctl: %s\n", e.what());
    return cli::kExitBadInput;
  }
  for (auto& f : after_parse) f();
  // Another pin root is another instance, with its own runtime state.
  if (runtime_dir->count() == 0 && std::getenv("EGRESSD_RUNTIME_DIR") == nullptr) {
    paths.runtime_dir = Paths::DefaultRuntimeDir(paths.pin_root);
  }
  if (verbosity > 0) spdlog::set_level(verbosity > 1 ? spdlog::level::debug : spdlog::level::info);

  if (*load) return cli::CmdLoad(paths);
  if (*unload) return cli::CmdUnload(paths, force);
  if (*probe) return cli::CmdProbe(paths);
  if (*status) {
    if (json) api.output = "json";  // --json: the older spelling of -o json
    return cli::CmdStatus(paths, api);
  }
  if (*dns_serve) return cli::CmdDnsServe(paths, dns_config, upstream_dns, upstream_timeout_ms, upstream_tries);
  if (*add) return cli::CmdSandboxAdd(paths, cgroup, add_flags, add_sandbox);
  if (*remove) return cli::CmdSandboxRemove(paths, cgroup, remove_interface);
  if (*contain) return cli::CmdSandboxContain(paths, cgroup);
  if (*apply) return cli::CmdSandboxApply(paths, api, api_id, cgroup, apply_flags, apply_sandbox);
  if (*get) return cli::CmdSandboxGet(paths, api, api_id);
  if (*list) return cli::CmdSandboxList(paths, api);
  if (*del) return cli::CmdSandboxDelete(paths, api, api_id);
  if (*explain) return cli::CmdExplain(paths, api, api_id, explain_dest, explain_proto);
  if (*run) return cli::CmdRun(paths, run_flags, run_sandbox, run_as, command);
  if (*suggest) return cli::CmdAuditSuggest(paths, suggest_flags, suggest_policy);
  if (*audit) return cli::CmdAudit(paths, audit_flags);
  if (*metrics) return cli::CmdMetrics(paths, metrics_file);
  if (*check) return cli::CmdPolicyCheck(check_flags);
  if (*compile) return cli::CmdPolicyCompile(compile_flags, format);
  return cli::kExitBadInput;
}
