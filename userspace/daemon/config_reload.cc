// Config reload (config_reload.h): the pure parts, then the daemon's pass
// over its sandboxes and the contained roots the config names.
#include "userspace/daemon/config_reload.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include <spdlog/spdlog.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "maps/egressd_abi.h"
#include "maps/lpm_keys.h"
#include "maps/sandbox_table.h"
#include "userspace/audit/lifecycle.h"
#include "userspace/common/atomic_file.h"
#include "userspace/common/errors.h"
#include "userspace/common/unique_fd.h"
#include "userspace/control/registry.h"
#include "userspace/control/sandbox_caps.h"
#include "userspace/daemon/daemon.h"
#include "userspace/policy/yaml_walk.h"

namespace egressd::daemon {

namespace {

std::string CidrText(const net::Cidr& c) { return c.ToString(); }

absl::StatusOr<std::optional<std::string>> ReadIfThere(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return std::optional<std::string>();
    return ErrnoStatus(errno, absl::StrCat("open ", path));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return std::optional<std::string>(ss.str());
}

}  // namespace

Restricted RestrictToFloor(const std::optional<policy::CompiledPolicy>& last, const policy::DeploymentConfig& floor) {
  Restricted out;
  policy::CompiledPolicy& p = out.policy;
  if (!last) {
    p.default_verdict = policy::Verdict::kDeny;
    p.deny_action = floor.deny_action;
    p.protected_cidrs = floor.protected_cidrs;
    out.conflicts.push_back("its last policy's contents are not known (no record holds them): denied everything");
    return out;
  }
  p = *last;
  p.warnings.clear();
  for (const policy::ProtectedCidr& c : floor.protected_cidrs) {
    const bool known = std::any_of(p.protected_cidrs.begin(), p.protected_cidrs.end(),
                                   [&](const policy::ProtectedCidr& o) { return o.cidr == c.cidr; });
    if (!known) p.protected_cidrs.push_back(c);
  }
  std::vector<policy::AllowedCidr> kept;
  for (policy::AllowedCidr& a : p.allowed) {
    bool inside = false;
    for (const policy::ProtectedCidr& c : p.protected_cidrs) {
      if (!c.cidr.Overlaps(a.cidr)) continue;
      inside = inside || c.cidr.Contains(a.cidr);
      out.conflicts.push_back(absl::StrCat("allowed ", CidrText(a.cidr), " (", a.source, ") ",
                                           c.cidr.Contains(a.cidr) ? "lies inside" : "overlaps", " protected ",
                                           CidrText(c.cidr), " (", c.source, "): denied"));
    }
    if (!inside) kept.push_back(std::move(a));
  }
  p.allowed = std::move(kept);
  if (floor.airgapped && p.default_verdict == policy::Verdict::kAllow) {
    p.default_verdict = policy::Verdict::kDeny;
    out.conflicts.push_back("the deployment is airgapped: what its policy does not name is denied");
  }
  if (p.audit.audit_only && !floor.allow_audit_only) {
    p.audit.audit_only = false;
    out.conflicts.push_back("the deployment no longer allows audit-only sandboxes (audit.allowAuditOnly): enforced");
  }
  return out;
}

std::vector<std::string> KeepRunningDns(const policy::DnsSettings& running, policy::DnsSettings& next) {
  std::vector<std::string> keys;
  if (next.upstreams != running.upstreams) keys.push_back("dns.upstreams");
  if (next.min_ttl_s != running.min_ttl_s) keys.push_back("dns.minTtlSeconds");
  if (next.grace_s != running.grace_s) keys.push_back("dns.graceSeconds");
  if (next.max_addresses_per_sandbox != running.max_addresses_per_sandbox) keys.push_back("dns.maxAddressesPerSandbox");
  if (next.max_addresses_per_name != running.max_addresses_per_name) keys.push_back("dns.maxAddressesPerName");
  next.upstreams = running.upstreams;
  next.min_ttl_s = running.min_ttl_s;
  next.grace_s = running.grace_s;
  next.max_addresses_per_sandbox = running.max_addresses_per_sandbox;
  next.max_addresses_per_name = running.max_addresses_per_name;
  return keys;
}

std::string DeclarationText(const Declaration& d) {
  SandboxRequest r = d.request;
  r.cgroup.clear();
  nlohmann::json j = {{"id", d.id}, {"request", ToJson(r)}};
  return j.dump() + "\n";
}

absl::StatusOr<Declaration> ParseDeclaration(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("id") || !j["id"].is_string() || !j.contains("request") ||
      !j["request"].is_object()) {
    return absl::InvalidArgumentError("a declaration is {\"id\": STRING, \"request\": OBJECT}");
  }
  Declaration d;
  d.id = j["id"].get<std::string>();
  nlohmann::json body = j["request"];
  // The parser wants exactly one of cgroup and pod_uid; the record holds the
  // cgroup, so a stand-in is parsed and cleared.
  const std::string pod_uid = body.value("pod_uid", "");
  body.erase("pod_uid");
  body["cgroup"] = "/";
  EGR_ASSIGN_OR_RETURN(d.request, ParseSandboxRequest(body.dump()));
  d.request.cgroup.clear();
  d.request.pod_uid = pod_uid;
  return d;
}

