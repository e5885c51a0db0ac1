// The deployment config (egressd.yaml): the operator's floor and the
// destinations every sandbox reaches.  Validated whole at start-up, so a
// deployment that cannot work (a platform service under the floor, a
// single-label gateway on an airgapped deployment) never starts.
//
//   airgapped: false          # the one switch: true denies all not named
//   hostedEdge: false         # also protect private, CGNAT, loopback, link-local
//   protected: [CIDR...]      # more destinations no sandbox may reach
//   onDeny: reject            # reject (EPERM at once) | drop (silent)
//   platform:                 # each a URL, name, address or CIDR, or a list
//     api: https://platform.example.com
//     modelGateway: https://gateway.example.com/v1
//     objectStorage: https://s3.example.com
//     packageIndices: [https://pypi.org/simple, files.pythonhosted.org]
//     containerRegistry: registry.example.com
//   sealedInstalls: false     # true: sandboxes do not reach packageIndices
//   egressExtraAllow: [target...]
//   sandboxExtraEnv: {UV_INDEX_URL: https://mirror.example.com/simple}
//   dns:                      # the DNS proxy (docs/dns.md)
//     upstreams: [198.51.100.8, "192.0.2.53:5353", "[2001:db8::53]:53"]
//     endpoint4: 10.244.0.1   # where sandboxes' queries are steered (a pod's gateway)
//     endpoint6: fd00:244::1
//     minTtlSeconds: 300      # a learned address lives max(TTL, this) + grace
//     graceSeconds: 120       # (docs/dns.md "Lifetimes" argues the defaults)
//     maxAddressesPerSandbox: 4096  # learned addresses a sandbox may hold
//     maxAddressesPerName: 256      # per question name; LRU unused ones evicted past it
//   audit:
//     allowAuditOnly: false   # true: the operator may register a sandbox
//                             # audit-only (egressctl sandbox add --audit-only);
//                             # never a default for every sandbox
//   limits:                   # per-sandbox caps (issue 14), checked at every
//                             # registration (daemon PUT, sandbox add)
//     maxCidrEntriesPerSandbox: 4096   # IPv4 allow-trie entries after folding
//     maxCidr6EntriesPerSandbox: 1024  # IPv6 allow-trie entries after folding
//     maxNamesPerSandbox: 1024         # names + wildcard rules
//   flows:                    # the tc flow table (issue 17; sandboxes behind a veth)
//     maxPerSandbox: 4096          # flows a sandbox may hold; past it, judged per packet
//     tcpIdleSeconds: 3600         # an answered TCP connection without packets
//     tcpTransitorySeconds: 60     # TCP opening (no answer yet) or closing (a FIN)
//     udpIdleSeconds: 120          # UDP and other protocols without packets
//   containedRoots: [/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice]
#ifndef EGRESSD_USERSPACE_POLICY_DEPLOYMENT_CONFIG_H_
#define EGRESSD_USERSPACE_POLICY_DEPLOYMENT_CONFIG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/net/ip.h"
#include "userspace/policy/compiled_policy.h"
#include "userspace/policy/floor.h"
#include "userspace/policy/public_suffix.h"
#include "userspace/policy/reach.h"

