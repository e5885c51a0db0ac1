#include "userspace/audit/lifecycle.h"

#include <time.h>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "userspace/audit/record.h"

namespace egressd::audit {
namespace {

nlohmann::json Base(const char* type) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  nlohmann::json j;
  j["schema"] = kSchema;
  j["time"] = FormatTime(static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec);
  j["type"] = type;
  return j;
}

}  // namespace

nlohmann::json EngineJson(const std::string& event, nlohmann::json details) {
  nlohmann::json j = Base("engine");
  j["event"] = event;
  if (!details.is_null()) j["engine"] = std::move(details);
  return j;
}

nlohmann::json SandboxJson(const std::string& event, uint64_t sandbox_id, const std::string& via,
                           const std::string& cgroup_path, const control::Labels& labels,
                           const std::string& interface) {
  nlohmann::json j = Base("sandbox");
  j["event"] = event;
  j["via"] = via;
  j["sandbox"]["id"] = sandbox_id;
  if (!cgroup_path.empty()) j["sandbox"]["cgroup"] = cgroup_path;
  // Judged at this interface (too); without a cgroup, the sandbox is its.
  if (!interface.empty()) j["sandbox"]["interface"] = interface;
  // Left for the exporter to fill in from the record when there are none.
  if (!labels.empty()) {
    j["sandbox"]["labels"] = labels;
    if (labels.count("pod")) j["pod"]["name"] = labels.at("pod");
    if (labels.count("namespace")) j["pod"]["namespace"] = labels.at("namespace");
    if (labels.count("task")) j["task"] = labels.at("task");
    if (labels.count("run")) j["run"] = labels.at("run");
  }
  return j;
}

nlohmann::json PolicyAppliedJson(uint64_t sandbox_id, const std::string& via, const policy::CompiledPolicy& p) {
  nlohmann::json j = Base("policy");
  j["event"] = "applied";
  j["via"] = via;
  j["sandbox"]["id"] = sandbox_id;
  j["policy"] = {{"default", p.default_verdict == policy::Verdict::kAllow ? "allow" : "deny"},
                 {"cidrs", p.allowed.size()},
                 {"names", p.names.size()},
                 {"wildcards", p.wildcard_suffixes.size()},
                 {"protected", p.protected_cidrs.size()},
                 {"content_hash", absl::StrFormat("%016x", p.ContentHash())}};
  if (!p.warnings.empty()) j["policy"]["warnings"] = p.warnings;
  return j;
}

nlohmann::json PolicyRejectedJson(uint64_t sandbox_id, const std::string& via, const std::string& cgroup_path,
                                  const std::string& errors) {
  nlohmann::json j = Base("policy");
  j["event"] = "rejected";
  j["via"] = via;
  if (sandbox_id) j["sandbox"]["id"] = sandbox_id;
  if (!cgroup_path.empty()) j["cgroup"] = cgroup_path;
  j["errors"] = nlohmann::json::array();
  for (absl::string_view line : absl::StrSplit(errors, '\n', absl::SkipEmpty())) j["errors"].push_back(std::string(line));
  return j;
}

}  // namespace egressd::audit
