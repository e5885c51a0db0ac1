#include "userspace/daemon/daemon.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <set>
#include <utility>

#include <spdlog/spdlog.h>

#include "maps/flow_table.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "loader/loader.h"
#include "loader/probe.h"
#include "maps/egressd_abi.h"
#include "maps/lpm_keys.h"
#include "maps/sandbox_table.h"
#include "userspace/audit/lifecycle.h"
#include "userspace/common/cgroup_tree.h"
#include "userspace/common/errors.h"
#include "userspace/common/instance_lock.h"
#include "userspace/control/node_status.h"
#include "userspace/control/reconcile.h"
#include "userspace/control/registry.h"
#include "userspace/daemon/pod_cgroup.h"
#include "userspace/dns/learner.h"
#include "userspace/policy/compiled_policy_json.h"
#include "userspace/policy/yaml_walk.h"

namespace egressd::daemon {

Daemon::Daemon(boost::asio::io_context& io, DaemonOptions options) : io_(io), options_(std::move(options)) {
  socket_path_ = options_.socket_path.empty() ? DefaultSocketPath(options_.paths) : options_.socket_path;
}

Daemon::~Daemon() {
  // Stops serving; tears nothing down (the pins and records stay).
  server_.reset();
  gone_watch_.reset();
  audit_host_.reset();
  watcher_.reset();
  proxy_ = nullptr;
  resolved_ = nullptr;
  dns_host_.reset();
  // Superseded: the socket file is the new daemon's.
  if (!superseded_) unlink(socket_path_.c_str());
}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Create(boost::asio::io_context& io, DaemonOptions options) {
  std::unique_ptr<Daemon> d(new Daemon(io, std::move(options)));
  EGR_RETURN_IF_ERROR(d->Start());
  return d;
}

absl::Status Daemon::Start() {
  const Paths& paths = options_.paths;
  // The config first: a bad one changes nothing.
  deployment_ = policy::DefaultDeployment();
  if (!options_.config_path.empty()) {
    auto text = policy::yaml::ReadInputFile(options_.config_path);
    if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("--config ", text.status().message()));
    EGR_ASSIGN_OR_RETURN(deployment_, policy::ParseDeploymentConfig(*text, options_.config_path, nullptr));
    config_ = policy::InputText::Inline(options_.config_path, *text);
  }
  EGR_RETURN_IF_ERROR(MakeDirs(paths.runtime_dir, 0700));
  // One daemon per instance, for as long as it runs.
  const std::string lock_path = paths.runtime_dir + "/daemon.lock";
  daemon_lock_.reset(open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!daemon_lock_.valid()) return ErrnoStatus(errno, absl::StrCat("open ", lock_path));
  if (flock(daemon_lock_.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return ErrnoStatus(errno, absl::StrCat("flock ", lock_path));
    // Another daemon serves: take over from it (daemon_handover.cc).
    EGR_RETURN_IF_ERROR(TakeOver());
  }
  {
    EGR_ASSIGN_OR_RETURN(auto lock, InstanceLock::Acquire(paths));
    // A pinned link someone detached is not in force: load, re-attaching it.
    adopted_ = ProgramsCurrent(paths) && LinksInForce();
    if (!adopted_) {
      EGR_RETURN_IF_ERROR(RequireKernel(paths));
      EGR_ASSIGN_OR_RETURN(LoadReport r, LoadEnforcement(paths, lock));
      spdlog::info("programs loaded: {} attached, {} updated in place", r.links_attached, r.links_updated);
      // As `egressctl load` prints it: an upgrade over an older layout says what it carried.
      for (const auto& m : r.migrations) {
        spdlog::info("migrated {} -> {}: {} entries carried, {} forgotten since (deleted from the copy), {:.3f} s; {} "
                     "unpinned",
                     m.from, m.to, m.carried, m.leveled, m.seconds, m.from);
      }
    } else {
      spdlog::info("programs adopted: this build's, pinned under {}", paths.pin_root);
    }
    // The tc flow table's settings (node-wide, docs/datapath.md "Flow state").
    EGR_RETURN_IF_ERROR(maps::WriteFlowConfig(paths.pin_root, {.quota = deployment_.flows.max_per_sandbox,
                                                               .tcp_idle_s = deployment_.flows.tcp_idle_s,
                                                               .tcp_transitory_s = deployment_.flows.tcp_transitory_s,
                                                               .udp_idle_s = deployment_.flows.udp_idle_s}));
    EGR_ASSIGN_OR_RETURN(auto rec, control::Reconcile(paths, lock));
    if (rec.changed()) {
      spdlog::warn("reconciled: {} record(s) dropped, {} reverted, {} repaired, {} created, {} dead cgroup(s), {} "
                   "sandbox(es) of vanished interfaces, {} interface entr(ies) fixed",
                   rec.records_dropped, rec.records_reverted, rec.records_repaired, rec.records_created,
                   rec.dead_cgroups, rec.dead_interfaces, rec.interface_entries_fixed);
    }
  }
  EGR_ASSIGN_OR_RETURN(auto m, maps::PinnedMaps::Open(paths.pin_root));
  maps_.emplace(std::move(m));
  records_ = std::make_unique<control::SandboxRecords>(paths);
  EGR_RETURN_IF_ERROR(MakeDirs(records_->dir(), 0700));
  EGR_ASSIGN_OR_RETURN(auto all, records_->List());
  EGR_RETURN_IF_ERROR(CheckOutsideSandboxes(all, "egressd"));
  for (const auto& r : all) {
    if (auto id = ApiIdOf(r)) index_[*id] = r.cgroup_id;
  }
  EGR_ASSIGN_OR_RETURN(audit_, audit::UserEventWriter::Open(paths, "egressd"));
  if (!deployment_.dns.upstreams.empty()) {
    DnsHostOptions ho;
    for (const auto& u : deployment_.dns.upstreams) ho.upstream.servers.push_back(dns::UpstreamServer{u.addr, u.port});
    ho.upstream.timeout_ms = options_.upstream_timeout_ms;
    ho.upstream.tries = options_.upstream_tries;
    ho.SetFrom(deployment_.dns);
    ho.audit = audit_.get();
    ho.self_test = true;
    EGR_ASSIGN_OR_RETURN(dns_host_, DnsHost::Create(io_, paths, *maps_, std::move(ho)));
    proxy_ = &dns_host_->proxy();
    resolved_ = &dns_host_->table();
    InheritDnsSockets();
    watcher_ = std::make_unique<RecordWatcher>(io_, *records_, *proxy_, [](const std::string& line) {
      spdlog::info("dns: {}", line);
    });
    // Watch first, then read: a record written in between is seen twice,
    // never missed.
    EGR_RETURN_IF_ERROR(watcher_->Start());
    for (const auto& r : all) watcher_->Refresh(r.cgroup_id);
  } else {
    spdlog::warn("no dns.upstreams in the config: sandboxes' DNS fails closed and the daemon is not ready");
  }
  // Sandboxes whose cgroup goes while we run are collected at once.
  EGR_RETURN_IF_ERROR(StartCollecting());
  EGR_RETURN_IF_ERROR(StartConfig());
  audit_host_ = std::make_unique<AuditHost>(io_, paths, options_.audit_window_ms);
  audit_host_->Start();
  // PUTs held when the last daemon stopped: applied now if their cgroup
  // appeared meanwhile, before the API answers anyone.
  ReloadHeld();
  EGR_RETURN_IF_ERROR(StartApiExtras());
  server_ = std::make_unique<HttpServer>(
      io_, [this](const Request& r, const Peer& p) { return Handle(r, p); },
      [this](const std::string& path) { return IsSandboxedPath(path); });
  EGR_RETURN_IF_ERROR(ServeApi());
  audit_->Submit(audit::EngineJson("started", {{"via", "egressd"}, {"adopted", adopted_}, {"pin_root", paths.pin_root}}), 0);
  spdlog::info("serving the API on {} ({} sandboxes)", socket_path_, all.size());
  return FinishStart();
}

bool Daemon::IsSandboxedPath(const std::string& cgroup_path) {
  auto mount = FindCgroup2Mount();
  if (!mount.ok()) return true;  // cannot tell: refuse
  maps::SandboxTable table(*maps_);
  for (std::string p = cgroup_path; !p.empty() && p != "/"; p = p.substr(0, p.rfind('/'))) {
    auto id = CgroupIdOf(*mount + p);
    if (!id.ok()) continue;
    auto entry = table.Get(*id);
    if (!entry.ok()) return true;
    // A sandbox or a contained root: both are below egressd's containment.
    if (entry->has_value()) return true;
  }
  return false;
}

Response Daemon::Handle(const Request& request, const Peer&) {
  std::string target = request.target.substr(0, request.target.find('?'));
  const std::string& m = request.method;
  if (target == "/healthz") return m == "GET" ? Response{200, {{"ok", true}}} : ErrorResponse(405, "method", "GET only");
  if (target == "/readyz") return m == "GET" ? Ready() : ErrorResponse(405, "method", "GET only");
  if (target == "/v1/status") {
    if (m != "GET") return ErrorResponse(405, "method", "GET only");
    // ?node=1 adds the maps' view (egressctl status); without it the answer
    // stays cheap for an orchestrator that polls `enforcing`.
    const std::string query = request.target.substr(target.size());
    if (query.empty() || query == "?node=1") return Status(!query.empty());
    return FromStatus(absl::InvalidArgumentError(
        absl::StrCat("/v1/status: unknown query \"", query.substr(1), "\" (only node=1)")));
  }
  if (target == "/v1/config:reload") return m == "POST" ? Reload("api") : ErrorResponse(405, "method", "POST only");
  if (target == "/v1/audit") return m == "GET" ? audit_route_->Get(request.target) : ErrorResponse(405, "method", "GET only");
  if (target == "/v1/sandboxes" || target == "/v1/sandboxes/") {
    return m == "GET" ? List() : ErrorResponse(405, "method", "GET only (PUT /v1/sandboxes/{id} registers)");
  }
  const std::string kPrefix = "/v1/sandboxes/";
  if (absl::StartsWith(target, kPrefix)) {
    const std::string id = target.substr(kPrefix.size());
    if (absl::EndsWith(id, "/explain")) return m == "GET" ? Explain(id.substr(0, id.size() - 8), request.target) : ErrorResponse(405, "method", "GET only");
    if (absl::Status s = CheckSandboxId(id); !s.ok()) return FromStatus(s);
    if (m == "PUT") return Put(id, request.body);
    if (m == "GET") return Get(id);
    if (m == "DELETE") return Delete(id);
    return ErrorResponse(405, "method", "GET, PUT or DELETE");
  }
  return ErrorResponse(404, "not_found", absl::StrCat("no such resource: ", target));
}

Response Daemon::Status(bool node_view) {
  nlohmann::json j;
  const bool loaded = IsLoaded(options_.paths);
  const absl::Status containment = RequireSocketContainment(options_.paths);
  // Enforcing: every cgroup link pinned and in force in the kernel (a pin
  // whose link was detached judges nothing), as a PUT requires (CheckNode).
  std::vector<std::string> links_missing;
  j["links"] = LinksJson(&links_missing);
  j["enforcing"] = loaded && links_missing.empty();
  if (!loaded) links_missing.insert(links_missing.begin(), "not every cgroup link is pinned under " + options_.paths.pin_root);
  if (!links_missing.empty()) j["enforcing_missing"] = links_missing;
  j["socket_containment"] = containment.ok();
  if (!containment.ok()) j["socket_containment_missing"] = std::string(containment.message());
  j["accepts_uncontained"] = options_.accept_uncontained;
  j["programs"] = adopted_ ? "adopted" : "loaded";
  j["pin_root"] = options_.paths.pin_root;
  nlohmann::json ups = nlohmann::json::array();
  for (const auto& u : deployment_.dns.upstreams) ups.push_back(dns::UpstreamServer{u.addr, u.port}.ToString());
  j["dns"] = {{"upstreams", ups},
              {"served", proxy_ ? proxy_->size() : 0},
              {"self_test_late_answers", dns_host_ ? dns_host_->self_test_late_answers() : 0}};
  j["audit"] = {{"reader", audit_host_ && audit_host_->holding()}};
  auto all = records_->List();
  j["sandboxes"] = all.ok() ? all->size() : 0;
  j["held"] = held_.size();
  j["refused_callers"] = server_ ? server_->refused() : 0;
  j["capacity"] = NodeCapacityJson();
  j["contained_roots"] = ContainedRootsJson();
  j.update(ExtrasStatus());
  // What `egressctl status` shows without a daemon (control/node_status.h:
  // cgroups, policies, records, consistency, counters, learned addresses),
  // under the same keys, so asking the daemon loses nothing.  The daemon's
  // own keys above win where both have one (socket_containment, pin_root).
  if (!node_view) return Response{200, std::move(j)};
  if (!maps_) return ErrorResponse(503, "maps", "the pinned maps are not open");
  const uint64_t window_ns = uint64_t{dns::LifetimeOf(deployment_.dns).grace_s} * 1'000'000'000ull;
  auto node = control::NodeStatusJson(options_.paths, *maps_, window_ns);
  if (!node.ok()) return FromStatus(node.status());
  for (auto& [key, value] : node->items()) {
    if (!j.contains(key)) j[key] = std::move(value);
  }
  return Response{200, std::move(j)};
}

Response Daemon::Ready() {
  // Each check by name: true, or false with its reason (also in `missing`).
  nlohmann::json checks;
  nlohmann::json reasons = nlohmann::json::object();
  std::vector<std::string> missing;
  auto check = [&](const std::string& name, bool ok, const std::string& why) {
    checks[name] = ok;
    if (ok) return;
    reasons[name] = why;
    missing.push_back(why);
  };
  check("programs_attached", IsLoaded(options_.paths),
        "not every cgroup link is pinned under " + options_.paths.pin_root);
  std::vector<std::string> links_missing;
  checks["links"] = LinksJson(&links_missing);
  check("links_in_force", links_missing.empty(), absl::StrJoin(links_missing, "; "));
  auto m = maps::PinnedMaps::Open(options_.paths.pin_root);
  check("maps_open", m.ok(), m.ok() ? "" : std::string(m.status().message()));
  check("dns_upstream", proxy_ != nullptr, "no dns.upstreams in the config: sandboxes' DNS fails closed");
  // A query through the proxy's own socket and code, answered by it
  // (dns_host.h): this call starts the next, the latest finished one counts.
  if (dns_host_) dns_host_->StartSelfTest();
  const SelfTestResult* st = dns_host_ ? &dns_host_->self_test() : nullptr;
  check("dns_self_test", st && st->ok,
        st ? "dns self-test: " + st->reason : "dns self-test: no DNS proxy runs (no dns.upstreams in the config)");
  // Every record with an endpoint is served.
  size_t unserved = 0;
  if (auto all = records_->List(); all.ok()) {
    for (const auto& r : *all) {
      if (DnsEndpointOf(r) && (!proxy_ || !proxy_->Serves(r.cgroup_id))) ++unserved;
    }
  }
  checks["dns_endpoints_unserved"] = unserved;
  if (unserved > 0) {
    const std::string why = absl::StrCat(unserved, " sandbox DNS endpoint(s) not served");
    reasons["dns_endpoints_unserved"] = why;
    missing.push_back(why);
  }
  ReadyContainedRoots(checks, missing);
  const bool ready = missing.empty();
  nlohmann::json j = {{"ready", ready}, {"checks", checks}};
  if (!ready) {
    j["missing"] = missing;
    j["reasons"] = reasons;
  }
  return Response{ready ? 200 : 503, std::move(j)};
}

}  // namespace egressd::daemon