namespace egressd::policy {

// ---- dns: the DNS proxy's node settings (issue 11) ----
// An upstream resolver, IP[:PORT] ("[IPv6]:PORT" with a port); port 53 when
// none is written.
struct DnsUpstreamSetting {
  net::IpAddr addr;
  uint16_t port = 53;
  bool operator==(const DnsUpstreamSetting&) const = default;
};
// What a sandbox may learn (docs/dns.md, "Bounds"; dns::Bounds): 4096
// addresses per sandbox lets 256 sandboxes on a node fill their quotas within
// the node-wide map's 1,048,576 entries; 256 per name holds a rotating CDN
// name (S3: 8 addresses an answer, TTL 5 s) for a connection pool, 16 names
// to a quota.
inline constexpr uint32_t kDefaultMaxAddressesPerSandbox = 4096;
inline constexpr uint32_t kDefaultMaxAddressesPerName = 256;
inline constexpr uint32_t kMaxLearnedAddresses = 1u << 20;  // the node-wide map's capacity
struct DnsSettings {
  // Asked in order by `egressctl dns serve` and `egressctl run` when no
  // --upstream-dns is given (run then falls back to /etc/resolv.conf).
  std::vector<DnsUpstreamSetting> upstreams;
  // The node addresses `sandbox add` steers a sandbox's queries to when
  // neither --dns-endpoint4 nor --dns-endpoint6 is given.
  std::optional<net::IpAddr> endpoint4;
  std::optional<net::IpAddr> endpoint6;
  // The lifetime of a learned address: max(TTL, min_ttl_s) + grace_s; the
  // proxy's defaults (userspace/dns/learner.h) when unset.
  std::optional<uint32_t> min_ttl_s;
  std::optional<uint32_t> grace_s;
  // dns.maxAddressesPerSandbox / dns.maxAddressesPerName (issue 12).
  uint32_t max_addresses_per_sandbox = kDefaultMaxAddressesPerSandbox;
  uint32_t max_addresses_per_name = kDefaultMaxAddressesPerName;
};
// Bounds of the lifetime settings: a day, an hour.
inline constexpr uint32_t kMaxMinTtlSeconds = 86400;
inline constexpr uint32_t kMaxGraceSeconds = 3600;
// One upstream as the config writes it; InvalidArgument saying why (the
// caller names the setting and the value).
absl::StatusOr<DnsUpstreamSetting> ParseDnsUpstream(std::string_view text);
// metrics.address (or egressd --metrics-address): IP:PORT or [IPv6]:PORT, one
// address, never a wildcard; InvalidArgument naming the setting and the value.
absl::StatusOr<DnsUpstreamSetting> ParseMetricsAddress(std::string_view text);
// ---- end dns ----

// ---- limits: per-sandbox caps (issue 14) ----
// So that no declaration can fill a map every sandbox shares: the defaults
// let kSandboxesPerNode sandboxes hold their caps at once within each
// node-wide map (maps/egressd_abi.h: EGR_MAX_ALLOW4 = 2^20 and EGR_MAX_ALLOW6
// = 2^18 entries; the same 256 as dns.maxAddressesPerSandbox's default in
// EGR_MAX_RESOLVED).  Policies are shared by content, so identical
// declarations take one policy's entries however many sandboxes hold them.
inline constexpr uint32_t kSandboxesPerNode = 256;
inline constexpr uint32_t kAllow4Capacity = 1u << 20;  // EGR_MAX_ALLOW4 (policy/ knows no BPF header)
inline constexpr uint32_t kAllow6Capacity = 1u << 18;  // EGR_MAX_ALLOW6
inline constexpr uint32_t kDefaultMaxCidrEntriesPerSandbox = kAllow4Capacity / kSandboxesPerNode;   // 4096
inline constexpr uint32_t kDefaultMaxCidr6EntriesPerSandbox = kAllow6Capacity / kSandboxesPerNode;  // 1024
// Names live in user space (the proxy's scopes, the record), not in a
// kernel map; each needs at least one learned address to be of use, so the
// default is no more than the default learned-address quota allows to be
// served at once with 4 addresses a name.
inline constexpr uint32_t kDefaultMaxNamesPerSandbox = 1024;
inline constexpr uint32_t kMaxNamesPerSandbox = 1u << 16;
struct SandboxLimits {
  uint32_t max_cidr4_entries = kDefaultMaxCidrEntriesPerSandbox;
  uint32_t max_cidr6_entries = kDefaultMaxCidr6EntriesPerSandbox;
  uint32_t max_names = kDefaultMaxNamesPerSandbox;
  bool operator==(const SandboxLimits&) const = default;
};
// ---- end limits ----

// ---- flows: the tc flow table (issue 17, docs/datapath.md "Flow state") ----
// The same values as maps/egressd_abi.h's EGR_FLOW_DEFAULT_* and
// EGR_MAX_FLOWS (policy/ knows no BPF header; tests/unit pins them equal):
// 4096 flows a sandbox lets kSandboxesPerNode sandboxes hold their quotas in
// the node-wide map; TCP idles an hour (a connection pool's keep-alive is
// shorter), opening or closing a minute (a SYN unanswered, TIME_WAIT), UDP
// two minutes (as conntrack's UDP stream).
inline constexpr uint32_t kFlowCapacity = 1u << 20;
inline constexpr uint32_t kDefaultFlowsPerSandbox = kFlowCapacity / kSandboxesPerNode;  // 4096
inline constexpr uint32_t kDefaultTcpIdleSeconds = 3600;
inline constexpr uint32_t kDefaultTcpTransitorySeconds = 60;
inline constexpr uint32_t kDefaultUdpIdleSeconds = 120;
inline constexpr uint32_t kMaxFlowTimeoutSeconds = 7 * 86400;
struct FlowSettings {
  uint32_t max_per_sandbox = kDefaultFlowsPerSandbox;
  uint32_t tcp_idle_s = kDefaultTcpIdleSeconds;
  uint32_t tcp_transitory_s = kDefaultTcpTransitorySeconds;
  uint32_t udp_idle_s = kDefaultUdpIdleSeconds;
  bool operator==(const FlowSettings&) const = default;
};
// ---- end flows ----

struct DeploymentConfig {
  bool airgapped = false;
  DenyAction deny_action = DenyAction::kReject;
  // The floor: denied to every sandbox whatever it declares.
  std::vector<ProtectedCidr> protected_cidrs;
  // What every sandbox reaches, on top of its own scope: the platform's
  // services (less the package indices when installs are sealed),
  // egressExtraAllow, and the hosts of URL-valued sandboxExtraEnv entries.
  Reachable always;
  // platform.containerRegistry: reached by a task sandbox that ships
  // compose services.
  Reachable container_registry;
  // Accepted but worth saying: ignored single-label hosts, wildcards over
  // public suffixes.
  std::vector<std::string> warnings;
  // dns: (upstreams, endpoints); empty when the config has none.
  DnsSettings dns;
  // audit.allowAuditOnly: a sandbox may be registered audit-only (its
  // policy's denials recorded as would-deny and allowed).  Only a permission:
  // no sandbox is audit-only unless its registration asks.
  bool allow_audit_only = false;
  // limits: the per-sandbox caps (control/sandbox_caps.h checks them).
  SandboxLimits limits;
  // flows: the tc flow table's quota and timeouts, node-wide (written to
  // egr_flowcfg_v1 by the daemon at start and by `sandbox add --config`).
  FlowSettings flows;
  // containedRoots: cgroup v2 directories (absolute paths) the daemon marks
  // contained roots at start and on every reload, releasing the ones a
  // reload no longer names (docs/api.md, "Contained roots from the
  // config"): a cgroup below one with no registration of its own gets no
  // egress.
  std::vector<std::string> contained_roots;
  // metrics.address (issue 14): where the daemon serves Prometheus /metrics
  // over TCP; none: no TCP listener.  A specific address, never 0.0.0.0 or
  // ::, since the kernel guards exactly that address and port from every
  // sandbox (docs/api.md).
  std::optional<DnsUpstreamSetting> metrics_address;
  // runtimeClasses (issue 17): a Kubernetes RuntimeClass name -> the runtime
  // behind it (runtime_kind.h), so that a PUT naming its pod's class
  // (runtime_class) is held to what that runtime can be enforced with.
  std::map<std::string, std::string> runtime_classes;
};

// `egressctl run --floor F --on-deny A` as a one-machine deployment: the
// floor's protected list (sources "floor F"), no platform services.
DeploymentConfig DeploymentForFloor(Floor floor, DenyAction action);

// The embedded default when no config is given: connected, the credential
// endpoints protected, no platform services.
inline DeploymentConfig DefaultDeployment() {
  return DeploymentForFloor(Floor::kConnected, DenyAction::kReject);
}

// Reads and validates a config.  Every problem, one line each starting
// "deployment setting ", in one InvalidArgumentError.  `file` names the
// input in syntax errors; `psl` (may be null) flags public-suffix wildcards.
absl::StatusOr<DeploymentConfig> ParseDeploymentConfig(
    std::string_view yaml, std::string_view file, const PublicSuffixes* psl);

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_DEPLOYMENT_CONFIG_H_