absl::Status DeclarationStore::Init() const { return MakeDirs(dir_, 0700); }

std::string DeclarationStore::PathOf(uint64_t cgroup_id) const { return absl::StrCat(dir_, "/", cgroup_id, ".json"); }

absl::StatusOr<std::optional<Declaration>> DeclarationStore::Load(uint64_t cgroup_id) const {
  const std::string path = PathOf(cgroup_id);
  EGR_ASSIGN_OR_RETURN(auto text, ReadIfThere(path));
  if (!text) return std::optional<Declaration>();
  auto d = ParseDeclaration(*text);
  if (!d.ok()) return absl::DataLossError(absl::StrCat(path, ": ", d.status().message()));
  return std::optional<Declaration>(std::move(*d));
}

absl::Status DeclarationStore::Save(uint64_t cgroup_id, const Declaration& d) const {
  return WriteFileAtomically(PathOf(cgroup_id), DeclarationText(d));
}

absl::Status DeclarationStore::Remove(uint64_t cgroup_id) const {
  const std::string path = PathOf(cgroup_id);
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("unlink ", path));
  return absl::OkStatus();
}

std::string ConfigRootsText(const std::vector<ConfigRoot>& roots) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& r : roots) list.push_back({{"path", r.path}, {"cgroup_id", r.cgroup_id}});
  return nlohmann::json{{"roots", list}}.dump() + "\n";
}

absl::StatusOr<std::vector<ConfigRoot>> ParseConfigRoots(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("roots") || !j["roots"].is_array()) {
    return absl::InvalidArgumentError("contained roots: expected {\"roots\": [{\"path\", \"cgroup_id\"}...]}");
  }
  std::vector<ConfigRoot> out;
  for (const auto& r : j["roots"]) {
    if (!r.is_object() || !r.contains("path") || !r["path"].is_string() || !r.contains("cgroup_id") ||
        !r["cgroup_id"].is_number_unsigned()) {
      return absl::InvalidArgumentError(absl::StrCat("contained roots: a bad entry ", r.dump()));
    }
    out.push_back({r["path"].get<std::string>(), r["cgroup_id"].get<uint64_t>()});
  }
  return out;
}

bool ContainsCgroup(const std::string& root, const std::string& own) {
  return own == root || absl::StartsWith(own, root + "/");
}

// ---- the daemon's side ----

namespace {

constexpr char kVia[] = "egressd reload";

std::string OwnCgroupPath() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  }
  auto mount = FindCgroup2Mount();
  return mount.ok() ? *mount + path : path;
}

