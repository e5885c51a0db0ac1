// The node daemon (issue 14): one process, one io_context hosting the
// control API (http_server.h), the DNS proxy for every registered sandbox
// (record_watcher.h) and the audit trail's reader (audit_host.h).  Start-up
// adopts what is pinned (or loads it, the same code as `egressctl load`),
// reconciles the records under the instance lock, and serves the records'
// sandboxes again on the same endpoints: a restart needs no call from the
// orchestrator.  Nothing is torn down when it stops: enforcement lives in
// the pinned links and maps, and a sandbox's DNS fails closed while no
// daemon serves its endpoint.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "absl/status/statusor.h"
#include "maps/pinned_maps.h"
#include "maps/resolved_collector.h"
#include "maps/resolved_table.h"
#include "userspace/audit/dns_events.h"
#include "userspace/audit/user_events.h"
#include "userspace/common/node.h"
#include "userspace/common/unique_fd.h"
#include "userspace/control/registry.h"
#include "userspace/control/sandbox_record.h"
#include "userspace/daemon/audit_host.h"
#include "userspace/daemon/audit_route.h"
#include "userspace/daemon/cgroup_watch.h"
#include "userspace/daemon/cgroup_gone_watch.h"
#include "userspace/daemon/client.h"
#include "userspace/daemon/dns_host.h"
#include "userspace/daemon/config_reload.h"
#include "userspace/daemon/handover.h"
#include "userspace/daemon/http_server.h"
#include "userspace/daemon/metrics_server.h"
#include "userspace/daemon/record_watcher.h"
#include "userspace/daemon/sandbox_request.h"
#include "userspace/dns/proxy.h"
#include "userspace/dns/upstream.h"
#include "userspace/policy/deployment_config.h"
#include "userspace/policy/policy_inputs.h"

namespace egressd::daemon {

struct DaemonOptions {
  Paths paths;
  std::string config_path;  // the deployment config; empty: the embedded default
  std::string socket_path;  // empty: DefaultSocketPath(paths)
  // Register sandboxes where the bpf LSM is not in force (the operator's
  // opt-out, as sandbox add's --accept-uncontained-packet-sockets).
  bool accept_uncontained = false;
  int audit_window_ms = 1000;
  int upstream_timeout_ms = 2000;
  int upstream_tries = 2;
  // Where PUTs naming a pod_uid look for the pod's cgroup (pod_cgroup.h);
  // empty: the cgroup2 mount.
  std::vector<std::string> kubelet_cgroup_roots;
  // --metrics-address: overrides the config's metrics.address (a per-node
  // value: the DaemonSet passes $(NODE_IP):9464); empty: the config's.
  std::string metrics_address;
  // The hand-over (handover.h): called once this daemon, superseded by a
  // new one, has answered what it read (the binary then exits).
  std::function<void()> on_superseded;
  int handover_timeout_ms = 5000;  // for each of the old daemon's messages
  int handover_drain_ms = 3000;    // how long TCP connections may stay open after
};

class Daemon {
 public:
  // InvalidArgument: a bad config (nothing was changed); Unavailable:
  // another daemon serves this instance; other codes: the node.
  static absl::StatusOr<std::unique_ptr<Daemon>> Create(boost::asio::io_context& io, DaemonOptions options);
  ~Daemon();

  Response Handle(const Request& request, const Peer& peer);
  const std::string& socket_path() const { return socket_path_; }
  bool adopted() const { return adopted_; }
  // Re-reads --config and applies it (config_reload.h): SIGHUP and POST
  // /v1/config:reload.  `via` names the trigger in logs and audit records.
  Response Reload(const std::string& via);
  // A newer daemon serves this one's sockets (handover.h).
  bool superseded() const { return superseded_; }

 private:
  Daemon(boost::asio::io_context& io, DaemonOptions options);
  absl::Status Start();
  Response Put(const std::string& id, const std::string& body);
  // What PUT checks before it needs the cgroup: the compiled policy, the
  // spec without its cgroup, every input problem, and whether the node can
  // take it at all (a Response then).
  struct Prepared {
    std::optional<policy::CompiledPolicy> policy;
    control::SandboxSpec spec;
    bool dns_served = false;
    std::vector<std::string> bad;
    std::optional<Response> refusal;
  };
  Prepared Prepare(const std::string& id, const SandboxRequest& req);
  std::optional<Response> CheckNode(const std::string& id, const SandboxRequest& req, const Prepared& p);
  // Registers req.cgroup (resolved) as `id`.
  Response Apply(const std::string& id, const SandboxRequest& req);
  // A pod whose cgroup is not there yet: held, 202.
  Response Hold(const std::string& id, const SandboxRequest& req);
  // A directory appeared: apply every held pod whose cgroup now exists,
  // then watch deeper for the others.
  void OnCgroupTreeChange();
  std::vector<std::string> KubeletRoots();
  nlohmann::json PendingJson(const std::string& id);
  Response Get(const std::string& id);
  Response List();
  Response Delete(const std::string& id);
  // node_view: also the maps-only status's keys (control/node_status.h).
  Response Status(bool node_view);
  Response Ready();
  // The record of the sandbox registered under `id`, if any.
  absl::StatusOr<std::optional<control::SandboxRecord>> Find(const std::string& id);
  nlohmann::json SandboxJson(const control::SandboxRecord& r);
  bool IsSandboxedPath(const std::string& cgroup_path);
  // Vanished cgroups (cgroup_collect.cc).
  absl::Status StartCollecting();
  void CollectVanished(uint64_t cgroup_id);
  // The cgroup links as the kernel has them (link_status.cc); `missing`
  // gets a line naming every one not in force.
  nlohmann::json LinksJson(std::vector<std::string>* missing);
  bool LinksInForce();
  // Held PUTs on disk (held_store.cc).
  std::string HeldDir() const;
  absl::Status PersistHeld(const std::string& id, const std::string& body);
  void ForgetHeld(const std::string& id);
  void ReloadHeld();
  // Per-sandbox caps and the node's capacity (sandbox_detail.cc): a PUT
  // past a cap is a 400 naming it; GET's counters, learned addresses, caps.
  std::optional<Response> CapsRefusal(const SandboxRequest& req, const policy::CompiledPolicy& p);
  nlohmann::json SandboxDetail(const control::SandboxRecord& r);
  nlohmann::json NodeCapacityJson();
  // GET /v1/sandboxes/{id}/explain?QUERY (explain_route.cc); target: the whole request target.
  Response Explain(const std::string& id, const std::string& target);

