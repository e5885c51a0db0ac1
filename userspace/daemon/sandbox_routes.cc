// The sandbox routes: PUT (prepare, check the node, apply), GET, list,
// DELETE.  A rejected PUT changes nothing.
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
#include "maps/if_sandbox_table.h"
#include "maps/lpm_keys.h"
#include "maps/sandbox_table.h"
#include "userspace/audit/lifecycle.h"
#include "userspace/common/cgroup_tree.h"
#include "userspace/common/errors.h"
#include "userspace/net/sandbox_interface.h"
#include "userspace/common/instance_lock.h"
#include "userspace/control/reconcile.h"
#include "userspace/control/registry.h"
#include "userspace/daemon/pod_cgroup.h"
#include "userspace/policy/compiled_policy_json.h"
#include "userspace/policy/yaml_walk.h"

namespace egressd::daemon {

namespace {

constexpr char kVia[] = "egressd api";


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

absl::StatusOr<std::optional<control::SandboxRecord>> Daemon::Find(const std::string& id) {
  auto it = index_.find(id);
  if (it != index_.end()) {
    EGR_ASSIGN_OR_RETURN(auto r, records_->Load(it->second));
    if (r && ApiIdOf(*r) == id) return r;
    index_.erase(it);  // removed behind our back (egressctl sandbox remove)
  }
  return std::nullopt;
}

nlohmann::json Daemon::SandboxJson(const control::SandboxRecord& r) {
  nlohmann::json j;
  auto id = ApiIdOf(r);
  j["id"] = id ? nlohmann::json(*id) : nlohmann::json(nullptr);
  j["cgroup"] = r.cgroup_path;
  j["cgroup_id"] = r.cgroup_id;
  // Judged at this interface (too); without a cgroup, the sandbox is its.
  if (!r.interface.empty()) j["interface"] = r.interface;
  j["interface_only"] = maps::IsInterfaceSandboxId(r.cgroup_id);
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
  MarkFailed(r.cgroup_id, j);
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

Response Daemon::Put(const std::string& id, const std::string& body) {
  auto req = ParseSandboxRequest(body);
  if (!req.ok()) return FromStatus(req.status());
  if (absl::Status s = ResolveRuntimeClass(*req, deployment_.runtime_classes); !s.ok()) return FromStatus(s);
  if (!req->pod_uid.empty()) {
    auto cg = FindPodCgroup(KubeletRoots(), req->pod_uid);
    if (absl::IsNotFound(cg.status())) {
      Response held = Hold(id, *req);
      if (held.status == 202) {
        if (absl::Status s = PersistHeld(id, body); !s.ok()) {
          spdlog::error("sandbox {}: held, but not on disk (a restart forgets it): {}", id, s.ToString());
        }
      }
      return held;
    }
    if (!cg.ok()) return FromStatus(cg.status());
    req->cgroup = *cg;
  }
  Response r = Apply(id, *req);
  // A PUT that named a cgroup, or found its pod's, replaces what was held.
  if (r.status < 300 && held_.erase(id) > 0) {
    ForgetHeld(id);
    OnCgroupTreeChange();
  }
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
  if (p.bad.empty()) p.refusal = CapsRefusal(req, *p.policy);
  return p;
}

std::optional<Response> Daemon::CheckNode(const std::string& id, const SandboxRequest& req, const Prepared& p) {
  if (p.dns_served && !proxy_ && (!p.policy->names.empty() || !p.policy->wildcard_suffixes.empty())) {
    return FromStatus(absl::UnavailableError(
        "the policy names hosts but this daemon has no dns.upstreams in its config: no name could be resolved "
        "for the sandbox; nothing was changed"));
  }
  // The packet-socket rule is a cgroup's (lib/lsm_socket.h): a sandbox
  // registered by interface alone has no cgroup and needs no bpf LSM, since
  // every frame its pod sends is judged at its veth.
  if (req.interface_only()) return std::nullopt;
  // The cgroup links the policy is judged by, read from the kernel now: one
  // detached or unpinned while we run (bpftool, another tool) judges
  // nothing, and a 201 would report containment that does not exist.  The
  // probe's kernel items (program and map types, helpers, the bpf LSM)
  // cannot go while we run: the start's load or adoption checked them
  // (docs/api.md, Errors).  503: a restart re-attaches (link_status.cc).
  std::vector<std::string> links_missing;
  LinksJson(&links_missing);
  if (!links_missing.empty()) {
    return ErrorResponse(503, "node_not_enforcing",
                         absl::StrCat("refused, nothing was changed: this node is not enforcing: ",
                                      absl::StrJoin(links_missing, "; ")));
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
  // Registered by interface alone: its id is its interface's (no cgroup),
  // set once the interface is found.
  absl::StatusOr<uint64_t> cgid = uint64_t{0};
  if (!req.interface_only()) {
    cgid = CgroupIdOf(req.cgroup);
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
  }
  if (!req.interface.empty() || !req.interface_netns.empty()) {
    auto hi = req.interface.empty() ? net::HostInterfaceOfNetns(req.interface_netns, "field interface_netns")
                                    : net::ResolveHostInterface(req.interface, "field interface");
    if (hi.ok()) {
      spec.interface = hi->name;
      spec.ifindex = hi->ifindex;
      spec.pod_addrs = hi->pod_addrs;
      spec.pod_mac = hi->pod_mac;
    } else if (absl::IsInvalidArgument(hi.status())) {
      bad.emplace_back(hi.status().message());
    } else {
      return FromStatus(hi.status());
    }
  }
  if (!bad.empty()) return FromStatus(absl::InvalidArgumentError(absl::StrJoin(bad, "\n")));
  if (req.interface_only()) cgid = maps::InterfaceSandboxId(spec.ifindex);
  spec.cgroup_id = *cgid;
  // One id, one cgroup (or interface).
  auto existing = Find(id);
  if (!existing.ok()) return FromStatus(existing.status());
  if (*existing && (*existing)->cgroup_id != *cgid) {
    const control::SandboxRecord& e = **existing;
    return FromStatus(absl::AlreadyExistsError(absl::StrCat(
        "sandbox ", id, " is registered for ",
        e.cgroup_path.empty() ? absl::StrCat("interface ", e.interface) : absl::StrCat("cgroup ", e.cgroup_path),
        ": DELETE it first")));
  }
  auto current = records_->Load(*cgid);
  if (!current.ok()) return FromStatus(current.status());
  if (*current && ApiIdOf(**current) != id) {
    auto other = ApiIdOf(**current);
    return FromStatus(absl::AlreadyExistsError(absl::StrCat(
        req.interface_only() ? absl::StrCat("interface ", spec.interface) : absl::StrCat("cgroup ", req.cgroup),
        " is registered ",
        other ? absl::StrCat("as sandbox ", *other) : std::string("without an API id (egressctl sandbox add)"),
        ": remove that registration first")));
  }
  if (auto refused = CheckNode(id, req, p)) return *refused;
  const policy::CompiledPolicy& policy = *p.policy;
  // The declaration first (a reload recompiles it), put back should the
  // registration fail.
  auto previous_declaration = SaveDeclaration(*cgid, id, req);
  if (!previous_declaration.ok()) return FromStatus(previous_declaration.status());
  if (absl::Status s = IndexedRegistry().Register(spec, policy); !s.ok()) {
    RestoreDeclaration(*cgid, *previous_declaration);
    return FromStatus(s);
  }
  failed_.erase(*cgid);
  const bool created = !current->has_value();
  index_[id] = *cgid;
  if (created) audit_->Submit(audit::SandboxJson("registered", *cgid, kVia, req.cgroup, spec.labels,
                                                     spec.interface), *cgid);
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

Response Daemon::Get(const std::string& id) {
  if (held_.count(id)) return Response{200, PendingJson(id)};
  auto r = Find(id);
  if (!r.ok()) return FromStatus(r.status());
  if (!*r) return ErrorResponse(404, "not_found", absl::StrCat("no sandbox ", id));
  return Response{200, SandboxDetail(**r)};
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
    ForgetHeld(id);
    OnCgroupTreeChange();
    return Response{200, {{"deleted", id}, {"state", state}}};
  }
  auto r = Find(id);
  if (!r.ok()) return FromStatus(r.status());
  if (!*r) return ErrorResponse(404, "not_found", absl::StrCat("no sandbox ", id));
  const control::SandboxRecord rec = **r;
  if (absl::Status s = IndexedRegistry().Unregister(rec.cgroup_id); !s.ok()) return FromStatus(s);
  index_.erase(id);
  ForgetDeclaration(rec.cgroup_id);
  if (proxy_) proxy_->Stop(rec.cgroup_id);
  TrimAfterStop();
  if (resolved_) {
    if (absl::Status s = resolved_->RemoveSandbox(rec.cgroup_id); !s.ok()) spdlog::warn("sandbox {}: {}", id, s.ToString());
  }
  audit_->Submit(audit::SandboxJson("removed", rec.cgroup_id, kVia, rec.cgroup_path, rec.labels,
                                    rec.interface), rec.cgroup_id);
  return Response{200, {{"deleted", id}, {"cgroup_id", rec.cgroup_id}}};
}

}  // namespace egressd::daemon
