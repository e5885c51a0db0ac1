#include "maps/policy_store.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <sys/random.h>

#include <cstring>
#include <vector>

// The kernel's internal "operation not supported" (not in libc headers).
constexpr int ENOTSUPP_ = 524;

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"
#include "maps/map_iter.h"
#include "userspace/common/fault.h"

namespace egressd::maps {
namespace {

template <typename K, typename V>
absl::Status Update(int fd, const char* map, const K& key, const V& value, uint64_t flags = BPF_ANY) {
  if (bpf_map_update_elem(fd, &key, &value, flags) != 0) {
    return ErrnoStatus(errno, absl::StrCat("update ", map));
  }
  return absl::OkStatus();
}

// Deletes every key of an LPM trie whose policy id matches.
template <typename Key>
absl::Status DeleteLpmKeysOf(int fd, const char* map, PolicyId id) {
  for (const auto& k : AllKeys<Key>(fd)) {
    if (ntohl(k.policy_id) != id) continue;
    if (bpf_map_delete_elem(fd, &k) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, absl::StrCat("delete from ", map));
    }
  }
  return absl::OkStatus();
}

template <typename Key>
absl::Status DeleteKey(int fd, const char* map, const Key& k) {
  if (bpf_map_delete_elem(fd, &k) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("delete from ", map));
  }
  return absl::OkStatus();
}

// Deletes the keys of one trie whose policy id is not in `live`.
template <typename Key>
absl::StatusOr<uint32_t> DeleteKeysWithout(int fd, const char* map,
                                           const absl::flat_hash_map<PolicyId, egr_policy_val>& live) {
  uint32_t n = 0;
  for (const auto& k : AllKeys<Key>(fd)) {
    if (live.contains(ntohl(k.policy_id))) continue;
    EGR_RETURN_IF_ERROR(DeleteKey(fd, map, k));
    ++n;
  }
  return n;
}

template <typename Key>
void CountKeysOf(int fd, absl::flat_hash_map<PolicyId, KeyCounts>& out, uint32_t KeyCounts::*field) {
  for (const auto& k : AllKeys<Key>(fd)) ++(out[ntohl(k.policy_id)].*field);
}

