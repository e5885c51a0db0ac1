// Config reload (issue 14): SIGHUP or POST /v1/config:reload re-reads the
// deployment config and recompiles every sandbox from its declaration the
// way its PUT was compiled.  A bad config changes nothing.  A valid config
// under which a sandbox's declaration no longer compiles is applied anyway:
// that sandbox keeps only what the new floor allows of its last policy
// (RestrictToFloor) and is reported `failed` with the compiler's message, so
// no sandbox is ever more open than the current floor.  The daemon runs the
// same pass at start, so a config changed while it was down takes effect
// before the API answers.
//
// The pure parts are here (unit-tested); the daemon's side is
// config_reload.cc (Daemon::Reload, the contained roots from the config,
// the declarations kept for recompiling).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "userspace/daemon/sandbox_request.h"
#include "userspace/policy/compiled_policy.h"
#include "userspace/policy/deployment_config.h"

namespace egressd::daemon {

// `last` narrowed to what `floor` allows: the floor's protected ranges
// added to its own (kept: a reload never opens a failed sandbox), allowed
// entries wholly inside a protected range dropped (the kernel would deny them
// anyway: protected ranges are checked first), the default deny when the
// floor is airgapped, audit-only off when the floor does not allow it.
// Never more open than `last`, nor than the floor.  nullopt `last` (a policy
// whose contents no record holds): deny-all under the floor's ranges.
struct Restricted {
  policy::CompiledPolicy policy;
  // What the floor took away, one sentence each (empty: nothing of `last`
  // conflicts with the floor).
  std::vector<std::string> conflicts;
};
Restricted RestrictToFloor(const std::optional<policy::CompiledPolicy>& last, const policy::DeploymentConfig& floor);

// The dns.* keys that differ between the running settings and the new ones
// and take effect only at the daemon's next start (the proxy's upstreams,
// lifetimes and bounds are fixed when it is made); `next` gets the running
// values back for them, so the daemon reports what it does.  dns.endpoint4/6
// are not among them: they are the defaults of new registrations (a running
// sandbox keeps its endpoint).
std::vector<std::string> KeepRunningDns(const policy::DnsSettings& running, policy::DnsSettings& next);

// What the daemon keeps of an API sandbox to recompile it: the PUT's body
// (less its cgroup, which the record holds) and its pod UID, one file per
// cgroup under <runtime_dir>/declarations/<cgroup id>.json, written
// atomically (temp file, fsync, rename), mode 0600.
struct Declaration {
  std::string id;
  SandboxRequest request;  // request.cgroup empty
};
std::string DeclarationText(const Declaration& d);
// InvalidArgument naming what is wrong (a file someone edited).
absl::StatusOr<Declaration> ParseDeclaration(const std::string& text);

class DeclarationStore {
 public:
  explicit DeclarationStore(std::string dir) : dir_(std::move(dir)) {}
  absl::Status Init() const;
  absl::StatusOr<std::optional<Declaration>> Load(uint64_t cgroup_id) const;
  absl::Status Save(uint64_t cgroup_id, const Declaration& d) const;
  absl::Status Remove(uint64_t cgroup_id) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string PathOf(uint64_t cgroup_id) const;
  std::string dir_;
};

// The contained roots this daemon marked from its config, by path and
// cgroup id (<runtime_dir>/contained_roots.json), so a reload (or a start)
// that no longer names one releases it, and a root contained by hand
// (`egressctl sandbox contain`) that no config named is left alone.
struct ConfigRoot {
  std::string path;
  uint64_t cgroup_id = 0;
  bool operator==(const ConfigRoot&) const = default;
};
std::string ConfigRootsText(const std::vector<ConfigRoot>& roots);
absl::StatusOr<std::vector<ConfigRoot>> ParseConfigRoots(const std::string& text);

// Whether contained root `root` would contain the process in cgroup `own`
// (both absolute cgroup directory paths): the same or an ancestor.
bool ContainsCgroup(const std::string& root, const std::string& own);

}  // namespace egressd::daemon
