// --label and --netns of sandbox add and run, turned into what the registry
// records.  Bad input is InvalidArgument naming the value.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "tools/egressctl/commands.h"
#include "userspace/control/registry.h"

namespace egressd::cli {

// Labels only: validated before anything is created.
absl::StatusOr<control::Labels> ParseLabels(const SandboxFlags& flags);
// --dns-endpoint4/6 into spec (InvalidArgument naming the value).
absl::Status ParseDnsEndpoints(const SandboxFlags& flags, control::SandboxSpec& spec);

// The spec of cgroup `path` (id `cgroup_id`), its netns from flags.netns or,
// when that is empty, `default_netns` (run: egressctl's own); "" for none.
// No cgroup (`cgroup_id` 0, `path` ""): the sandbox of flags.interface or
// flags.interface_netns, named by its interface sandbox id.
absl::StatusOr<control::SandboxSpec> MakeSandboxSpec(const SandboxFlags& flags, const std::string& path,
                                                     uint64_t cgroup_id, const std::string& default_netns);

}  // namespace egressd::cli
