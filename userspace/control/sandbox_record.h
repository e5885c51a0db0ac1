// The persistent record of each sandbox, one file per cgroup under
// <runtime_dir>/sandboxes/<cgroup id>.json: the whole compiled policy (names
// and wildcards, which the kernel maps cannot hold), the labels the
// orchestrator gave it, its cgroup and its network namespace.  The DNS proxy
// (which names may this sandbox ask?), the audit trail (which sandbox is this
// cgroup?) and a restarted daemon read it.
//
// Written atomically (temp file, fsync, rename, fsync of the directory), mode
// 0600, under the instance lock.  Readers need no lock: they see a whole old
// or a whole new record.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "maps/dns_endpoints.h"
#include "maps/lpm_keys.h"
#include "userspace/common/node.h"
#include "userspace/policy/compiled_policy.h"
#include "userspace/policy/compiled_policy_json.h"

namespace egressd::control {

using Labels = std::map<std::string, std::string>;

// "KEY=VALUE" (egressctl --label): KEY lower-case [a-z0-9._/-], starting with
// a letter, at most 63 bytes; VALUE at most 253 bytes of [A-Za-z0-9._:/@+-]
// (may be empty).  InvalidArgument names the offending text; a repeated key is
// an error too.
absl::Status ParseLabel(const std::string& text, Labels& into);

struct PolicyRef {
  maps::PolicyId policy_id = 0;  // the id in egr_policy_v1 this policy was written to
  // The compiled policy; absent when a reconcile found an enforced policy
  // whose contents no record held (then no names are known: ask none).
  std::optional<policy::CompiledPolicy> policy;
};

// Where the sandbox's DNS queries are steered ("dns" in the record): the
// proxy serves it, the kernel's egr_dns_v1 points there.
using DnsEndpoint = maps::DnsEndpoint;

struct SandboxRecord {
  uint64_t cgroup_id = 0;
  std::string cgroup_path;  // empty when not known (reconciled from the maps)
  Labels labels;
  uint64_t netns_cookie = 0;  // 0: not known
  uint64_t netns_inode = 0;   // 0: not known
  // The sandbox's own pid namespace (nsfs st_dev, st_ino of /proc/PID/ns/pid),
  // where egressctl knows it (`run` makes one); 0: not known.  The audit
  // trail names a process's ids in it (userspace/audit/ns_pids.h).
  uint64_t pidns_dev = 0, pidns_inode = 0;
  // What the sandbox is (about to be) judged by.
  PolicyRef current;
  // During a flip, the policy the sandbox was judged by before: until the
  // flip lands the maps still enforce it, and a reconcile after a crash goes
  // back to it.
  std::optional<PolicyRef> previous;
  Labels previous_labels;  // the labels that went with `previous`
  // Where the kernel steers the sandbox's DNS queries (bpf/lib/dns_redirect.h),
  // stored as "dns": {"addr4": "...", "addr6": "...", "port": N} (an absent
  // family's key is left out).  nullopt: no endpoint, its DNS is refused.
  std::optional<maps::DnsEndpoint> dns;
  // Set by a reconcile that had to guess or repair, saying what it did.
  std::string note;
  // The host-side interface the sandbox is judged at too (SandboxSpec's);
  // stored as "interface" and "ifindex", absent when there is none.
  std::string interface;
  uint32_t ifindex = 0;
};

nlohmann::json ToJson(const SandboxRecord& r);
// The same as text (what Write stores), and back, without a JSON DOM.
std::string ToJsonText(const SandboxRecord& r);
absl::StatusOr<SandboxRecord> ParseRecordText(std::string_view text);
// "443" or "8000-8100", as CompiledPolicy::ToJson writes ports.
absl::StatusOr<policy::PortRange> ParsePortRange(std::string_view text);
absl::StatusOr<SandboxRecord> SandboxRecordFromJson(const nlohmann::json& j);
// A record's DNS endpoint: a port (not 53) and an address of each family
// given, of that family.  InvalidArgument naming what is wrong.
absl::Status CheckDnsEndpoint(const maps::DnsEndpoint& ep);
// The inverse of policy::ToJson (compiled_policy_json.h).
absl::StatusOr<policy::CompiledPolicy> PolicyFromJson(const nlohmann::json& j);

// Equal contents: what the kernel enforces and the names a DNS proxy would
// allow, ignoring `source` strings, order and duplicates (the same relation
// ContentHash summarizes, compared in full).
bool SameContents(const policy::CompiledPolicy& a, const policy::CompiledPolicy& b);

class SandboxRecords {
 public:
  explicit SandboxRecords(const Paths& paths);

  // nullopt when the cgroup has no record.
  absl::StatusOr<std::optional<SandboxRecord>> Load(uint64_t cgroup_id) const;
  // Every record, by cgroup id.  A file that does not parse is an error naming
  // it, unless `corrupt` is given: then its cgroup id is added there instead.
  absl::StatusOr<std::vector<SandboxRecord>> List(std::vector<uint64_t>* corrupt = nullptr) const;

  // Mutations: callers hold the instance lock.
  absl::Status Write(const SandboxRecord& r) const;
  absl::Status Remove(uint64_t cgroup_id) const;
  // Renames a record that does not parse to <id>.json.corrupt, out of every
  // reader's way but kept for the operator.
  absl::Status Quarantine(uint64_t cgroup_id) const;

  const std::string& dir() const { return dir_; }
  std::string PathOf(uint64_t cgroup_id) const;

 private:
  std::string dir_;
};

}  // namespace egressd::control
