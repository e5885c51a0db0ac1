// egressctl status: through the daemon's GET /v1/status when a daemon answers
// on its socket (docs/api.md), else from the pinned maps and records directly
// (one line on stderr says so).  Both forms carry the maps-only keys
// (control/node_status.h); the daemon's adds what only it knows (enforcing,
// DNS served, audit reader, held PUTs, capacity, contained roots, metrics).
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>
#include <vector>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "maps/pinned_maps.h"
#include "maps/resolved_table.h"
#include "maps/stats.h"
#include "tools/egressctl/commands.h"
#include "tools/egressctl/policy_flags.h"
#include "userspace/control/node_status.h"
#include "userspace/daemon/client.h"

namespace egressd::cli {
namespace {

std::string Str(const nlohmann::json& j, const char* key, const std::string& dflt = "") {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : dflt;
}
uint64_t Num(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number_unsigned() ? j[key].get<uint64_t>() : 0;
}
bool Flag(const nlohmann::json& j, const char* key) { return j.contains(key) && j[key].is_boolean() && j[key].get<bool>(); }

// The daemon's own part (absent from the maps-only form).
void PrintDaemonPart(const nlohmann::json& j, const std::string& socket) {
  std::printf("egressd daemon on %s: %s, programs %s, pins under %s\n", socket.c_str(),
              Flag(j, "enforcing") ? "enforcing" : "NOT ENFORCING", Str(j, "programs", "?").c_str(),
              Str(j, "pin_root").c_str());
  for (const auto& why : j.value("enforcing_missing", nlohmann::json::array())) {
    if (why.is_string()) std::printf("  NOT ENFORCING: %s\n", why.get<std::string>().c_str());
  }
  if (!Flag(j, "socket_containment")) {
    std::printf("  socket-family containment MISSING: %s%s\n", Str(j, "socket_containment_missing").c_str(),
                Flag(j, "accepts_uncontained") ? " (the daemon accepts uncontained sandboxes)" : "");
  }
  if (j.contains("dns") && j["dns"].is_object()) {
    std::vector<std::string> ups;
    for (const auto& u : j["dns"].value("upstreams", nlohmann::json::array())) ups.push_back(u.get<std::string>());
    std::printf("  dns upstreams %s; %llu endpoint(s) served\n",
                ups.empty() ? "NONE (DNS fails closed)" : absl::StrJoin(ups, ", ").c_str(),
                (unsigned long long)Num(j["dns"], "served"));
  }
  std::printf("  sandboxes %llu, held PUTs %llu, refused callers %llu, audit reader %s\n",
              (unsigned long long)Num(j, "sandboxes"), (unsigned long long)Num(j, "held"),
              (unsigned long long)Num(j, "refused_callers"),
              j.contains("audit") && Flag(j["audit"], "reader") ? "held" : "NOT held");
  if (j.contains("capacity") && j["capacity"].is_object()) {
    std::vector<std::string> use;
    for (const auto& [what, m] : j["capacity"].items()) {
      if (m.is_object() && m.contains("capacity")) {
        use.push_back(absl::StrCat(what, " ", Num(m, "entries"), "/", Num(m, "capacity")));
      }
    }
    if (!use.empty()) std::printf("  capacity %s\n", absl::StrJoin(use, ", ").c_str());
  }
  if (j.contains("metrics") && j["metrics"].is_object()) {
    std::printf("  metrics on %s (%llu scrapes)\n", Str(j["metrics"], "address").c_str(),
                (unsigned long long)Num(j["metrics"], "scrapes"));
  }
}

// What both forms carry (control/node_status.h).
void PrintNodePart(const nlohmann::json& j) {
  for (const auto& c : j.value("cgroups", nlohmann::json::array())) {
    std::printf("  cgroup %-12s %-15s policy %#x%s%s%s\n", std::to_string(Num(c, "cgroup_id")).c_str(),
                Str(c, "kind").c_str(), static_cast<unsigned>(Num(c, "policy_id")),
                Flag(c, "interface_only") ? " (interface only: no cgroup)" : "",
                Flag(c, "audit_only") ? " NOT ENFORCED (audit-only: denials recorded as would-deny)" : "",
                Flag(c, "strict_audit") ? " strict-audit" : "");
  }
  for (const auto& p : j.value("policies", nlohmann::json::array())) {
    std::printf("  policy %#-10x default %-5s on-deny %-6s sandboxes %llu\n", static_cast<unsigned>(Num(p, "policy_id")),
                Str(p, "default").c_str(), Str(p, "on_deny").c_str(), (unsigned long long)Num(p, "refcount"));
  }
  for (const auto& r : j.value("records", nlohmann::json::array())) {
    std::string labels;
    // A named copy: items() of a temporary would dangle in the loop.
    const nlohmann::json label_set = r.value("labels", nlohmann::json::object());
    for (const auto& [k, v] : label_set.items()) {
      labels += " " + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
    }
    const bool names_known = r.contains("current") && r["current"].is_object() && r["current"].contains("policy") &&
                             !r["current"]["policy"].is_null();
    const std::string path = Str(r, "cgroup_path"), interface = Str(r, "interface");
    const std::string where = !path.empty()        ? path + (interface.empty() ? "" : " interface " + interface)
                              : !interface.empty() ? "interface " + interface
                                                   : std::string("(path unknown)");
    std::printf("  record %-12s %s%s%s\n", std::to_string(Num(r, "cgroup_id")).c_str(), where.c_str(),
                labels.c_str(), names_known ? "" : " (names unknown)");
  }
  if (j.contains("learned") && j["learned"].is_object()) {
    for (const auto& e : j["learned"].value("entries", nlohmann::json::array())) {
      const int64_t left = e.value("expires_in_s", int64_t{0});
      std::string use;
      if (Num(e, "socks")) use += absl::StrCat(" held by ", Num(e, "socks"), " sockets");
      if (e.contains("last_used_s_ago")) use += absl::StrCat(" last used ", e["last_used_s_ago"].get<int64_t>(), "s ago");
      std::vector<std::string> rules;
      for (const auto& r : e.value("rules", nlohmann::json::array())) rules.push_back(r.get<std::string>());
      std::printf("  learned %-12s %-39s %s via %s%s\n", std::to_string(Num(e, "sandbox")).c_str(),
                  Str(e, "address").c_str(),
                  left > 0 ? absl::StrCat("expires in ", left, "s").c_str()
                           : absl::StrCat("expired ", -left, "s ago").c_str(),
                  absl::StrJoin(rules, ",").c_str(), use.c_str());
    }
  }
  if (j.contains("consistency") && !Flag(j["consistency"], "consistent")) {
    std::printf("  INCONSISTENT (run `egressctl load` to reconcile): %s\n", j["consistency"].dump().c_str());
  }
  if (j.contains("resolved") && j["resolved"].is_object()) {
    const auto& r = j["resolved"];
    const uint64_t cap = Num(r, "capacity"), n = Num(r, "entries");
    std::printf("  learned addresses %llu of %llu (%.1f%%) in %s\n", (unsigned long long)n, (unsigned long long)cap,
                cap ? 100.0 * static_cast<double>(n) / static_cast<double>(cap) : 0.0, Str(r, "map").c_str());
  }
  // In the kernel's order, not the JSON object's (alphabetical).
  const nlohmann::json counters = j.value("counters", nlohmann::json::object());
  for (int i = 0; i < EGR_STAT_MAX; ++i) {
    std::printf("  %-15s %llu\n", maps::CounterName(i), (unsigned long long)Num(counters, maps::CounterName(i)));
  }
}

int FromMaps(const Paths& paths, bool json) {
  auto m = maps::PinnedMaps::Open(paths.pin_root);
  if (!m.ok()) return Report(m.status());
  auto j = control::NodeStatusJson(paths, *m, maps::ResolvedTable::DefaultWindowNs());
  if (!j.ok()) return Report(j.status());
  if (json) {
    std::printf("%s\n", j->dump(2).c_str());
    return kExitOk;
  }
  std::printf("egressd %s (pins under %s)\n", Flag(*j, "loaded") ? "loaded" : "NOT fully loaded",
              paths.pin_root.c_str());
  PrintNodePart(*j);
  return kExitOk;
}

}  // namespace

int CmdStatus(const Paths& paths, const ApiFlags& api) {
  const bool json = api.output == "json";
  const std::string socket = api.socket.empty() ? daemon::DefaultSocketPath(paths) : api.socket;
  auto r = daemon::Call(socket, "GET", "/v1/status?node=1");
  if (!r.ok() && absl::IsUnavailable(r.status())) {
    // Nothing listens there: no daemon on this instance.  The maps and
    // records are the whole state; say where the answer comes from.
    std::fprintf(stderr, "egressctl: no daemon answers at %s: status read from the pinned maps\n", socket.c_str());
    return FromMaps(paths, json);
  }
  // A daemon is there: what it answers is the status, and a failure is an
  // error of its own, never hidden by reading the maps instead.
  if (!r.ok()) {
    std::fprintf(stderr, "egressctl: status: the daemon at %s failed: %s\n", socket.c_str(),
                 std::string(r.status().message()).c_str());
    return kExitDaemonFailed;
  }
  if (r->status != 200 || !r->body.is_object() || !r->body.contains("enforcing")) {
    std::string why = r->body.is_object() && r->body.contains("error") ? r->body["error"].dump() : "no status in the body";
    std::fprintf(stderr, "egressctl: status: the daemon at %s answered %d: %s\n", socket.c_str(), r->status, why.c_str());
    return kExitDaemonFailed;
  }
  spdlog::debug("status: through the daemon at {}", socket);
  if (json) {
    std::printf("%s\n", r->body.dump(2).c_str());
    return kExitOk;
  }
  PrintDaemonPart(r->body, socket);
  PrintNodePart(r->body);
  return kExitOk;
}

}  // namespace egressd::cli
