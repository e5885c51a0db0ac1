// egressctl's subcommands.  Each returns the process exit code: 0 success,
// 1 a failure at run time, 2 bad input (nothing was changed), 3 the node
// cannot contain the sandbox as asked (nothing was changed; retrying on this
// node will not help), 5 a running daemon failed the request.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "userspace/common/node.h"

namespace egressd::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitNodeCannotContain = 3;
// (4: the pinned state is of another version, policy_flags.cc.)
// A daemon answers on the socket but fails the request (`status`): never
// hidden by reading the maps instead.
constexpr int kExitDaemonFailed = 5;

// The policy inputs shared by run, sandbox add and policy check/compile.
struct PolicyFlags {
  std::vector<std::string> egress;
  std::string floor;           // read only when floor_given
  std::string on_deny;         // read only when on_deny_given
  bool floor_given = false;    // --floor was on the command line
  bool on_deny_given = false;  // --on-deny was on the command line
  std::string config;          // deployment config (YAML); empty: --floor
  std::string policy;          // task declaration (YAML)
  std::string runtime;         // runtime declaration (YAML)
  std::string kind;            // empty: runtime with --runtime, else task
  std::vector<std::string> grants;
  bool compose = false;
  // run: refuse, rather than fall back to seccomp, where the socket-family
  // hooks (bpf LSM) are not in force (sandbox add always refuses there).
  bool require_socket_containment = false;
  // sandbox add: register even where the bpf LSM is not in force (the
  // operator's opt-out, also EGRESSD_ACCEPT_UNCONTAINED_PACKET_SOCKETS=1).
  bool accept_uncontained_packet_sockets = false;
};

// What sandbox add and run record about a sandbox besides its policy.
struct SandboxFlags {
  std::vector<std::string> labels;  // --label KEY=VALUE (repeatable)
  std::string netns;                // sandbox add --netns PATH (empty: not known)
  std::string dns_endpoint4;        // --dns-endpoint4 ADDR (empty: none)
  std::string dns_endpoint6;        // --dns-endpoint6 ADDR (empty: none)
  bool audit_only = false;          // --audit-only (the deployment config must allow it)
  bool strict_audit = false;        // --strict-audit
  // sandbox add --interface IFNAME | --interface-netns PATH (issue 17): the
  // node end of the pod's veth, judged by the tc program too.
  std::string interface;
  std::string interface_netns;
  std::string runtime_hint;  // --sandbox-runtime (control/sandbox_runtime.h); empty: none
};

// Where the socket-family hooks are missing: FailedPrecondition naming what
// is missing, unless `accept_uncontained` (then a warning on stderr and OK).
absl::Status CheckSocketContainment(const Paths& paths, bool accept_uncontained);
// Report() for a containment refusal: exit code kExitNodeCannotContain.
int ReportContainment(const absl::Status& s);

int CmdLoad(const Paths& paths);
int CmdUnload(const Paths& paths, bool force);
int CmdProbe(const Paths& paths);

int CmdSandboxAdd(const Paths& paths, const std::string& cgroup, const PolicyFlags& flags,
                  const SandboxFlags& sandbox);
// By --cgroup, or by --interface (the record naming it; exactly one of the two).
int CmdSandboxRemove(const Paths& paths, const std::string& cgroup, const std::string& interface);
int CmdSandboxContain(const Paths& paths, const std::string& cgroup);

// Who the command of `egressctl run` is, and what of the node it may write.
struct RunFlags {
  std::string user;                   // --user: name or uid; empty: root of its own user namespace
  bool host_root = false;             // --host-root: the node's uid 0 (with CAP_NET_RAW)
  std::string workdir;                // --workdir; empty: the current directory
  std::vector<std::string> writable;  // --writable
  std::vector<std::string> readable;  // --readable
  std::string audit;                  // --audit FILE|-: this sandbox's audit lines; empty: none
  std::vector<std::string> upstream_dns;  // --upstream-dns IP[:PORT]; empty: /etc/resolv.conf's nameservers
};

int CmdRun(const Paths& paths, const PolicyFlags& flags, const SandboxFlags& sandbox, const RunFlags& run,
           const std::vector<std::string>& command);

// egressctl audit (docs/audit.md).
struct AuditFlags {
  std::string input;    // a JSON-lines file; empty: the kernel's trail
  bool follow = false;  // keep reading
  std::string sandbox;  // a sandbox id (its cgroup id); empty: every sandbox
  std::string verdict;  // allow | deny; empty: both
  std::string output = "json";  // json | compact
  int window_ms = 1000;         // fold window while this process reads the ring
  std::string metrics;          // --metrics FILE: Prometheus text, rewritten while reading
  std::string type;             // --type connect|dns|...; empty: every type
  std::string since;            // --since RFC 3339: records at or after it
};
int CmdAudit(const Paths& paths, const AuditFlags& flags);
// egressctl audit suggest: a task.yaml fragment allowing a stream's denials.
struct SuggestFlags {
  std::string input;    // a JSON-lines file, - for stdin; empty: the kernel's trail now
  std::string sandbox;  // only this sandbox's records
};
int CmdAuditSuggest(const Paths& paths, const SuggestFlags& suggest, const PolicyFlags& deployment);
// egressctl metrics [-o FILE]: Prometheus text to stdout or, atomically, FILE.
int CmdMetrics(const Paths& paths, const std::string& file);

// policy check: exit 0 (printing a summary) or 2 (printing every problem).
int CmdPolicyCheck(const PolicyFlags& flags);
// policy compile: the compiled policy as "text" or "json".
int CmdPolicyCompile(const PolicyFlags& flags, const std::string& format);

// dns serve: the DNS proxy for every registered sandbox until SIGINT/SIGTERM;
// prints "ready: ..." once it serves, then "serving ID ENDPOINT" and
// "stopped ID" as records come and go.
// Upstreams: --upstream-dns, else dns.upstreams of the deployment config
// `config` (empty: none).
int CmdDnsServe(const Paths& paths, const std::string& config, const std::vector<std::string>& upstreams,
                int timeout_ms, int tries);

// sandbox apply|get|list|delete: the daemon's control API (docs/api.md).
struct ApiFlags {
  std::string socket;           // --socket; empty: EGRESSD_SOCKET, else <runtime_dir>/egressd.sock
  std::string output = "text";  // -o text | json
};
int CmdSandboxApply(const Paths& paths, const ApiFlags& api, const std::string& id, const std::string& cgroup,
                    const PolicyFlags& flags, const SandboxFlags& sandbox);
// Through the daemon when one answers on the socket, else from the maps.
int CmdStatus(const Paths& paths, const ApiFlags& api);
int CmdSandboxGet(const Paths& paths, const ApiFlags& api, const std::string& id);
int CmdSandboxList(const Paths& paths, const ApiFlags& api);
int CmdSandboxDelete(const Paths& paths, const ApiFlags& api, const std::string& id);
int CmdExplain(const Paths& paths, const ApiFlags& api, const std::string& id, const std::string& dest,
               const std::string& proto);

}  // namespace egressd::cli
