#include "userspace/control/registry.h"

#include "loader/tc_attach.h"
#include "maps/flow_table.h"
#include "maps/if_sandbox_table.h"
#include <algorithm>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "maps/dns_endpoints.h"
#include "maps/pinned_maps.h"
#include "maps/resolved_table.h"
#include "userspace/control/dns_port_ledger.h"
#include "userspace/dns/scope.h"
#include "userspace/common/errors.h"
#include "userspace/common/fault.h"
#include "userspace/common/instance_lock.h"

namespace egressd::control {
namespace {

struct Env {
  maps::PolicyStore& store;
  maps::SandboxTable& table;
  const SandboxRecords& records;
  maps::DnsEndpoints& dns;
  maps::ResolvedTable& resolved;
  // Without an index: the stored DNS port ledger while it is current (or
  // once rebuilt), kept up to date by a call that succeeds; nullopt when
  // stale and not needed by this call.
  std::optional<DnsPortLedger>& ledger;
};

// The endpoint sandbox `cg` is given: its addresses from the spec, and the
// port it had (registered again) or the lowest one no other record holds:
// from the caller's index, else from the DNS port ledger (rebuilt from every
// record only when stale), so a one-shot register reads no other record.
absl::StatusOr<std::optional<maps::DnsEndpoint>> EndpointFor(const SandboxSpec& spec, const SandboxRecords& records,
                                                             const std::optional<SandboxRecord>& old,
                                                             const RegistryIndex* index,
                                                             std::optional<DnsPortLedger>& ledger) {
  if (!spec.dns_addr4 && !spec.dns_addr6) return std::optional<maps::DnsEndpoint>();
  maps::DnsEndpoint ep{.addr4 = spec.dns_addr4, .addr6 = spec.dns_addr6};
  EGR_RETURN_IF_ERROR(CheckDnsEndpoint(maps::DnsEndpoint{ep.addr4, ep.addr6, kDnsPortFirst}));
  if (old && old->dns) {
    ep.port = old->dns->port;
    return std::optional(ep);
  }
  if (index) {
    if (auto port = index->LowestFreePort()) {
      ep.port = *port;
      return std::optional(ep);
    }
    return absl::ResourceExhaustedError(absl::StrCat("every DNS endpoint port (", kDnsPortFirst, "-", kDnsPortLast,
                                                     ") of this node is taken"));
  }
  if (!ledger) {
    EGR_ASSIGN_OR_RETURN(DnsPortLedger built, DnsPortLedger::Rebuild(records));
    ledger = std::move(built);
  }
  if (auto port = ledger->LowestFree()) {
    ep.port = *port;
    return std::optional(ep);
  }
  return absl::ResourceExhaustedError(absl::StrCat("every DNS endpoint port (", kDnsPortFirst, "-", kDnsPortLast,
                                                   ") of this node is taken"));
}

// The contents of the policy installed under `id`, as the record knows them
// (its current policy, or the one a flip was replacing).
const policy::CompiledPolicy* KnownPolicy(const std::optional<SandboxRecord>& r, maps::PolicyId id) {
  if (!r) return nullptr;
  if (r->current.policy_id == id && r->current.policy) return &*r->current.policy;
  if (r->previous && r->previous->policy_id == id && r->previous->policy) return &*r->previous->policy;
  return nullptr;
}

absl::Status ReleaseKnown(maps::PolicyStore& store, maps::PolicyId id, const policy::CompiledPolicy* p) {
  return p ? store.Release(id, *p) : store.Release(id);
}

// The sandbox's own record.  One that does not parse is treated as absent
// (and replaced or removed by the caller): the old policy is then released by
// walking the tries.
absl::StatusOr<std::optional<SandboxRecord>> OwnRecord(const SandboxRecords& records, uint64_t cgroup_id) {
  auto r = records.Load(cgroup_id);
  if (r.ok() || !absl::IsDataLoss(r.status())) return r;
  spdlog::warn("{}: replacing it", std::string(r.status().message()));
  return std::optional<SandboxRecord>();
}

// Puts the record back as it was before a failed register.
void RestoreRecord(const SandboxRecords& records, uint64_t cgroup_id, const std::optional<SandboxRecord>& old) {
  absl::Status s = old ? records.Write(*old) : records.Remove(cgroup_id);
  if (!s.ok()) spdlog::error("restoring the record of cgroup {}: {} (the next load repairs it)", cgroup_id, s.ToString());
}

}  // namespace

RegistryIndex::RegistryIndex() {
  for (uint32_t p = kDnsPortFirst; p <= kDnsPortLast; ++p) free_ports_.insert(static_cast<uint16_t>(p));
}

absl::Status RegistryIndex::Sync(const SandboxRecords& records) {
  EGR_ASSIGN_OR_RETURN(uint64_t now, RecordsGeneration(records));
  if (generation_ && *generation_ == now) return absl::OkStatus();
  std::vector<uint64_t> corrupt;  // holds no port and knows no policy
  EGR_ASSIGN_OR_RETURN(auto all, records.List(&corrupt));
  *this = RegistryIndex();
  for (const auto& r : all) Put(r);
  generation_ = now;
  spdlog::debug("registry index rebuilt from {} records (generation {})", all.size(), now);
  return absl::OkStatus();
}

void RegistryIndex::Put(const SandboxRecord& r) {
  Erase(r.cgroup_id);
  Entry e;
  if (r.dns && r.dns->port >= kDnsPortFirst && r.dns->port <= kDnsPortLast) {
    e.port = r.dns->port;
    free_ports_.erase(*e.port);
    ++port_claims_[*e.port];
  }
  auto know = [&](const PolicyRef& ref) {
    if (!ref.policy || ref.policy_id == 0) return;
    const uint64_t hash = ref.policy->ContentHash();
    e.known.emplace_back(ref.policy_id, hash);
    by_hash_[hash][ref.policy_id].insert(r.cgroup_id);
  };
  know(r.current);
  if (r.previous) know(*r.previous);
  entries_[r.cgroup_id] = std::move(e);
}

void RegistryIndex::Erase(uint64_t cgroup_id) {
  auto it = entries_.find(cgroup_id);
  if (it == entries_.end()) return;
  // A port another record also claims (records edited by hand) stays taken.
  if (it->second.port) {
    auto c = port_claims_.find(*it->second.port);
    if (c != port_claims_.end() && --c->second == 0) {
      port_claims_.erase(c);
      free_ports_.insert(*it->second.port);
    }
  }
  for (const auto& [id, hash] : it->second.known) {
    auto h = by_hash_.find(hash);
    if (h == by_hash_.end()) continue;
    auto k = h->second.find(id);
    if (k != h->second.end()) {
      k->second.erase(cgroup_id);
      if (k->second.empty()) h->second.erase(k);
    }
    if (h->second.empty()) by_hash_.erase(h);
  }
  entries_.erase(it);
}

void RegistryIndex::Seen(const SandboxRecords& records) {
  auto g = RecordsGeneration(records);
  if (g.ok()) {
    generation_ = *g;
  } else {
    generation_.reset();
  }
}

std::optional<uint16_t> RegistryIndex::LowestFreePort() const {
  if (free_ports_.empty()) return std::nullopt;
  return *free_ports_.begin();
}

std::vector<std::pair<maps::PolicyId, std::vector<uint64_t>>> RegistryIndex::Knowers(uint64_t hash) const {
  std::vector<std::pair<maps::PolicyId, std::vector<uint64_t>>> out;
  auto h = by_hash_.find(hash);
  if (h == by_hash_.end()) return out;
  for (const auto& [id, cgs] : h->second) out.emplace_back(id, std::vector<uint64_t>(cgs.begin(), cgs.end()));
  return out;
}

absl::StatusOr<maps::PolicyId> FindEqualPolicy(const RegistryIndex& index, const maps::SandboxTable& table,
                                               const SandboxRecords& records, const policy::CompiledPolicy& p,
                                               uint64_t content_hash, uint64_t except) {
  for (const auto& [cand, knowers] : index.Knowers(content_hash)) {
    // The same rule as the walk below: a sandbox other than `except` is
    // judged by cand, and the first such record knowing cand decides.
    for (uint64_t cg : knowers) {
      if (cg == except) continue;
      EGR_ASSIGN_OR_RETURN(auto e, table.Get(cg));
      if (!e || e->kind != EGR_CG_SANDBOX || e->policy_id != cand) continue;
      auto r = records.Load(cg);
      const policy::CompiledPolicy* known = r.ok() ? KnownPolicy(*r, cand) : nullptr;
      if (!known) continue;
      if (SameContents(*known, p)) return cand;
      spdlog::warn("policy {:#x} has the hash of the new policy but other contents: not shared", cand);
      break;
    }
  }
  return maps::PolicyId{0};
}

absl::StatusOr<maps::PolicyId> FindEqualPolicy(const maps::PolicyStore& store, const maps::SandboxTable& table,
                                               const SandboxRecords& records, const policy::CompiledPolicy& p,
                                               uint64_t content_hash, uint64_t except) {
  EGR_ASSIGN_OR_RETURN(auto candidates, store.CandidatesFor(content_hash));
  if (candidates.empty()) return maps::PolicyId{0};
  EGR_ASSIGN_OR_RETURN(auto entries, table.List());
  for (maps::PolicyId cand : candidates) {
    // A policy id's contents never change after Install, and an id is shared
    // only between equal contents, so every record that knows cand's contents
    // knows the same ones: the first such record decides, and an add parses
    // one record however many sandboxes share the policy.
    for (const auto& e : entries) {
      if (e.cgroup_id == except || e.value.kind != EGR_CG_SANDBOX || e.value.policy_id != cand) continue;
      auto r = records.Load(e.cgroup_id);
      // A record that does not parse, or does not name cand (a crashed flip
      // names it as previous), is no evidence either way.
      const policy::CompiledPolicy* known = r.ok() ? KnownPolicy(*r, cand) : nullptr;
      if (!known) continue;
      if (SameContents(*known, p)) return cand;
      spdlog::warn("policy {:#x} has the hash of the new policy but other contents: not shared", cand);
      break;
    }
  }
  return maps::PolicyId{0};
}

// egr_ifsbox_v1's entry of the sandbox's interface, then the tc program on
// it (so it never runs there without the entry); a previous interface is
// detached before its entry goes.
static absl::Status PointInterface(const Paths& paths, uint64_t cg, maps::PolicyId id, const SandboxSpec& sandbox,
                                   uint32_t old_ifindex) {
  const uint32_t ifindex = sandbox.ifindex;
  if (!ifindex && !old_ifindex) return absl::OkStatus();
  EGR_ASSIGN_OR_RETURN(auto table, maps::IfSandboxTable::Open(paths.pin_root));
  if (old_ifindex && old_ifindex != ifindex) {
    EGR_RETURN_IF_ERROR(DetachTcPrograms(old_ifindex));
    EGR_RETURN_IF_ERROR(table.Remove(old_ifindex));
    EGR_RETURN_IF_ERROR(table.RemovePod(old_ifindex));
    EGR_RETURN_IF_ERROR(table.RemoveDnsNotes(old_ifindex));
  }
  if (!ifindex) return absl::OkStatus();
  if (!sandbox.keep_interface) EGR_RETURN_IF_ERROR(table.SetPod(ifindex, sandbox.pod_mac, sandbox.pod_addrs));
  EGR_RETURN_IF_ERROR(table.Set(ifindex, egr_cgroup_val{.kind = EGR_CG_SANDBOX, .policy_id = id, .sandbox_id = cg}));
  return AttachTcPrograms(paths, ifindex);
}

// Detached first, then the entries; the flows the sandbox left (and their
// timers) go last, so a registration of the same id starts from nothing.
static absl::Status UnpointInterface(const Paths& paths, uint64_t cg, uint32_t ifindex) {
  EGR_ASSIGN_OR_RETURN(auto table, maps::IfSandboxTable::Open(paths.pin_root));
  EGR_RETURN_IF_ERROR(DetachTcPrograms(ifindex));
  EGR_RETURN_IF_ERROR(table.Remove(ifindex));
  EGR_RETURN_IF_ERROR(table.RemovePod(ifindex));
  EGR_RETURN_IF_ERROR(table.RemoveDnsNotes(ifindex));
  return maps::ForgetSandboxFlows(paths.pin_root, cg).status();
}

// One locked read-modify-write over the instance's maps and records.
template <typename Fn>
absl::Status Registry::Locked(Fn fn) {
  EGR_ASSIGN_OR_RETURN(auto lock, InstanceLock::Acquire(paths_));
  EGR_ASSIGN_OR_RETURN(auto maps, maps::PinnedMaps::Open(paths_.pin_root));
  maps::PolicyStore store(maps);
  maps::SandboxTable table(maps);
  SandboxRecords records(paths_);
  EGR_ASSIGN_OR_RETURN(auto dns, maps::DnsEndpoints::Open(paths_.pin_root));
  maps::ResolvedTable resolved(maps);
  if (index_) {
    if (absl::Status s = index_->Sync(records); !s.ok()) {
      index_->Invalidate();
      return s;
    }
  }
  // The daemon's index knows the ports; a one-shot caller keeps the ledger
  // (a failed call leaves it stale: the records may have moved half-way).
  std::optional<DnsPortLedger> ledger;
  if (!index_) ledger = DnsPortLedger::LoadIfCurrent(records);
  absl::Status s = fn(Env{store, table, records, dns, resolved, ledger});
  if (s.ok() && ledger) {
    if (absl::Status saved = ledger->Save(records); !saved.ok()) {
      spdlog::warn("dns port ledger not saved (the next register rebuilds it): {}", saved.ToString());
    }
  }
  if (index_) {
    // A failed call may have left a record half-way (restored or not):
    // the next call reads them all again.
    if (s.ok()) {
      index_->Seen(records);
    } else {
      index_->Invalidate();
    }
  }
  return s;
}

absl::Status Registry::Register(const SandboxSpec& requested, const policy::CompiledPolicy& p) {
  return Locked([&](Env env) -> absl::Status {
    SandboxSpec kept;
    if (requested.keep_interface) {
      EGR_ASSIGN_OR_RETURN(const std::optional<SandboxRecord> r, OwnRecord(env.records, requested.cgroup_id));
      kept = requested;
      kept.interface = r ? r->interface : "";
      kept.ifindex = r ? r->ifindex : 0;
    }
    const SandboxSpec& sandbox = requested.keep_interface ? kept : requested;
    const uint64_t cg = sandbox.cgroup_id;
    // A sandbox without a cgroup is named by its interface (one id per
    // interface, maps/if_sandbox_table.h), and one interface carries one
    // sandbox: the tc program can judge it by one policy only.
    if (maps::IsInterfaceSandboxId(cg) &&
        (sandbox.ifindex == 0 || maps::InterfaceSandboxId(sandbox.ifindex) != cg)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sandbox id ", cg, " is an interface sandbox's, not that of interface ", sandbox.ifindex));
    }
    if (sandbox.ifindex) {
      EGR_ASSIGN_OR_RETURN(auto ifs, maps::IfSandboxTable::Open(paths_.pin_root));
      EGR_ASSIGN_OR_RETURN(auto held, ifs.Get(sandbox.ifindex));
      if (held && held->sandbox_id != cg) {
        return absl::AlreadyExistsError(absl::StrCat(
            "interface \"", sandbox.interface, "\" is judged for sandbox ", held->sandbox_id,
            maps::IsInterfaceSandboxId(held->sandbox_id) ? " (registered by interface only)" : "",
            " already: remove that registration first; nothing was changed"));
      }
    }
    EGR_ASSIGN_OR_RETURN(auto old, env.table.Get(cg));
    EGR_ASSIGN_OR_RETURN(const std::optional<SandboxRecord> old_record, OwnRecord(env.records, cg));
    const bool flip = old && old->kind == EGR_CG_SANDBOX;
    const std::string step = flip ? "flip" : "register";

    EGR_ASSIGN_OR_RETURN(const std::optional<maps::DnsEndpoint> endpoint,
                         EndpointFor(sandbox, env.records, old_record, index_, env.ledger));
    const uint64_t hash = p.ContentHash();
    EGR_ASSIGN_OR_RETURN(maps::PolicyId id,
                         index_ ? FindEqualPolicy(*index_, env.table, env.records, p, hash, cg)
                                : FindEqualPolicy(env.store, env.table, env.records, p, hash, cg));
    const bool shared = id != 0;
    if (!shared) {
      EGR_ASSIGN_OR_RETURN(id, env.store.FreshId());
    }

    // 1. The record, naming the policy the maps still enforce during a flip.
    SandboxRecord record{.cgroup_id = cg,
                         .cgroup_path = sandbox.cgroup_path,
                         .labels = sandbox.labels,
                         .netns_cookie = sandbox.netns_cookie,
                         .netns_inode = sandbox.netns_inode,
                         .pidns_dev = old_record ? old_record->pidns_dev : 0,
                         .pidns_inode = old_record ? old_record->pidns_inode : 0,
                         .current = {id, p},
                         .dns = endpoint,
                         .interface = sandbox.interface,
                         .ifindex = sandbox.ifindex};
    const policy::CompiledPolicy* old_policy = flip ? KnownPolicy(old_record, old->policy_id) : nullptr;
    if (flip) {
      record.previous = PolicyRef{old->policy_id, old_policy ? std::optional(*old_policy) : std::nullopt};
      if (old_record) record.previous_labels = old_record->labels;
    }
    EGR_RETURN_IF_ERROR(env.records.Write(record));
    if (index_) index_->Put(record);
    CrashPoint(step + ":after-record");

    // 2. The policy: a new id's entries then header, or one more reference.
    absl::Status s = shared ? env.store.AddRef(id) : env.store.Install(id, p, hash);
    if (!s.ok()) {
      RestoreRecord(env.records, cg, old_record);
      return s;
    }
    CrashPoint(step + ":after-policy-write");

    // 2b. Its DNS endpoint, before the sandbox is judged by the new policy.
    if (endpoint) {
      if (s = env.dns.Set(cg, *endpoint); !s.ok()) {
        (void)env.store.Release(id, p);
        RestoreRecord(env.records, cg, old_record);
        return s;
      }
      CrashPoint(step + ":after-dns");
    }

    // 2c. Doors close before the flip opens new ones: the learned addresses
    // of names the new policy no longer allows go at once (a socket
    // connected to one is cut: the backstop finds no entry); those of names
    // it still allows stay with their expiries (docs/dns.md "Policy changes").
    const std::vector<uint32_t> rules = dns::RuleIds(p);
    // An address answered for an exact name the new policy allows stays,
    // whichever rule taught it (narrowing a wildcard to one of its names):
    // known by the entry's keyed question-name id (dns/qname_key.h).  No
    // key to be had: nothing is kept by name (the drop fails closed).
    std::map<uint32_t, uint32_t> by_question;
    if (flip && !p.names.empty()) {
      auto key = dns::QnameKey::LoadOrCreate(dns::QnameKey::PathIn(paths_.runtime_dir));
      if (key.ok()) {
        by_question = dns::ExactQuestionIds(p, **key);
      } else {
        spdlog::warn("cgroup {}: learned addresses are kept by their rules only: {}", cg, key.status().ToString());
      }
    }
    if (flip) {
      auto dropped = env.resolved.KeepRules(cg, rules, by_question);
      if (!dropped.ok()) {
        (void)env.store.Release(id, p);
        RestoreRecord(env.records, cg, old_record);
        return dropped.status();
      }
      if (*dropped) spdlog::info("cgroup {}: {} learned addresses of removed names dropped", cg, *dropped);
    }

    // 3. The flip: one map update.
    if (s = env.table.Point(cg, id); !s.ok()) {
      (void)env.store.Release(id, p);
      RestoreRecord(env.records, cg, old_record);
      return s;
    }
    CrashPoint(step + ":after-flip");
    // 3b. Its interface (issue 17) judged by the same policy, the tc program
    // attached once its entry is there; an interface it no longer has goes.
    if (s = PointInterface(paths_, cg, id, sandbox, old_record ? old_record->ifindex : 0); !s.ok()) {
      return s;
    }
    // An answer the proxy finished under the old names while the flip
    // landed: gone too, before the apply returns.
    if (flip) EGR_RETURN_IF_ERROR(env.resolved.KeepRules(cg, rules, by_question).status());

    // 4. The old policy, no longer pointed at by this sandbox.
    if (flip) {
      EGR_RETURN_IF_ERROR(ReleaseKnown(env.store, old->policy_id, old_policy));
      CrashPoint(step + ":after-release");
    }
    // 5. An endpoint the sandbox no longer has (registered again without one).
    if (!endpoint) EGR_RETURN_IF_ERROR(env.dns.Remove(cg));
    if (index_ && flip) {
      // The record still names the policy it replaced; the index lets go of
      // it as the next record written will (never sharing a released id).
      SandboxRecord settled = record;
      settled.previous.reset();
      index_->Put(settled);
    }
    if (env.ledger) {
      if (old_record && old_record->dns) env.ledger->Release(old_record->dns->port);
      if (endpoint) env.ledger->Claim(endpoint->port);
    }
    spdlog::debug("cgroup {} now judged by policy {:#x}{}", cg, id, shared ? " (shared)" : "");
    return absl::OkStatus();
  });
}

absl::Status Registry::Unregister(uint64_t cgroup_id) {
  return Locked([&](Env env) -> absl::Status {
    EGR_ASSIGN_OR_RETURN(auto old, env.table.Get(cgroup_id));
    EGR_ASSIGN_OR_RETURN(auto record, OwnRecord(env.records, cgroup_id));
    if (record && record->ifindex) EGR_RETURN_IF_ERROR(UnpointInterface(paths_, cgroup_id, record->ifindex));
    if (old) {
      EGR_RETURN_IF_ERROR(env.table.Remove(cgroup_id));
      CrashPoint("remove:after-unregister");
      if (old->kind == EGR_CG_SANDBOX) {
        EGR_RETURN_IF_ERROR(ReleaseKnown(env.store, old->policy_id, KnownPolicy(record, old->policy_id)));
        CrashPoint("remove:after-release");
      }
    }
    EGR_RETURN_IF_ERROR(env.dns.Remove(cgroup_id));
    CrashPoint("remove:after-dns");
    // What it learned goes with it (the collector would take it only at its
    // expiry).
    EGR_RETURN_IF_ERROR(env.resolved.RemoveSandbox(cgroup_id));
    if (index_) index_->Erase(cgroup_id);
    EGR_RETURN_IF_ERROR(env.records.Remove(cgroup_id));
    if (env.ledger && record && record->dns) env.ledger->Release(record->dns->port);
    return absl::OkStatus();
  });
}

absl::Status Registry::Contain(uint64_t cgroup_id) {
  return Locked([&](Env env) -> absl::Status {
    EGR_ASSIGN_OR_RETURN(auto old, env.table.Get(cgroup_id));
    EGR_ASSIGN_OR_RETURN(auto record, OwnRecord(env.records, cgroup_id));
    EGR_RETURN_IF_ERROR(env.table.MarkContainedRoot(cgroup_id));
    if (old && old->kind == EGR_CG_SANDBOX) {
      EGR_RETURN_IF_ERROR(ReleaseKnown(env.store, old->policy_id, KnownPolicy(record, old->policy_id)));
    }
    // A contained root is no sandbox: it has no record and no endpoint.
    EGR_RETURN_IF_ERROR(env.dns.Remove(cgroup_id));
    if (index_) index_->Erase(cgroup_id);
    EGR_RETURN_IF_ERROR(env.records.Remove(cgroup_id));
    if (env.ledger && record && record->dns) env.ledger->Release(record->dns->port);
    return absl::OkStatus();
  });
}

absl::Status Registry::SetPidNamespace(uint64_t cgroup_id, uint64_t dev, uint64_t inode) {
  // Only the record changes: nothing the kernel enforces.
  EGR_ASSIGN_OR_RETURN(auto lock, InstanceLock::Acquire(paths_));
  SandboxRecords records(paths_);
  EGR_ASSIGN_OR_RETURN(std::optional<SandboxRecord> record, records.Load(cgroup_id));
  if (!record) return absl::NotFoundError(absl::StrCat("sandbox ", cgroup_id, " has no record"));
  record->pidns_dev = dev;
  record->pidns_inode = inode;
  // The ports are unchanged: a ledger current before the write is current
  // after it (else run's unregister would find it stale).
  std::optional<DnsPortLedger> ledger = index_ ? std::nullopt : DnsPortLedger::LoadIfCurrent(records);
  EGR_RETURN_IF_ERROR(records.Write(*record));
  if (ledger) {
    if (absl::Status saved = ledger->Save(records); !saved.ok()) {
      spdlog::warn("dns port ledger not saved (the next register rebuilds it): {}", saved.ToString());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<maps::CgroupEntry>> Registry::List() const {
  EGR_ASSIGN_OR_RETURN(auto maps, maps::PinnedMaps::Open(paths_.pin_root));
  return maps::SandboxTable(maps).List();
}

}  // namespace egressd::control
