// Lifecycle records: the engine loaded and unloaded (type `engine`), a
// sandbox registered and removed (`sandbox`), a policy applied or rejected
// with its errors (`policy`).  egressctl writes them through the user-space
// channel (user_events.h), so they are numbered in the one stream.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "userspace/control/sandbox_record.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::audit {

// event: "started" or "stopped"; details: what the command reported.
nlohmann::json EngineJson(const std::string& event, nlohmann::json details);

// event: "registered" or "removed"; via: "sandbox add", "run", ...
// `labels` are the sandbox's own (a removed sandbox has no record left to
// take them from).
nlohmann::json SandboxJson(const std::string& event, uint64_t sandbox_id, const std::string& via,
                           const std::string& cgroup_path, const control::Labels& labels,
                           const std::string& interface = "");

// A policy that was applied to a sandbox: its verdict, sizes and hash.
nlohmann::json PolicyAppliedJson(uint64_t sandbox_id, const std::string& via, const policy::CompiledPolicy& p);
// A policy refused: every error (one a line of the compiler's message).
// sandbox_id 0: the cgroup had no id yet, or was not the problem.
nlohmann::json PolicyRejectedJson(uint64_t sandbox_id, const std::string& via, const std::string& cgroup_path,
                                  const std::string& errors);

}  // namespace egressd::audit
