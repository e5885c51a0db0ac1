// Per-sandbox caps on PUT, GET /v1/sandboxes/{id}'s detail (counters, learned
// addresses with expiries, what the sandbox takes of its caps) and the node's
// capacity in /v1/status (issue 14).
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "maps/resolved_table.h"
#include "userspace/audit/lifecycle.h"
#include "userspace/audit/record_names.h"
#include "userspace/control/learned_view.h"
#include "userspace/control/sandbox_caps.h"
#include "userspace/daemon/daemon.h"
#include "userspace/dns/learner.h"

namespace egressd::daemon {

std::optional<Response> Daemon::CapsRefusal(const SandboxRequest& req, const policy::CompiledPolicy& p) {
  auto use = control::CountCapUse(p);
  if (!use.ok()) return FromStatus(use.status());
  const auto over = control::ExceededCaps(*use, deployment_.limits);
  if (over.empty()) return std::nullopt;
  std::string message;
  nlohmann::json caps = nlohmann::json::array();
  for (const auto& c : over) {
    absl::StrAppend(&message, c.message, "\n");
    caps.push_back({{"cap", c.cap}, {"limit", c.limit}, {"count", c.count}});
  }
  message += "nothing was changed";
  audit_->Submit(audit::PolicyRejectedJson(0, "egressd api", req.cgroup.empty() ? req.pod_uid : req.cgroup, message),
                 0);
  Response r = ErrorResponse(400, "over_cap", message);
  r.body["error"]["caps"] = std::move(caps);
  return r;
}

nlohmann::json Daemon::SandboxDetail(const control::SandboxRecord& r) {
  nlohmann::json j = SandboxJson(r);
  // Learned addresses: the proxy's entries for this sandbox, as `egressctl
  // status` shows them.
  std::optional<uint64_t> learned_count;
  const uint64_t window_ns = uint64_t{dns::LifetimeOf(deployment_.dns).grace_s} * 1'000'000'000ull;
  auto learned = control::LearnedJson(*maps_, {r}, {.sandbox = r.cgroup_id, .in_use_window_ns = window_ns});
  if (learned.ok()) {
    learned_count = (*learned)["total"].get<uint64_t>();
    j["learned"] = std::move(*learned);
  } else {
    j["learned"] = {{"error", learned.status().ToString()}};
  }
  if (r.current.policy) {
    if (auto use = control::CountCapUse(*r.current.policy); use.ok()) {
      j["caps"] = control::CapsJson(*use, deployment_.limits, deployment_.dns.max_addresses_per_sandbox, learned_count);
    }
  }
  // The audit trail's counts of what the kernel judged for this sandbox
  // (records and folded summaries), by type and verdict, since this daemon's
  // reader started; lost: occurrences neither recorded nor folded.
  nlohmann::json counters = {{"source", "audit"}, {"reading", false}};
  if (const audit::Exporter* x = audit_host_ ? audit_host_->exporter() : nullptr) {
    counters["reading"] = true;
    nlohmann::json by = nlohmann::json::object();
    for (const char* kind : {"connect", "send", "backstop"}) by[kind] = {{"allow", 0}, {"deny", 0}, {"would-deny", 0}};
    if (const auto* occ = x->SandboxOccurrences(r.cgroup_id)) {
      for (const auto& [k, n] : *occ) {
        auto& slot = by[audit::KindName(k.kind)][audit::VerdictName(k.action)];
        slot = (slot.is_number() ? slot.get<uint64_t>() : 0) + n;
      }
    }
    counters["occurrences"] = std::move(by);
    auto lost = x->lost().find(r.cgroup_id);
    counters["lost"] = lost == x->lost().end() ? 0 : lost->second;
  }
  j["counters"] = std::move(counters);
  return j;
}

nlohmann::json Daemon::NodeCapacityJson() {
  nlohmann::json j = nlohmann::json::object();
  auto use = control::SharedMapsUse(options_.paths);
  if (!use.ok()) return {{"error", use.status().ToString()}};
  for (const auto& u : *use) {
    j[u.what] = {{"map", u.map}, {"capacity", u.capacity}, {"entries", u.entries}};
  }
  auto records = records_->List();
  j["names"] = {{"declared", records.ok() ? control::DeclaredNames(*records) : 0}};
  const auto& l = deployment_.limits;
  j["per_sandbox"] = {{"maxCidrEntriesPerSandbox", l.max_cidr4_entries},
                      {"maxCidr6EntriesPerSandbox", l.max_cidr6_entries},
                      {"maxNamesPerSandbox", l.max_names},
                      {"maxAddressesPerSandbox", deployment_.dns.max_addresses_per_sandbox}};
  return j;
}

}  // namespace egressd::daemon