// InvalidArgument with one line per cap of `limits` that `p` is past.
absl::Status OverCaps(const policy::CompiledPolicy& p, const policy::SandboxLimits& limits) {
  EGR_ASSIGN_OR_RETURN(control::CapUse use, control::CountCapUse(p));
  std::vector<std::string> lines;
  for (const auto& c : control::ExceededCaps(use, limits)) lines.push_back(c.message);
  if (lines.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

}  // namespace

absl::StatusOr<std::optional<Declaration>> Daemon::SaveDeclaration(uint64_t cgroup_id, const std::string& id,
                                                                   const SandboxRequest& req) {
  EGR_ASSIGN_OR_RETURN(auto previous, declarations_->Load(cgroup_id));
  EGR_RETURN_IF_ERROR(declarations_->Save(cgroup_id, Declaration{id, req}));
  return previous;
}

void Daemon::RestoreDeclaration(uint64_t cgroup_id, const std::optional<Declaration>& previous) {
  absl::Status s = previous ? declarations_->Save(cgroup_id, *previous) : declarations_->Remove(cgroup_id);
  if (!s.ok()) spdlog::error("cgroup {}: restoring its declaration: {}", cgroup_id, s.ToString());
}

void Daemon::ForgetDeclaration(uint64_t cgroup_id) {
  failed_.erase(cgroup_id);
  if (absl::Status s = declarations_->Remove(cgroup_id); !s.ok()) {
    spdlog::warn("cgroup {}: {}", cgroup_id, s.ToString());
  }
}

void Daemon::MarkFailed(uint64_t cgroup_id, nlohmann::json& j) {
  auto it = failed_.find(cgroup_id);
  if (it == failed_.end()) return;
  j["state"] = "failed";
  j["enforced"] = false;
  j["error"] = it->second;
}

absl::Status Daemon::StartConfig() {
  declarations_ = std::make_unique<DeclarationStore>(options_.paths.runtime_dir + "/declarations");
  EGR_RETURN_IF_ERROR(declarations_->Init());
  // The config as it is now: what changed while no daemon ran takes effect
  // before the API answers.
  Response r = ApplyConfig(deployment_, config_, "start");
  if (r.status >= 300) return absl::InternalError(absl::StrCat("applying the config at start: ", r.body.dump()));
  size_t failed = 0;
  for (const auto& s : r.body["sandboxes"]) failed += s.value("outcome", "") == "failed";
  if (failed > 0) spdlog::error("{} sandbox(es) failed under the config: GET /v1/sandboxes says why", failed);
  return absl::OkStatus();
}

Response Daemon::Reload(const std::string& via) {
  std::optional<policy::InputText> text;
  policy::DeploymentConfig next = policy::DefaultDeployment();
  absl::Status bad;
  if (!options_.config_path.empty()) {
    auto t = policy::yaml::ReadInputFile(options_.config_path);
    if (!t.ok()) {
      bad = absl::InvalidArgumentError(absl::StrCat("--config ", t.status().message()));
    } else if (auto d = policy::ParseDeploymentConfig(*t, options_.config_path, nullptr); !d.ok()) {
      bad = d.status();
    } else {
      next = std::move(*d);
      text = policy::InputText::Inline(options_.config_path, *t);
    }
  }
  if (!bad.ok()) {
    spdlog::error("config reload ({}) refused, nothing was changed: {}", via, std::string(bad.message()));
    audit_->Submit(audit::EngineJson("config-rejected", {{"via", via},
                                                         {"config", options_.config_path},
                                                         {"errors", std::string(bad.message())}}),
                   0);
    Response r = FromStatus(absl::InvalidArgumentError(
        absl::StrCat("config reload refused, nothing was changed:\n", bad.message())));
    return r;
  }
  return ApplyConfig(std::move(next), std::move(text), via);
}

Response Daemon::ApplyConfig(policy::DeploymentConfig next, std::optional<policy::InputText> text,
                             const std::string& via) {
  const std::vector<std::string> restart = KeepRunningDns(deployment_.dns, next.dns);
  auto all = records_->List();
  if (!all.ok()) return FromStatus(all.status());

  // 1. Every sandbox compiled under the new config before anything is
  // written: a failure of the node here changes nothing.
  struct Item {
    const control::SandboxRecord* record;
    std::optional<std::string> id;
    policy::CompiledPolicy policy;
    std::string outcome;  // unchanged, recompiled, narrowed, failed
    nlohmann::json error;
  };
  std::vector<Item> items;
  for (const control::SandboxRecord& r : *all) {
    Item it{&r, ApiIdOf(r), {}, "", nullptr};
    auto decl = declarations_->Load(r.cgroup_id);
    if (!decl.ok()) spdlog::warn("{}", decl.status().ToString());
    absl::Status compiled = absl::OkStatus();
    if (decl.ok() && *decl) {
      SandboxRequest req = (*decl)->request;
      req.cgroup = r.cgroup_path;
      auto p = policy::CompileInputs(ToPolicyInputs(req, text, r.dns.has_value()));
      if (p.ok()) compiled = maps::CheckFitsMaps(*p);
      if (!p.ok()) compiled = p.status();
      // The caps are compile rules too: a lowered one fails the sandboxes
      // past it as a new protected range would.
      if (compiled.ok()) compiled = OverCaps(*p, next.limits);
      if (compiled.ok()) {
        it.policy = std::move(*p);
        it.outcome = "recompiled";
      } else if (!absl::IsInvalidArgument(compiled)) {
        return FromStatus(compiled);
      }
    }
    Restricted restricted = RestrictToFloor(r.current.policy, next);
    if (!compiled.ok()) {
      it.policy = std::move(restricted.policy);
      it.outcome = "failed";
      it.error = FromStatus(compiled).body["error"];
      it.error["message"] = absl::StrCat("its declaration no longer compiles under the config; it keeps only what ",
                                         "the new floor allows of its last policy: ", it.error.value("message", ""));
    } else if (it.outcome.empty()) {
      // No declaration the daemon holds (egressctl sandbox add, run, or a
      // reconcile): its policy is narrowed to the floor, never widened.
      it.policy = std::move(restricted.policy);
      it.outcome = "narrowed";
      if (absl::Status caps = OverCaps(it.policy, next.limits); !caps.ok()) {
        if (!absl::IsInvalidArgument(caps)) return FromStatus(caps);
        restricted.conflicts.emplace_back(caps.message());
      }
      if (!restricted.conflicts.empty()) {
        it.outcome = "failed";
        it.error = FromStatus(absl::InvalidArgumentError(absl::StrCat(
                                  "registered without a declaration this daemon holds, and its policy conflicts "
                                  "with the config's floor; it keeps only what the floor allows:\n",
                                  absl::StrJoin(restricted.conflicts, "\n"))))
                       .body["error"];
      }
    }
    // A sandbox that was failed and compiles again is reported recompiled
    // (it recovered), even where its kernel policy was already the same.
    if (r.current.policy && control::SameContents(*r.current.policy, it.policy) && it.outcome != "failed" &&
        failed_.count(r.cgroup_id) == 0) {
      it.outcome = "unchanged";
    }
    items.push_back(std::move(it));
  }

  // 2. The new config governs what comes next (PUTs, held PUTs applying).
  deployment_ = std::move(next);
  config_ = std::move(text);

  // 3. Close before open: the new contained roots, then the sandboxes that
  // failed (narrowed), then the others, then the released roots.
  bool node_failed = false;
  nlohmann::json roots = ContainConfigRoots(via, node_failed);
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return (a.outcome == "failed") > (b.outcome == "failed"); });
  nlohmann::json outcomes = nlohmann::json::array();
  for (Item& it : items) {
    const control::SandboxRecord& r = *it.record;
    if (it.outcome != "unchanged") {
      control::SandboxSpec spec;
      spec.cgroup_id = r.cgroup_id;
      spec.cgroup_path = r.cgroup_path;
      spec.labels = r.labels;
      spec.netns_cookie = r.netns_cookie;
      spec.netns_inode = r.netns_inode;
      spec.keep_interface = true;  // its veth (and pod entries) as registered
      if (r.dns) {
        spec.dns_addr4 = r.dns->addr4;
        spec.dns_addr6 = r.dns->addr6;
      }
      if (absl::Status s = IndexedRegistry().Register(spec, it.policy); !s.ok()) {
        node_failed = true;
        it.outcome = "error";
        it.error = FromStatus(s).body["error"];
        spdlog::error("reload: sandbox {}: {}", r.cgroup_id, s.ToString());
      } else {
        audit_->Submit(audit::PolicyAppliedJson(r.cgroup_id, kVia, it.policy), r.cgroup_id);
        if (proxy_) {
          if (auto rec = records_->Load(r.cgroup_id); rec.ok() && *rec) {
            if (auto ep = DnsEndpointOf(**rec)) {
              if (absl::Status d = proxy_->Serve(DnsScopeOf(**rec), *ep); !d.ok()) spdlog::error("reload: {}", d.ToString());
            }
          }
        }
      }
    }
    if (it.outcome == "failed") {
      failed_[r.cgroup_id] = it.error;
      audit_->Submit(audit::PolicyRejectedJson(r.cgroup_id, kVia, r.cgroup_path, it.error.value("message", "")),
                     r.cgroup_id);
      spdlog::error("reload: sandbox {} ({}) failed: {}", it.id.value_or("-"), r.cgroup_path, it.error.dump());
    } else if (it.outcome != "error") {
      failed_.erase(r.cgroup_id);
    }
    nlohmann::json o = {{"id", it.id ? nlohmann::json(*it.id) : nlohmann::json(nullptr)},
                        {"cgroup", r.cgroup_path},
                        {"cgroup_id", r.cgroup_id},
                        {"outcome", it.outcome}};
    if (!it.error.is_null()) o["error"] = it.error;
    outcomes.push_back(std::move(o));
  }
  RecheckHeld(outcomes);
  ReleaseConfigRoots(via, roots, node_failed);
  size_t failed = 0, changed = 0;
  for (const auto& o : outcomes) {
    failed += o["outcome"] == "failed";
    changed += o["outcome"] == "recompiled" || o["outcome"] == "narrowed" || o["outcome"] == "failed";
  }
  nlohmann::json body = {{"config", options_.config_path.empty() ? nlohmann::json(nullptr)
                                                                 : nlohmann::json(options_.config_path)},
                         {"applied", true},
                         {"via", via},
                         {"sandboxes", outcomes},
                         {"contained_roots", roots},
                         {"restart_required", restart}};
  audit_->Submit(audit::EngineJson("config-applied", {{"via", via},
                                                      {"config", body["config"]},
                                                      {"sandboxes", outcomes.size()},
                                                      {"changed", changed},
                                                      {"failed", failed},
                                                      {"restart_required", restart}}),
                 0);
  if (!restart.empty()) {
    spdlog::warn("config ({}): {} changed; they take effect at the next start (the running values stay)", via,
                 absl::StrJoin(restart, ", "));
  }
  spdlog::info("config applied ({}): {} sandbox(es), {} changed, {} failed", via, outcomes.size(), changed, failed);
  if (node_failed) {
    return Response{500, {{"error", {{"code", "node_failure"},
                                     {"message", "the config was applied in part: a kernel or system failure "
                                                 "(see each sandbox's and root's error)"}}},
                          {"result", body}}};
  }
  return Response{200, std::move(body)};
}

