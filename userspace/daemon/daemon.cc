#include "userspace/daemon/daemon.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <set>
#include <utility>

#include <spdlog/spdlog.h>

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
#include "userspace/control/reconcile.h"
#include "userspace/control/registry.h"
#include "userspace/daemon/pod_cgroup.h"
#include "userspace/policy/compiled_policy_json.h"
#include "userspace/policy/yaml_walk.h"

namespace egressd::daemon {
namespace {

constexpr char kVia[] = "egressd api";

std::optional<std::string> IdOf(const control::SandboxRecord& r) {
  auto it = r.labels.find(kIdLabel);
  if (it == r.labels.end()) return std::nullopt;
  return it->second;
}

absl::Status ParseEndpoint(const char* field, const std::string& text, bool v4, std::optional<net::IpAddr>& into) {
  auto a = net::IpAddr::Parse(text);
  if (!a.ok() || a->is_v4() != v4 || a->bytes() == std::array<uint8_t, 16>{}) {
    return absl::InvalidArgumentError(absl::StrCat("field ", field, " ", net::Quote(text), " is not ",
                                                   v4 ? "an IPv4" : "an IPv6", " unicast address"));
  }
  into = *a;
  return absl::OkStatus();
}

// The depth egressd's sandbox lookup reaches (cmd_sandbox.cc says why).
absl::Status CheckDepth(const std::string& cgroup) {
  EGR_ASSIGN_OR_RETURN(std::string mount, FindCgroup2Mount());
  EGR_ASSIGN_OR_RETURN(int level, CgroupLevel(mount, cgroup));
  constexpr int kDeepest = EGR_MAX_CGROUP_DEPTH - 1;
  if (level > kDeepest) {
    return absl::InvalidArgumentError(absl::StrCat("field cgroup ", net::Quote(cgroup), " is at level ", level,
                                                   " of the cgroup tree; egressd's sandbox lookup walks levels 1 to ",
                                                   kDeepest, ", so it would not be enforced"));
  }
  return absl::OkStatus();
}

}  // namespace

Daemon::Daemon(boost::asio::io_context& io, DaemonOptions options) : io_(io), options_(std::move(options)) {
  socket_path_ = options_.socket_path.empty() ? DefaultSocketPath(options_.paths) : options_.socket_path;
}

Daemon::~Daemon() {
  // Stops serving; tears nothing down (the pins and records stay).
  server_.reset();
  audit_host_.reset();
  watcher_.reset();
  collector_.reset();
  proxy_.reset();
  upstream_.reset();
  unlink(socket_path_.c_str());
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
    if (errno == EWOULDBLOCK) return absl::UnavailableError(absl::StrCat("another egressd serves this instance (", lock_path, " is held)"));
    return ErrnoStatus(errno, absl::StrCat("flock ", lock_path));
  }
  {
    EGR_ASSIGN_OR_RETURN(auto lock, InstanceLock::Acquire(paths));
    adopted_ = ProgramsCurrent(paths);
    if (!adopted_) {
      EGR_RETURN_IF_ERROR(RequireKernel(paths));
      EGR_ASSIGN_OR_RETURN(LoadReport r, LoadEnforcement(paths, lock));
      spdlog::info("programs loaded: {} attached, {} updated in place", r.links_attached, r.links_updated);
    } else {
      spdlog::info("programs adopted: this build's, pinned under {}", paths.pin_root);
    }
    EGR_ASSIGN_OR_RETURN(auto rec, control::Reconcile(paths, lock));
    if (rec.changed()) {
      spdlog::warn("reconciled: {} record(s) dropped, {} reverted, {} repaired, {} created, {} dead cgroup(s)",
                   rec.records_dropped, rec.records_reverted, rec.records_repaired, rec.records_created,
                   rec.dead_cgroups);
    }
  }
  EGR_ASSIGN_OR_RETURN(auto m, maps::PinnedMaps::Open(paths.pin_root));
  maps_.emplace(std::move(m));
  records_ = std::make_unique<control::SandboxRecords>(paths);
  EGR_RETURN_IF_ERROR(MakeDirs(records_->dir(), 0700));
  EGR_ASSIGN_OR_RETURN(auto all, records_->List());
  EGR_RETURN_IF_ERROR(CheckOutsideSandboxes(all, "egressd"));
  for (const auto& r : all) {
    if (auto id = IdOf(r)) index_[*id] = r.cgroup_id;
  }
  EGR_ASSIGN_OR_RETURN(audit_, audit::UserEventWriter::Open(paths, "egressd"));
  if (!deployment_.dns.upstreams.empty()) {
    dns::UpstreamOptions uo;
    for (const auto& u : deployment_.dns.upstreams) uo.servers.push_back(dns::UpstreamServer{u.addr, u.port});
    uo.timeout_ms = options_.upstream_timeout_ms;
    uo.tries = options_.upstream_tries;
    EGR_ASSIGN_OR_RETURN(upstream_, dns::Upstream::Create(io_, uo));
    const dns::Lifetime lifetime = dns::LifetimeOf(deployment_.dns);
    resolved_ = std::make_unique<maps::ResolvedTable>(*maps_, uint64_t{lifetime.grace_s} * 1'000'000'000ull);
    dns_audit_ = std::make_unique<audit::DnsAudit>(*audit_);
    dns::ProxyOptions po;
    po.observer = dns_audit_.get();
    po.lifetime = lifetime;
    po.bounds = dns::Bounds{deployment_.dns.max_addresses_per_sandbox, deployment_.dns.max_addresses_per_name};
    proxy_ = std::make_unique<dns::DnsProxy>(io_, *upstream_, *resolved_, po);
    watcher_ = std::make_unique<RecordWatcher>(io_, *records_, *proxy_, [](const std::string& line) {
      spdlog::info("dns: {}", line);
    });
    // Watch first, then read: a record written in between is seen twice,
    // never missed.
    EGR_RETURN_IF_ERROR(watcher_->Start());
    for (const auto& r : all) watcher_->Refresh(r.cgroup_id);
    // Expired learned addresses go, on this loop: a sweep never interleaves
    // with the proxy's writes (maps/resolved_collector.h).
    collector_ = std::make_unique<maps::ResolvedCollector>(io_, maps_->resolved(), maps_->resuse(),
                                                           maps::ResolvedCollector::Options{});
    resolved_->OnWrite([c = collector_.get()](uint64_t expires) { c->Expect(expires); });
    collector_->Start();
  } else {
    spdlog::warn("no dns.upstreams in the config: sandboxes' DNS fails closed and the daemon is not ready");
  }
  audit_host_ = std::make_unique<AuditHost>(io_, paths, options_.audit_window_ms);
  audit_host_->Start();
  server_ = std::make_unique<HttpServer>(
      io_, [this](const Request& r, const Peer& p) { return Handle(r, p); },
      [this](const std::string& path) { return IsSandboxedPath(path); });
  EGR_RETURN_IF_ERROR(server_->Listen(socket_path_));
  audit_->Submit(audit::EngineJson("started", {{"via", "egressd"}, {"adopted", adopted_}, {"pin_root", paths.pin_root}}), 0);
  spdlog::info("serving the API on {} ({} sandboxes)", socket_path_, all.size());
  return absl::OkStatus();
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
  if (target == "/v1/status") return m == "GET" ? Status() : ErrorResponse(405, "method", "GET only");
  if (target == "/v1/sandboxes" || target == "/v1/sandboxes/") {
    return m == "GET" ? List() : ErrorResponse(405, "method", "GET only (PUT /v1/sandboxes/{id} registers)");
  }
  const std::string kPrefix = "/v1/sandboxes/";
  if (absl::StartsWith(target, kPrefix)) {
    const std::string id = target.substr(kPrefix.size());
    if (absl::Status s = CheckSandboxId(id); !s.ok()) return FromStatus(s);
    if (m == "PUT") return Put(id, request.body);
    if (m == "GET") return Get(id);
    if (m == "DELETE") return Delete(id);
    return ErrorResponse(405, "method", "GET, PUT or DELETE");
  }
  return ErrorResponse(404, "not_found", absl::StrCat("no such resource: ", target));
}

absl::StatusOr<std::optional<control::SandboxRecord>> Daemon::Find(const std::string& id) {
  auto it = index_.find(id);
  if (it != index_.end()) {
    EGR_ASSIGN_OR_RETURN(auto r, records_->Load(it->second));
    if (r && IdOf(*r) == id) return r;
    index_.erase(it);  // removed behind our back (egressctl sandbox remove)
  }
  return std::nullopt;
}

nlohmann::json Daemon::SandboxJson(const control::SandboxRecord& r) {
  nlohmann::json j;
  auto id = IdOf(r);
  j["id"] = id ? nlohmann::json(*id) : nlohmann::json(nullptr);
  j["cgroup"] = r.cgroup_path;
  j["cgroup_id"] = r.cgroup_id;
  control::Labels labels = r.labels;
  labels.erase(kIdLabel);
  j["labels"] = labels;
  // Enforced: the kernel judges the cgroup by the recorded policy, and that
  // policy is not audit-only.
  bool in_kernel = false;
  if (auto e = maps::SandboxTable(*maps_).Get(r.cgroup_id); e.ok() && e->has_value()) {
    in_kernel = (*e)->kind == EGR_CG_SANDBOX && (*e)->policy_id == r.current.policy_id;
  }
  const bool audit_only = r.current.policy && r.current.policy->audit.audit_only;
  j["in_kernel"] = in_kernel;
  j["enforced"] = in_kernel && r.current.policy && !audit_only;
  j["state"] = j["enforced"].get<bool>() ? "enforced" : (in_kernel ? "registered" : "not_in_kernel");
  j["audit_only"] = audit_only;
  j["strict_audit"] = r.current.policy && r.current.policy->audit.strict;
  j["policy_id"] = r.current.policy_id;
  j["policy"] = r.current.policy ? policy::ToJson(*r.current.policy) : nlohmann::json(nullptr);
  if (auto ep = DnsEndpointOf(r)) {
    j["dns"] = {{"endpoint", ep->ToString()},
                {"port", ep->port},
                {"served", proxy_ != nullptr && proxy_->Serves(r.cgroup_id)}};
  } else {
    j["dns"] = nullptr;
  }
  if (!r.note.empty()) j["note"] = r.note;
  return j;
}

std::vector<std::string> Daemon::KubeletRoots() {
  if (!options_.kubelet_cgroup_roots.empty()) return options_.kubelet_cgroup_roots;
  auto mount = FindCgroup2Mount();
  return mount.ok() ? std::vector<std::string>{*mount} : std::vector<std::string>{};
}

Response Daemon::Put(const std::string& id, const std::string& body) {
  auto req = ParseSandboxRequest(body);
  if (!req.ok()) return FromStatus(req.status());
  if (!req->pod_uid.empty()) {
    auto cg = FindPodCgroup(KubeletRoots(), req->pod_uid);
    if (absl::IsNotFound(cg.status())) return Hold(id, *req);
    if (!cg.ok()) return FromStatus(cg.status());
    req->cgroup = *cg;
  }
  Response r = Apply(id, *req);
  // A PUT that named a cgroup, or found its pod's, replaces what was held.
  if (r.status < 300 && held_.erase(id) > 0) OnCgroupTreeChange();
  return r;
}

Daemon::Prepared Daemon::Prepare(const std::string& id, const SandboxRequest& req) {
  Prepared p;
  std::string ep4 = req.dns_endpoint4, ep6 = req.dns_endpoint6;
  if (ep4.empty() && ep6.empty()) {
    if (deployment_.dns.endpoint4) ep4 = deployment_.dns.endpoint4->ToString();
    if (deployment_.dns.endpoint6) ep6 = deployment_.dns.endpoint6->ToString();
  }
  p.dns_served = !ep4.empty() || !ep6.empty();
  auto policy = policy::CompileInputs(ToPolicyInputs(req, config_, p.dns_served));
  if (!policy.ok()) {
    if (absl::IsInvalidArgument(policy.status())) {
      audit_->Submit(audit::PolicyRejectedJson(0, kVia, req.cgroup.empty() ? req.pod_uid : req.cgroup,
                                               std::string(policy.status().message())),
                     0);
    }
    p.refusal = FromStatus(policy.status());
    return p;
  }
  p.policy = std::move(*policy);
  p.spec.labels = req.labels;
  p.spec.labels[kIdLabel] = id;
  if (!ep4.empty()) {
    if (auto s = ParseEndpoint("dns_endpoint4", ep4, true, p.spec.dns_addr4); !s.ok()) p.bad.emplace_back(s.message());
  }
  if (!ep6.empty()) {
    if (auto s = ParseEndpoint("dns_endpoint6", ep6, false, p.spec.dns_addr6); !s.ok()) p.bad.emplace_back(s.message());
  }
  if (auto s = maps::CheckFitsMaps(*p.policy); !s.ok()) p.bad.emplace_back(s.message());
  return p;
}

std::optional<Response> Daemon::CheckNode(const std::string& id, const SandboxRequest& req, const Prepared& p) {
  if (p.dns_served && !proxy_ && (!p.policy->names.empty() || !p.policy->wildcard_suffixes.empty())) {
    return FromStatus(absl::UnavailableError(
        "the policy names hosts but this daemon has no dns.upstreams in its config: no name could be resolved "
        "for the sandbox; nothing was changed"));
  }
  if (absl::Status s = RequireSocketContainment(options_.paths); !s.ok()) {
    if (!absl::IsFailedPrecondition(s)) return FromStatus(s);
    if (req.require_socket_containment || !options_.accept_uncontained) {
      return ErrorResponse(409, "node_cannot_contain", absl::StrCat("refused, nothing was changed: ", s.message()));
    }
    spdlog::warn("sandbox {}: {} (registered anyway: the daemon accepts uncontained packet sockets)", id,
                 std::string(s.message()));
  }
  return std::nullopt;
}

Response Daemon::Apply(const std::string& id, const SandboxRequest& req) {
  Prepared p = Prepare(id, req);
  if (p.refusal) return *p.refusal;
  control::SandboxSpec& spec = p.spec;
  spec.cgroup_path = req.cgroup;
  std::vector<std::string>& bad = p.bad;
  auto cgid = CgroupIdOf(req.cgroup);
  if (!cgid.ok()) {
    if (absl::IsNotFound(cgid.status()) || absl::IsInvalidArgument(cgid.status())) {
      bad.push_back(absl::StrCat("field cgroup ", cgid.status().message()));
    } else {
      return FromStatus(cgid.status());
    }
  } else if (auto s = CheckDepth(req.cgroup); !s.ok()) {
    if (!absl::IsInvalidArgument(s)) return FromStatus(s);
    bad.emplace_back(s.message());
  }
  if (!bad.empty()) return FromStatus(absl::InvalidArgumentError(absl::StrJoin(bad, "\n")));
  spec.cgroup_id = *cgid;
  // One id, one cgroup.
  auto existing = Find(id);
  if (!existing.ok()) return FromStatus(existing.status());
  if (*existing && (*existing)->cgroup_id != *cgid) {
    return FromStatus(absl::AlreadyExistsError(absl::StrCat("sandbox ", id, " is registered for cgroup ",
                                                            (*existing)->cgroup_path, ": DELETE it first")));
  }
  auto current = records_->Load(*cgid);
  if (!current.ok()) return FromStatus(current.status());
  if (*current && IdOf(**current) != id) {
    auto other = IdOf(**current);
    return FromStatus(absl::AlreadyExistsError(absl::StrCat(
        "cgroup ", req.cgroup, " is registered ",
        other ? absl::StrCat("as sandbox ", *other) : std::string("without an API id (egressctl sandbox add)"),
        ": remove that registration first")));
  }
  if (auto refused = CheckNode(id, req, p)) return *refused;
  const policy::CompiledPolicy& policy = *p.policy;
  if (absl::Status s = control::Registry(options_.paths).Register(spec, policy); !s.ok()) return FromStatus(s);
  const bool created = !current->has_value();
  index_[id] = *cgid;
  if (created) audit_->Submit(audit::SandboxJson("registered", *cgid, kVia, req.cgroup, spec.labels), *cgid);
  audit_->Submit(audit::PolicyAppliedJson(*cgid, kVia, policy), *cgid);
  auto rec = records_->Load(*cgid);
  if (!rec.ok() || !rec->has_value()) {
    return FromStatus(rec.ok() ? absl::InternalError("the record vanished after registration") : rec.status());
  }
  // The DNS half of the contract: served before we say so.
  if (auto ep = DnsEndpointOf(**rec); ep && proxy_) {
    if (absl::Status s = proxy_->Serve(DnsScopeOf(**rec), *ep); !s.ok()) {
      return ErrorResponse(500, "dns_not_served",
                           absl::StrCat("the policy is in the kernel but its DNS endpoint is not served (the "
                                        "sandbox's DNS fails closed): ", s.message()));
    }
  }
  nlohmann::json j = SandboxJson(**rec);
  if (!req.pod_uid.empty()) j["pod_uid"] = req.pod_uid;
  j["warnings"] = policy.warnings;
  return Response{created ? 201 : 200, std::move(j)};
}

Response Daemon::Hold(const std::string& id, const SandboxRequest& req) {
  // Everything that can be judged without the cgroup is judged now: a
  // held PUT is one that will apply.
  Prepared p = Prepare(id, req);
  if (p.refusal) return *p.refusal;
  if (!p.bad.empty()) return FromStatus(absl::InvalidArgumentError(absl::StrJoin(p.bad, "\n")));
  auto existing = Find(id);
  if (!existing.ok()) return FromStatus(existing.status());
  if (*existing) {
    return FromStatus(absl::AlreadyExistsError(absl::StrCat("sandbox ", id, " is registered for cgroup ",
                                                            (*existing)->cgroup_path, ": DELETE it first")));
  }
  for (const auto& [other, h] : held_) {
    if (other != id && h.request.pod_uid == req.pod_uid && h.error.is_null()) {
      return FromStatus(absl::AlreadyExistsError(
          absl::StrCat("pod_uid ", req.pod_uid, " is held already as sandbox ", other, ": DELETE it first")));
    }
  }
  if (auto refused = CheckNode(id, req, p)) return *refused;
  if (!cgroup_watch_) {
    cgroup_watch_ = std::make_unique<CgroupWatch>(io_, [this] { OnCgroupTreeChange(); });
    if (absl::Status s = cgroup_watch_->Start(); !s.ok()) {
      cgroup_watch_.reset();
      return FromStatus(s);
    }
  }
  held_[id] = Held{req, nullptr};
  spdlog::info("sandbox {}: pod {} has no cgroup yet under {}: held until it appears", id, req.pod_uid,
               absl::StrJoin(KubeletRoots(), ", "));
  // Arms the watches, and applies it at once should the cgroup have
  // appeared since we looked.
  OnCgroupTreeChange();
  auto it = held_.find(id);
  if (it == held_.end()) {
    // Applied in between: answer as the registration did.
    auto r = Get(id);
    if (r.status == 200) r.status = 201;
    return r;
  }
  if (!it->second.error.is_null()) return Response{it->second.error.value("status", 500), it->second.error["body"]};
  return Response{202, PendingJson(id)};
}

void Daemon::OnCgroupTreeChange() {
  if (!cgroup_watch_) return;
  const std::vector<std::string> roots = KubeletRoots();
  // Arm, then look; look again while a level appeared between the two
  // (its children's creations went to no watch).  Bounded by the tree's
  // depth: each round that finds nothing new is one where a level appeared.
  for (int round = 0;; ++round) {
    if (round > 2 * EGR_MAX_CGROUP_DEPTH) {
      spdlog::error("held pod registrations: the cgroup tree kept changing while being watched; waiting for the next event");
      return;
    }
    std::set<std::string> wanted;
    for (const auto& [id, h] : held_) {
      if (!h.error.is_null()) continue;
      for (const auto& root : roots) {
        for (auto& c : PodCgroupCandidates(root, h.request.pod_uid)) wanted.insert(std::move(c));
      }
    }
    if (absl::Status s = cgroup_watch_->Arm(wanted); !s.ok()) {
      spdlog::error("held pod registrations: {}", s.ToString());
    }
    bool changed = false;
    for (auto it = held_.begin(); it != held_.end();) {
      Held& h = it->second;
      if (!h.error.is_null()) {
        ++it;
        continue;
      }
      auto cg = FindPodCgroup(roots, h.request.pod_uid);
      if (absl::IsNotFound(cg.status())) {
        ++it;
        continue;
      }
      changed = true;
      Response r;
      if (cg.ok()) {
        SandboxRequest req = h.request;
        req.cgroup = *cg;
        r = Apply(it->first, req);
      } else {
        r = FromStatus(cg.status());
      }
      if (r.status < 300) {
        spdlog::info("sandbox {}: pod {}'s cgroup {} appeared: applied", it->first, h.request.pod_uid,
                     r.body.value("cgroup", ""));
        it = held_.erase(it);
        continue;
      }
      spdlog::error("sandbox {}: pod {}'s cgroup appeared but was not applied: {}", it->first, h.request.pod_uid,
                    r.body.dump());
      h.error = {{"status", r.status}, {"body", r.body}};
      ++it;
    }
    std::set<std::string> remaining;
    for (const auto& [id, h] : held_) {
      if (!h.error.is_null()) continue;
      for (const auto& root : roots) {
        for (auto& c : PodCgroupCandidates(root, h.request.pod_uid)) remaining.insert(std::move(c));
      }
    }
    if (!changed && CgroupWatch::DirsFor(remaining) == cgroup_watch_->watched()) return;
  }
}

nlohmann::json Daemon::PendingJson(const std::string& id) {
  const Held& h = held_.at(id);
  nlohmann::json j = {{"id", id},
                      {"pod_uid", h.request.pod_uid},
                      {"state", h.error.is_null() ? "pending" : "failed"},
                      {"in_kernel", false},
                      {"enforced", false}};
  if (h.error.is_null()) {
    j["waiting_on"] = cgroup_watch_ ? cgroup_watch_->watched() : std::set<std::string>{};
  } else {
    j["error"] = h.error["body"].value("error", nlohmann::json(nullptr));
  }
  control::Labels labels = h.request.labels;
  j["labels"] = labels;
  return j;
}

Response Daemon::Get(const std::string& id) {
  if (held_.count(id)) return Response{200, PendingJson(id)};
  auto r = Find(id);
  if (!r.ok()) return FromStatus(r.status());
  if (!*r) return ErrorResponse(404, "not_found", absl::StrCat("no sandbox ", id));
  return Response{200, SandboxJson(**r)};
}

Response Daemon::List() {
  auto all = records_->List();
  if (!all.ok()) return FromStatus(all.status());
  nlohmann::json list = nlohmann::json::array();
  for (const auto& r : *all) list.push_back(SandboxJson(r));
  for (const auto& [id, h] : held_) list.push_back(PendingJson(id));
  return Response{200, {{"sandboxes", list}}};
}

Response Daemon::Delete(const std::string& id) {
  if (auto h = held_.find(id); h != held_.end()) {
    // Cancelled: nothing was in the kernel; the watches move off.
    const std::string state = h->second.error.is_null() ? "pending" : "failed";
    held_.erase(h);
    OnCgroupTreeChange();
    return Response{200, {{"deleted", id}, {"state", state}}};
  }
  auto r = Find(id);
  if (!r.ok()) return FromStatus(r.status());
  if (!*r) return ErrorResponse(404, "not_found", absl::StrCat("no sandbox ", id));
  const control::SandboxRecord rec = **r;
  if (absl::Status s = control::Registry(options_.paths).Unregister(rec.cgroup_id); !s.ok()) return FromStatus(s);
  index_.erase(id);
  if (proxy_) proxy_->Stop(rec.cgroup_id);
  if (resolved_) {
    if (absl::Status s = resolved_->RemoveSandbox(rec.cgroup_id); !s.ok()) spdlog::warn("sandbox {}: {}", id, s.ToString());
  }
  audit_->Submit(audit::SandboxJson("removed", rec.cgroup_id, kVia, rec.cgroup_path, rec.labels), rec.cgroup_id);
  return Response{200, {{"deleted", id}, {"cgroup_id", rec.cgroup_id}}};
}

Response Daemon::Status() {
  nlohmann::json j;
  const bool loaded = IsLoaded(options_.paths);
  const absl::Status containment = RequireSocketContainment(options_.paths);
  j["enforcing"] = loaded;
  j["socket_containment"] = containment.ok();
  if (!containment.ok()) j["socket_containment_missing"] = std::string(containment.message());
  j["accepts_uncontained"] = options_.accept_uncontained;
  j["programs"] = adopted_ ? "adopted" : "loaded";
  j["pin_root"] = options_.paths.pin_root;
  nlohmann::json ups = nlohmann::json::array();
  for (const auto& u : deployment_.dns.upstreams) ups.push_back(dns::UpstreamServer{u.addr, u.port}.ToString());
  j["dns"] = {{"upstreams", ups}, {"served", proxy_ ? proxy_->size() : 0}};
  j["audit"] = {{"reader", audit_host_ && audit_host_->holding()}};
  auto all = records_->List();
  j["sandboxes"] = all.ok() ? all->size() : 0;
  j["held"] = held_.size();
  j["refused_callers"] = server_ ? server_->refused() : 0;
  return Response{200, std::move(j)};
}

Response Daemon::Ready() {
  nlohmann::json checks;
  std::vector<std::string> missing;
  const bool attached = IsLoaded(options_.paths);
  checks["programs_attached"] = attached;
  if (!attached) missing.push_back("not every cgroup link is pinned under " + options_.paths.pin_root);
  auto m = maps::PinnedMaps::Open(options_.paths.pin_root);
  checks["maps_open"] = m.ok();
  if (!m.ok()) missing.emplace_back(m.status().message());
  checks["dns_upstream"] = proxy_ != nullptr;
  if (!proxy_) missing.push_back("no dns.upstreams in the config: sandboxes' DNS fails closed");
  // Every record with an endpoint is served.
  size_t unserved = 0;
  if (auto all = records_->List(); all.ok()) {
    for (const auto& r : *all) {
      if (DnsEndpointOf(r) && (!proxy_ || !proxy_->Serves(r.cgroup_id))) ++unserved;
    }
  }
  checks["dns_endpoints_unserved"] = unserved;
  if (unserved > 0) missing.push_back(absl::StrCat(unserved, " sandbox DNS endpoint(s) not served"));
  const bool ready = missing.empty();
  nlohmann::json j = {{"ready", ready}, {"checks", checks}};
  if (!ready) j["missing"] = missing;
  return Response{ready ? 200 : 503, std::move(j)};
}

}  // namespace egressd::daemon