  boost::asio::io_context& io_;
  DaemonOptions options_;
  std::string socket_path_;
  std::optional<policy::InputText> config_;  // nullopt: the embedded default
  policy::DeploymentConfig deployment_;
  UniqueFd daemon_lock_;
  bool adopted_ = false;
  std::optional<maps::PinnedMaps> maps_;
  std::unique_ptr<control::SandboxRecords> records_;
  std::unique_ptr<audit::UserEventWriter> audit_;
  // dns_host_'s (null without a DNS upstream).
  maps::ResolvedTable* resolved_ = nullptr;
  dns::DnsProxy* proxy_ = nullptr;
  std::unique_ptr<RecordWatcher> watcher_;
  std::unique_ptr<AuditHost> audit_host_;
  std::unique_ptr<HttpServer> server_;
  std::map<std::string, uint64_t> index_;  // API id -> cgroup id
  // Held PUTs (pod_uid whose cgroup does not exist yet), by API id; each
  // also on disk until it is applied or deleted (held_store.cc).
  struct Held {
    SandboxRequest request;
    nlohmann::json error;  // non-null: its cgroup appeared but applying failed (the answer's body)
  };
  std::map<std::string, Held> held_;
  std::unique_ptr<CgroupWatch> cgroup_watch_;
  std::unique_ptr<CgroupGoneWatch> gone_watch_;
  std::unique_ptr<DnsHost> dns_host_;  // the DNS stack (dns_host.h); null without a DNS upstream
  // Config reload and the contained roots from the config (config_reload.cc).
  absl::Status StartConfig();
  Response ApplyConfig(policy::DeploymentConfig next, std::optional<policy::InputText> text, const std::string& via);
  nlohmann::json ContainConfigRoots(const std::string& via, bool& node_failed);
  void ReleaseConfigRoots(const std::string& via, nlohmann::json& state, bool& node_failed);
  // The previous declaration, for RestoreDeclaration should the PUT fail.
  absl::StatusOr<std::optional<Declaration>> SaveDeclaration(uint64_t cgroup_id, const std::string& id,
                                                             const SandboxRequest& req);
  void RestoreDeclaration(uint64_t cgroup_id, const std::optional<Declaration>& previous);
  void ForgetDeclaration(uint64_t cgroup_id);
  // A sandbox a reload left `failed`: its state and error in `j`.
  void MarkFailed(uint64_t cgroup_id, nlohmann::json& j);
  // The registry's in-memory index of the records (control::RegistryIndex):
  // a PUT reads no other sandbox's record.
  control::Registry IndexedRegistry() { return control::Registry(options_.paths, &registry_index_); }
  // After sandboxes went (memory_trim.cc): the heap pages their DNS
  // endpoints freed go back to the kernel.
  void TrimAfterStop();
  // A reload's pass over the held PUTs (config_reload.cc): each judged again
  // under the new config; its outcome appended.
  void RecheckHeld(nlohmann::json& outcomes);
  nlohmann::json ContainedRootsJson();
  void ReadyContainedRoots(nlohmann::json& checks, std::vector<std::string>& missing);
  std::unique_ptr<DeclarationStore> declarations_;
  std::map<uint64_t, nlohmann::json> failed_;  // cgroup id -> the error a reload gave it
  nlohmann::json roots_state_;                 // the contained roots as the last pass left them
  std::unique_ptr<AuditRoute> audit_route_;      // GET /v1/audit (audit_route.h)
  std::unique_ptr<MetricsServer> metrics_;       // metrics.address (metrics_server.h)
  absl::Status StartApiExtras();                 // both of them (api_extras.cc)
  nlohmann::json ExtrasStatus();
  // The hand-over (daemon_handover.cc, handover.h).
  absl::Status TakeOver();
  void InheritDnsSockets();
  absl::Status ServeApi();
  absl::Status FinishStart();
  std::vector<HandoverFd> HandoverSockets();
  absl::StatusOr<uint64_t> Superseded();
  void ExitWhenDrained(std::chrono::steady_clock::time_point deadline);
  std::unique_ptr<HandoverClient> taking_over_;  // while this daemon takes over
  std::unique_ptr<HandoverServer> handover_;
  std::unique_ptr<boost::asio::steady_timer> drain_timer_;
  bool superseded_ = false;
  control::RegistryIndex registry_index_;
  size_t stopped_since_trim_ = 0;
  bool trim_posted_ = false;
};

}  // namespace egressd::daemon