void Daemon::RecheckHeld(nlohmann::json& outcomes) {
  // A held PUT is one that will apply: judged again under the new config
  // (deployment_ and config_ are the new ones now), exactly as a PUT now
  // would be.  One that no longer passes is marked failed with the reasons
  // (never applied when its cgroup appears; DELETE or PUT it again) and
  // leaves the disk, so a restart does not hold it again.
  for (auto& [id, h] : held_) {
    nlohmann::json o = {{"id", id}, {"pod_uid", h.request.pod_uid}, {"outcome", "pending"}};
    if (h.error.is_null()) {
      Prepared p = Prepare(id, h.request);
      std::optional<Response> refusal = std::move(p.refusal);
      if (!refusal && !p.bad.empty()) refusal = FromStatus(absl::InvalidArgumentError(absl::StrJoin(p.bad, "\n")));
      if (refusal) {
        refusal->body["error"]["message"] =
            absl::StrCat("held, and no longer accepted under the reloaded config: ",
                         refusal->body["error"].value("message", ""));
        h.error = {{"status", refusal->status}, {"body", refusal->body}};
        ForgetHeld(id);
        o["outcome"] = "failed";
        o["error"] = refusal->body["error"];
        spdlog::error("reload: held sandbox {} (pod {}) failed: {}", id, h.request.pod_uid, o["error"].dump());
      }
    } else {
      o["outcome"] = "failed";
      o["error"] = h.error["body"].value("error", nlohmann::json(nullptr));
    }
    outcomes.push_back(std::move(o));
  }
  OnCgroupTreeChange();  // the failed ones no longer need watching
}

