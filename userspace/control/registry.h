// The control plane's one entry point for changing what the kernel enforces:
// register a sandbox with a compiled policy (or flip it to a new one),
// unregister it, mark a contained root.  Each call holds the instance lock for
// its whole read-modify-write, so egressctl processes and the daemon can share
// one loaded instance.
//
// Every change is ordered so that a crash between any two steps leaves a
// state the next `egressctl load` (control/reconcile.h) repairs without ever
// opening anything:
//   register/flip: record (with the policy it replaces), policy entries then
//                  header (or one more reference to an equal policy), the flip
//                  (one map update), release of the old policy;
//   remove:        unregister (one map update), release, delete the record.
// A sandbox's DNS endpoint (SandboxSpec::dns_addr4/6) is in the record from
// step 1 and written to egr_dns_v1/egr_dnsep_v1 after the policy, before the
// flip ("register:after-dns"), so a sandbox is never judged without the
// endpoint it was given; removed after the release ("remove:after-dns").
// Each step is followed by a CrashPoint ("register:after-record",
// "flip:after-policy-write", "remove:after-release", ...) for the
// crash-consistency test.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "maps/policy_store.h"
#include "maps/sandbox_table.h"
#include "userspace/common/node.h"
#include "userspace/control/sandbox_record.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::control {

// What the registry records about a sandbox besides its policy.
struct SandboxSpec {
  uint64_t cgroup_id = 0;
  std::string cgroup_path;
  Labels labels;
  uint64_t netns_cookie = 0;  // 0: not known
  uint64_t netns_inode = 0;
  // The DNS endpoint's addresses (an address the sandbox's netns routes to
  // egressd's node: a pod's gateway, or loopback for a sandbox in the node's
  // netns).  Neither: the sandbox gets no endpoint and its DNS is refused.
  // The port is the registry's to choose (kDnsPortFirst..kDnsPortLast).
  std::optional<net::IpAddr> dns_addr4, dns_addr6;
  // Registered by interface as well (issue 17): the node end of the pod's
  // veth, where the tc program judges every frame the pod sends.  0: none.
  std::string interface;
  uint32_t ifindex = 0;
  // Its sources for anti-spoofing there (net::HostInterface); none: unchecked.
  std::vector<net::IpAddr> pod_addrs;
  std::optional<std::array<uint8_t, 6>> pod_mac;
  // A recompile (the daemon's config reload): the interface the record names
  // stays, its pod entries untouched, judged by the new policy; the fields
  // above are then ignored.
  bool keep_interface = false;
};

// The ports DNS endpoints are allocated from, one per sandbox of a node (the
// lowest free one; a sandbox registered again keeps its port).  Below the
// kernel's default ephemeral range (32768-60999), so an endpoint's port is
// never a client socket's.
inline constexpr uint16_t kDnsPortFirst = 20000;
inline constexpr uint16_t kDnsPortLast = 29999;

// A counter every SandboxRecords Write, Remove and Quarantine raises (the
// file <records dir>/generation, read and written under the instance lock),
// so a process that keeps an index of the records (RegistryIndex) knows when
// another one changed them.  0: never written.  Not fsynced: it matters only
// to processes running now (a restarted one builds its index afresh).
absl::StatusOr<uint64_t> RecordsGeneration(const SandboxRecords& records);

// What a long-lived caller (the daemon) keeps of the records between its
// registrations, so that a register reads no other sandbox's record and
// walks no map: the DNS ports taken (the lowest free one in O(log N)) and,
// per content hash, the policy ids installed and the sandboxes whose records
// hold their contents (FindEqualPolicy then reads one of those records).
// It is a cache, never the truth: Registry brings it up to date under the
// instance lock, rebuilding it (every record read once) whenever another
// process changed a record since (RecordsGeneration), and a
// sharing candidate is still checked against the sandbox table and the
// record before it is used.
class RegistryIndex {
 public:
  RegistryIndex();
  // Up to date with `records` (rebuilt when its generation moved).
  absl::Status Sync(const SandboxRecords& records);
  // After a change this index's owner made (under the lock): the record as
  // written, or gone; then the generation it leaves.
  void Put(const SandboxRecord& r);
  void Erase(uint64_t cgroup_id);
  void Seen(const SandboxRecords& records);
  void Invalidate() { generation_.reset(); }

  std::optional<uint16_t> LowestFreePort() const;
  // The policy ids whose recorded contents have `hash`, each with the
  // sandboxes whose records hold them.
  std::vector<std::pair<maps::PolicyId, std::vector<uint64_t>>> Knowers(uint64_t hash) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::optional<uint16_t> port;
    std::vector<std::pair<maps::PolicyId, uint64_t>> known;  // policy id, its content hash
  };
  std::optional<uint64_t> generation_;
  std::map<uint64_t, Entry> entries_;  // by cgroup id
  std::set<uint16_t> free_ports_;
  std::map<uint16_t, int> port_claims_;  // records naming each taken port
  std::map<uint64_t, std::map<maps::PolicyId, std::set<uint64_t>>> by_hash_;
};

class Registry {
 public:
  // `index`: the caller's RegistryIndex, kept up to date by every call
  // (nullptr: read the records and maps as they are, O(sandboxes)).
  explicit Registry(Paths paths, RegistryIndex* index = nullptr) : paths_(std::move(paths)), index_(index) {}

  // Writes the policy aside (or shares an equal one), then points the sandbox
  // at it in one map update (wholly old or wholly new policy, never a mix),
  // then drops the old one.
  absl::Status Register(const SandboxSpec& sandbox, const policy::CompiledPolicy& p);
  absl::Status Register(uint64_t cgroup_id, const policy::CompiledPolicy& p) {
    return Register(SandboxSpec{.cgroup_id = cgroup_id}, p);
  }
  absl::Status Unregister(uint64_t cgroup_id);
  // Records the sandbox's own pid namespace (SandboxRecord::pidns_*) once it
  // exists (egressctl run makes it after registering); a registration again
  // keeps it.  NotFound when the sandbox has no record.
  absl::Status SetPidNamespace(uint64_t cgroup_id, uint64_t dev, uint64_t inode);
  absl::Status Contain(uint64_t cgroup_id);
  absl::StatusOr<std::vector<maps::CgroupEntry>> List() const;

 private:
  template <typename Fn>
  absl::Status Locked(Fn fn);

  Paths paths_;
  RegistryIndex* index_ = nullptr;
};

// The stored policy id whose contents equal p, or 0: a candidate (same
// header hash) is shared only when a sandbox other than `except` is judged by
// it (its map entry points there) and the first such sandbox whose record
// holds that id's contents holds the same contents as p (O(1) records read,
// whatever the number of sandboxes sharing it).
absl::StatusOr<maps::PolicyId> FindEqualPolicy(const maps::PolicyStore& store, const maps::SandboxTable& table,
                                               const SandboxRecords& records, const policy::CompiledPolicy& p,
                                               uint64_t content_hash, uint64_t except);
// The same from `index`: only the sandboxes its records say know a
// candidate are looked at (a sandbox-table lookup and a record each, the
// first that checks out decides).
absl::StatusOr<maps::PolicyId> FindEqualPolicy(const RegistryIndex& index, const maps::SandboxTable& table,
                                               const SandboxRecords& records, const policy::CompiledPolicy& p,
                                               uint64_t content_hash, uint64_t except);

}  // namespace egressd::control