// Writes many entries with one BPF_MAP_UPDATE_BATCH where the kernel offers
// it for the map type, element by element otherwise.
template <typename K, typename V>
absl::Status UpdateMany(int fd, const char* map, const std::vector<K>& keys, const std::vector<V>& values) {
  if (keys.empty()) return absl::OkStatus();
  uint32_t count = static_cast<uint32_t>(keys.size());
  DECLARE_LIBBPF_OPTS(bpf_map_batch_opts, opts, .elem_flags = BPF_ANY);
  if (bpf_map_update_batch(fd, keys.data(), values.data(), &count, &opts) == 0) return absl::OkStatus();
  if (errno != EINVAL && errno != ENOTSUP && errno != EOPNOTSUPP && errno != ENOTSUPP_) {
    return ErrnoStatus(errno, absl::StrCat("batch update ", map, " (", keys.size(), " entries)"));
  }
  for (size_t i = 0; i < keys.size(); ++i) EGR_RETURN_IF_ERROR(Update(fd, map, keys[i], values[i]));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<StoredPolicy>> PolicyStore::List() const {
  std::vector<StoredPolicy> out;
  for (const auto& [id, header] : AllEntries<PolicyId, egr_policy_val>(maps_.policy())) {
    out.push_back({id, header});
  }
  return out;
}

absl::StatusOr<std::vector<PolicyId>> PolicyStore::CandidatesFor(uint64_t hash) const {
  EGR_ASSIGN_OR_RETURN(auto all, List());
  std::vector<PolicyId> out;
  for (const auto& sp : all) {
    if (sp.header.content_hash == hash) out.push_back(sp.id);
  }
  return out;
}

absl::StatusOr<PolicyId> PolicyStore::FreshId() const {
  // Random ids: a crashed writer's half-written entries (no header) can never
  // be mistaken for a later policy's.  0 means "none".
  for (int attempt = 0; attempt < 64; ++attempt) {
    PolicyId id = 0;
    if (getrandom(&id, sizeof(id), 0) != sizeof(id)) return ErrnoStatus(errno, "getrandom");
    if (id == 0) continue;
    egr_policy_val v{};
    if (bpf_map_lookup_elem(maps_.policy(), &id, &v) != 0 && errno == ENOENT) return id;
  }
  return absl::ResourceExhaustedError("no free policy id after 64 attempts");
}

absl::Status PolicyStore::WriteEntries(PolicyId id, const policy::CompiledPolicy& p) {
  for (const auto& pc : p.protected_cidrs) {
    const egr_prot_val prot = MakeProtVal(pc.cidr);
    if (pc.cidr.addr().is_v4()) {
      EGR_RETURN_IF_ERROR(Update(maps_.prot4(), EGR_MAP_PROT4, MakeLpm4Key(id, pc.cidr), prot));
    } else {
      EGR_RETURN_IF_ERROR(Update(maps_.prot6(), EGR_MAP_PROT6, MakeLpm6Key(id, pc.cidr), prot));
    }
  }
  EGR_ASSIGN_OR_RETURN(auto entries, BuildAllowEntries(p.allowed));
  std::vector<egr_lpm4_key> k4;
  std::vector<egr_lpm6_key> k6;
  std::vector<egr_allow_val> v4, v6;
  for (const auto& e : entries) {
    if (e.cidr.addr().is_v4()) {
      k4.push_back(MakeLpm4Key(id, e.cidr));
      v4.push_back(e.value);
    } else {
      k6.push_back(MakeLpm6Key(id, e.cidr));
      v6.push_back(e.value);
    }
  }
  EGR_RETURN_IF_ERROR(UpdateMany(maps_.allow4(), EGR_MAP_ALLOW4, k4, v4));
  return UpdateMany(maps_.allow6(), EGR_MAP_ALLOW6, k6, v6);
}

absl::Status PolicyStore::DeleteAllEntriesOf(PolicyId id) {
  EGR_RETURN_IF_ERROR(DeleteLpmKeysOf<egr_lpm4_key>(maps_.prot4(), EGR_MAP_PROT4, id));
  EGR_RETURN_IF_ERROR(DeleteLpmKeysOf<egr_lpm6_key>(maps_.prot6(), EGR_MAP_PROT6, id));
  EGR_RETURN_IF_ERROR(DeleteLpmKeysOf<egr_lpm4_key>(maps_.allow4(), EGR_MAP_ALLOW4, id));
  EGR_RETURN_IF_ERROR(DeleteLpmKeysOf<egr_lpm6_key>(maps_.allow6(), EGR_MAP_ALLOW6, id));
  return absl::OkStatus();
}

// The keys WriteEntries wrote, recomputed: a release touches only its own
// policy's entries, however many other policies share the tries.
absl::Status PolicyStore::DeleteOwnEntries(PolicyId id, const policy::CompiledPolicy& p) {
  for (const auto& pc : p.protected_cidrs) {
    if (pc.cidr.addr().is_v4()) {
      EGR_RETURN_IF_ERROR(DeleteKey(maps_.prot4(), EGR_MAP_PROT4, MakeLpm4Key(id, pc.cidr)));
    } else {
      EGR_RETURN_IF_ERROR(DeleteKey(maps_.prot6(), EGR_MAP_PROT6, MakeLpm6Key(id, pc.cidr)));
    }
  }
  EGR_ASSIGN_OR_RETURN(auto entries, BuildAllowEntries(p.allowed));
  for (const auto& e : entries) {
    if (e.cidr.addr().is_v4()) {
      EGR_RETURN_IF_ERROR(DeleteKey(maps_.allow4(), EGR_MAP_ALLOW4, MakeLpm4Key(id, e.cidr)));
    } else {
      EGR_RETURN_IF_ERROR(DeleteKey(maps_.allow6(), EGR_MAP_ALLOW6, MakeLpm6Key(id, e.cidr)));
    }
  }
  return absl::OkStatus();
}

absl::Status PolicyStore::Install(PolicyId id, const policy::CompiledPolicy& p, uint64_t content_hash) {
  if (absl::Status s = WriteEntries(id, p); !s.ok()) {
    (void)DeleteOwnEntries(id, p);  // leave nothing half-written behind
    return s;
  }
  egr_policy_val header = MakePolicyHeader(p, content_hash);
  header.refcount = 1;
  // The header goes last: until it exists no sandbox can be pointed here.
  if (absl::Status s = Update(maps_.policy(), EGR_MAP_POLICY, id, header, BPF_NOEXIST); !s.ok()) {
    (void)DeleteOwnEntries(id, p);
    return s;
  }
  spdlog::debug("policy {:#x} installed ({} protected, {} allowed)", id, p.protected_cidrs.size(),
                p.allowed.size());
  return absl::OkStatus();
}

absl::StatusOr<PolicyId> PolicyStore::Acquire(const policy::CompiledPolicy& p) {
  EGR_ASSIGN_OR_RETURN(PolicyId id, FreshId());
  EGR_RETURN_IF_ERROR(Install(id, p, p.ContentHash()));
  return id;
}

absl::Status PolicyStore::AddRef(PolicyId id) {
  egr_policy_val v{};
  if (bpf_map_lookup_elem(maps_.policy(), &id, &v) != 0) {
    return ErrnoStatus(errno, absl::StrCat("share policy ", id, ": lookup ", EGR_MAP_POLICY));
  }
  v.refcount++;
  EGR_RETURN_IF_ERROR(Update(maps_.policy(), EGR_MAP_POLICY, id, v, BPF_EXIST));
  spdlog::debug("policy {:#x} shared (refcount {})", id, v.refcount);
  return absl::OkStatus();
}

absl::Status PolicyStore::SetRefcount(PolicyId id, uint32_t refcount) {
  egr_policy_val v{};
  if (bpf_map_lookup_elem(maps_.policy(), &id, &v) != 0) {
    return ErrnoStatus(errno, absl::StrCat("policy ", id, ": lookup ", EGR_MAP_POLICY));
  }
  v.refcount = refcount;
  return Update(maps_.policy(), EGR_MAP_POLICY, id, v, BPF_EXIST);
}

namespace {

// Header first: a dangling id fails closed in the programs, and no sandbox
// points here any more anyway.  Returns false when the reference was not the
// last (nothing to delete).
absl::StatusOr<bool> DropReference(int fd, PolicyId id) {
  egr_policy_val v{};
  if (bpf_map_lookup_elem(fd, &id, &v) != 0) {
    return ErrnoStatus(errno, absl::StrCat("release policy ", id, ": lookup ", EGR_MAP_POLICY));
  }
  if (v.refcount > 1) {
    v.refcount--;
    EGR_RETURN_IF_ERROR(Update(fd, EGR_MAP_POLICY, id, v, BPF_EXIST));
    return false;
  }
  if (bpf_map_delete_elem(fd, &id) != 0) {
    return ErrnoStatus(errno, absl::StrCat("delete policy ", id, " from ", EGR_MAP_POLICY));
  }
  spdlog::debug("policy {:#x} removed", id);
  CrashPoint("release:after-header");
  return true;
}

}  // namespace

absl::Status PolicyStore::Release(PolicyId id, const policy::CompiledPolicy& p) {
  EGR_ASSIGN_OR_RETURN(bool last, DropReference(maps_.policy(), id));
  return last ? DeleteOwnEntries(id, p) : absl::OkStatus();
}

absl::Status PolicyStore::Release(PolicyId id) {
  EGR_ASSIGN_OR_RETURN(bool last, DropReference(maps_.policy(), id));
  return last ? DeleteAllEntriesOf(id) : absl::OkStatus();
}

absl::Status PolicyStore::DropHeader(PolicyId id) {
  if (bpf_map_delete_elem(maps_.policy(), &id) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("delete policy ", id, " from ", EGR_MAP_POLICY));
  }
  return absl::OkStatus();
}