nlohmann::json Daemon::ContainConfigRoots(const std::string& via, bool& node_failed) {
  nlohmann::json state = {{"named", deployment_.contained_roots},
                          {"contained", nlohmann::json::array()},
                          {"added", nlohmann::json::array()},
                          {"released", nlohmann::json::array()},
                          {"missing", nlohmann::json::array()},
                          {"refused", nlohmann::json::array()}};
  const std::string own = OwnCgroupPath();
  auto mount = FindCgroup2Mount();
  maps::SandboxTable table(*maps_);
  for (const std::string& path : deployment_.contained_roots) {
    auto refuse = [&](const std::string& why) {
      state["refused"].push_back({{"path", path}, {"why", why}});
      spdlog::error("containedRoots {}: not contained: {}", path, why);
    };
    if (!mount.ok() || !absl::StartsWith(path, *mount + "/")) {
      refuse("not below the cgroup2 mount");
      continue;
    }
    if (ContainsCgroup(path, own)) {
      refuse(absl::StrCat("egressd itself runs in ", own, ": its DNS upstream queries would get no egress"));
      continue;
    }
    auto id = CgroupIdOf(path);
    if (!id.ok()) {
      if (absl::IsNotFound(id.status())) {
        state["missing"].push_back(path);
        spdlog::warn("containedRoots {}: no such cgroup (yet): not contained; /readyz says so until a reload "
                     "finds it", path);
      } else {
        refuse(std::string(id.status().message()));
      }
      continue;
    }
    auto rec = records_->Load(*id);
    auto entry = table.Get(*id);
    if (!rec.ok() || !entry.ok()) {
      node_failed = true;
      refuse(std::string((!rec.ok() ? rec.status() : entry.status()).message()));
      continue;
    }
    if (*rec || (entry->has_value() && (*entry)->kind == EGR_CG_SANDBOX)) {
      refuse("it is registered as a sandbox: DELETE it first (a contained root would replace its policy)");
      continue;
    }
    if (!entry->has_value() || (*entry)->kind != EGR_CG_CONTAINED_ROOT) {
      if (absl::Status s = IndexedRegistry().Contain(*id); !s.ok()) {
        node_failed = true;
        refuse(s.ToString());
        continue;
      }
      audit_->Submit(audit::SandboxJson("contained", *id, kVia, path, {{"egressd/via", via}}), *id);
      state["added"].push_back(path);
    }
    state["contained"].push_back({{"path", path}, {"cgroup_id", *id}});
  }
  return state;
}