absl::flat_hash_map<PolicyId, KeyCounts> PolicyStore::CountKeys() const {
  absl::flat_hash_map<PolicyId, KeyCounts> out;
  CountKeysOf<egr_lpm4_key>(maps_.allow4(), out, &KeyCounts::allow4);
  CountKeysOf<egr_lpm6_key>(maps_.allow6(), out, &KeyCounts::allow6);
  CountKeysOf<egr_lpm4_key>(maps_.prot4(), out, &KeyCounts::prot4);
  CountKeysOf<egr_lpm6_key>(maps_.prot6(), out, &KeyCounts::prot6);
  return out;
}

absl::StatusOr<uint32_t> PolicyStore::CollectOrphanKeys() {
  absl::flat_hash_map<PolicyId, egr_policy_val> live;
  for (const auto& [id, header] : AllEntries<PolicyId, egr_policy_val>(maps_.policy())) live[id] = header;
  uint32_t n = 0;
  EGR_ASSIGN_OR_RETURN(uint32_t a4, DeleteKeysWithout<egr_lpm4_key>(maps_.allow4(), EGR_MAP_ALLOW4, live));
  EGR_ASSIGN_OR_RETURN(uint32_t a6, DeleteKeysWithout<egr_lpm6_key>(maps_.allow6(), EGR_MAP_ALLOW6, live));
  EGR_ASSIGN_OR_RETURN(uint32_t p4, DeleteKeysWithout<egr_lpm4_key>(maps_.prot4(), EGR_MAP_PROT4, live));
  EGR_ASSIGN_OR_RETURN(uint32_t p6, DeleteKeysWithout<egr_lpm6_key>(maps_.prot6(), EGR_MAP_PROT6, live));
  n = a4 + a6 + p4 + p6;
  if (n > 0) spdlog::info("collected {} policy entries whose policy had no header", n);
  return n;
}

}  // namespace egressd::maps