void Daemon::ReleaseConfigRoots(const std::string& via, nlohmann::json& state, bool& node_failed) {
  const std::string file = options_.paths.runtime_dir + "/contained_roots.json";
  std::vector<ConfigRoot> previous;
  if (auto text = ReadIfThere(file); text.ok() && *text) {
    auto p = ParseConfigRoots(**text);
    if (p.ok()) previous = std::move(*p);
    else spdlog::error("{}: {} (no root is released)", file, p.status().ToString());
  }
  std::vector<ConfigRoot> now;
  for (const auto& c : state["contained"]) now.push_back({c["path"].get<std::string>(), c["cgroup_id"].get<uint64_t>()});
  // A root the config still names but that is missing or refused now stays
  // in force where it was (never opened by a reload that cannot see it).
  std::set<std::string> named(deployment_.contained_roots.begin(), deployment_.contained_roots.end());
  maps::SandboxTable table(*maps_);
  for (const ConfigRoot& old : previous) {
    const bool still = std::find(now.begin(), now.end(), old) != now.end();
    if (still) continue;
    if (named.count(old.path) &&
        std::none_of(now.begin(), now.end(), [&](const ConfigRoot& c) { return c.path == old.path; })) {
      now.push_back(old);
      continue;
    }
    auto entry = table.Get(old.cgroup_id);
    if (entry.ok() && entry->has_value() && (*entry)->kind == EGR_CG_CONTAINED_ROOT) {
      if (absl::Status s = IndexedRegistry().Unregister(old.cgroup_id); !s.ok()) {
        node_failed = true;
        now.push_back(old);  // still in force: try again next time
        spdlog::error("containedRoots: releasing {}: {}", old.path, s.ToString());
        continue;
      }
      audit_->Submit(audit::SandboxJson("released", old.cgroup_id, kVia, old.path, {{"egressd/via", via}}),
                     old.cgroup_id);
      state["released"].push_back(old.path);
    }
  }
  if (absl::Status s = WriteFileAtomically(file, ConfigRootsText(now)); !s.ok()) {
    node_failed = true;
    spdlog::error("containedRoots: {}", s.ToString());
  }
  roots_state_ = state;
}

nlohmann::json Daemon::ContainedRootsJson() { return roots_state_; }

void Daemon::ReadyContainedRoots(nlohmann::json& checks, std::vector<std::string>& missing) {
  size_t n = 0;
  if (roots_state_.is_object()) n = roots_state_["missing"].size() + roots_state_["refused"].size();
  checks["contained_roots_not_in_force"] = n;
  if (n > 0) {
    missing.push_back(absl::StrCat(n, " of the config's containedRoots not in force (GET /v1/status: "
                                      "contained_roots): a pod below one is not denied before its registration"));
  }
}

}  // namespace egressd::daemon
