#include "userspace/daemon/metrics_text.h"

#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "absl/strings/str_cat.h"
#include "maps/if_sandbox_table.h"
#include "maps/map_census.h"
#include "maps/pinned_maps.h"
#include "maps/sandbox_table.h"
#include "maps/stats.h"
#include "userspace/audit/exporter.h"
#include "userspace/audit/record.h"
#include "userspace/audit/record_names.h"
#include "userspace/common/atomic_file.h"
#include "userspace/common/errors.h"
#include "userspace/control/sandbox_caps.h"
#include "userspace/control/sandbox_record.h"

namespace egressd::audit {
namespace {

// A label value as the exposition format quotes it.
std::string Quoted(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out + "\"";
}

class Exposition {
 public:
  void Family(const char* name, const char* type, const char* help) {
    name_ = name;
    fmt::format_to(std::back_inserter(text_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void Sample(uint64_t value, std::initializer_list<std::pair<const char*, std::string>> labels = {}) {
    text_ += name_;
    if (labels.size()) {
      text_ += '{';
      bool first = true;
      for (const auto& [k, v] : labels) {
        if (!first) text_ += ',';
        first = false;
        text_ += k;
        text_ += '=';
        text_ += Quoted(v);
      }
      text_ += '}';
    }
    fmt::format_to(std::back_inserter(text_), " {}\n", value);
  }
  std::string text() && { return std::move(text_); }

 private:
  std::string text_;
  std::string name_;
};

}  // namespace

absl::StatusOr<std::string> RenderMetrics(const Paths& paths, const DaemonFigures* daemon) {
  EGR_ASSIGN_OR_RETURN(auto m, maps::PinnedMaps::Open(paths.pin_root));
  const maps::Counters c = maps::ReadCounters(m);
  EGR_ASSIGN_OR_RETURN(auto cgroups, maps::SandboxTable(m).List());
  EGR_ASSIGN_OR_RETURN(auto records, control::SandboxRecords(paths).List());
  EGR_ASSIGN_OR_RETURN(auto census, maps::CountPinnedMaps(paths.pin_root));
  EGR_ASSIGN_OR_RETURN(ExportTotals x, ReadExportTotals(StatePath(paths)));

  Exposition e;
  e.Family("egressd_connections_total", "counter",
           "connect() calls of sandboxes judged by the connect hooks, by verdict (kernel counter, exact)");
  e.Sample(c[EGR_STAT_CONNECT_ALLOW], {{"verdict", "allow"}});
  e.Sample(c[EGR_STAT_CONNECT_DENY], {{"verdict", "deny"}});
  e.Family("egressd_sends_total", "counter",
           "Unconnected sends of sandboxes judged by the sendmsg hooks, by verdict (kernel counter, exact)");
  e.Sample(c[EGR_STAT_SENDMSG_ALLOW], {{"verdict", "allow"}});
  e.Sample(c[EGR_STAT_SENDMSG_DENY], {{"verdict", "deny"}});
  e.Family("egressd_backstop_packets_total", "counter",
           "Packets of sandboxes the egress backstop passed or dropped (kernel counter, exact)");
  e.Sample(c[EGR_STAT_SKB_PASS], {{"verdict", "allow"}});
  e.Sample(c[EGR_STAT_SKB_DROP], {{"verdict", "deny"}});
  e.Family("egressd_denials_total", "counter",
           "Other denials, by hook: socket family containment, the bpf LSM, socket options (kernel counters)");
  e.Sample(c[EGR_STAT_CONTAINED_DENY], {{"hook", "contained"}});
  e.Sample(c[EGR_STAT_LSM_DENY], {{"hook", "lsm"}});
  e.Sample(c[EGR_STAT_SOCKOPT_DENY], {{"hook", "sockopt"}});
  e.Family("egressd_dns_packets_total", "counter",
           "DNS packets of sandboxes redirected to their proxy or denied in the kernel (kernel counters)");
  e.Sample(c[EGR_STAT_DNS_REDIRECT], {{"verdict", "redirect"}});
  e.Sample(c[EGR_STAT_DNS_DENY], {{"verdict", "deny"}});
  // The tc program on sandboxes' veths (issue 17): what an operator of
  // gVisor/VM pods watches, since no cgroup counter above sees their frames.
  EGR_ASSIGN_OR_RETURN(std::vector<uint64_t> tc, maps::ReadTcStats(paths.pin_root));
  e.Family("egressd_tc_frames_total", "counter",
           "Frames of sandboxes registered by interface, judged by the tc program on their veth, by outcome "
           "(kernel counters, exact)");
  static constexpr std::pair<int, const char*> kTcOutcomes[] = {
      {EGR_TC_STAT_PASS, "pass"},
      {EGR_TC_STAT_DROP, "deny"},
      {EGR_TC_STAT_FRAME_DROP, "frame-dropped"},
      {EGR_TC_STAT_LINK_LOCAL, "neighbour"},
      {EGR_TC_STAT_SPOOFED, "spoofed"},
      {EGR_TC_STAT_DNS_UNMATCHED, "dns-unmatched"},
      {EGR_TC_STAT_FLOW_PASS, "flow-pass"},
      {EGR_TC_STAT_FLOW_UNTRACKED, "flow-untracked"},
      {EGR_TC_STAT_REJECT_RST, "reject-rst"},
      {EGR_TC_STAT_REJECT_ICMP, "reject-icmp"},
      {EGR_TC_STAT_REJECT_LIMITED, "reject-limited"},
  };
  for (const auto& [slot, outcome] : kTcOutcomes) e.Sample(tc.at(slot), {{"outcome", outcome}});
  e.Family("egressd_events_total", "counter",
           "Audit occurrences in the kernel by fate: put on the ring (recorded), folded into a summary "
           "(summarised), neither (lost); recorded + summarised + lost = every judged occurrence");
  e.Sample(c[EGR_STAT_EVENT_SUBMITTED], {{"fate", "recorded"}});
  e.Sample(c[EGR_STAT_EVENT_FOLDED], {{"fate", "summarised"}});
  e.Sample(c[EGR_STAT_EVENT_LOST], {{"fate", "lost"}});
  e.Family("egressd_audit_lines_total", "counter",
           "Audit lines the instance's readers wrote (the last seq; saved at the end of every window)");
  e.Sample(x.lines);
  e.Family("egressd_audit_exported_total", "counter",
           "Occurrences the readers exported as records and summaries, by type, verdict and reason");
  for (const auto& [k, n] : x.occurrences) {
    e.Sample(n, {{"type", audit::KindName(k.kind)},
                 {"verdict", audit::VerdictName(k.action)},
                 {"reason", ReasonName(k.kind, k.action, k.reason)}});
  }
  e.Family("egressd_dns_queries_total", "counter",
           "DNS queries the sandboxes' proxies answered, as exported in the audit trail, by the proxy's "
           "verdict and the answer's rcode (none: no answer was sent)");
  for (const auto& [k, n] : x.dns_queries) e.Sample(n, {{"verdict", k.first}, {"rcode", k.second}});
  e.Family("egressd_dns_bounded_addresses_total", "counter",
           "Learned addresses the DNS proxy's bounds acted on, as exported in the audit trail: evicted under a "
           "name's cap, or not learned past a name's cap (name-cap) or a sandbox's quota (sandbox-quota)");
  for (const char* outcome : {"evicted", "name-cap", "sandbox-quota"}) {
    auto it = x.dns_bounds.find(outcome);
    e.Sample(it == x.dns_bounds.end() ? 0 : it->second, {{"outcome", outcome}});
  }
  e.Family("egressd_audit_lost_total", "counter",
           "Occurrences reported lost: loss records' counts (kind=loss) and kernel records never "
           "received (kind=gap)");
  e.Sample(x.lost, {{"kind", "loss"}});
  e.Sample(x.gaps, {{"kind", "gap"}});
  e.Family("egressd_map_entries", "gauge", "Entries in each pinned map now (arrays: every index)");
  for (const auto& mc : census) {
    if (mc.entries) e.Sample(*mc.entries, {{"map", mc.name}, {"type", mc.type}});
  }
  e.Family("egressd_map_capacity", "gauge", "Each pinned map's max_entries (the ring buffer: its bytes)");
  for (const auto& mc : census) e.Sample(mc.max_entries, {{"map", mc.name}, {"type", mc.type}});
  uint64_t sandboxes = 0, contained = 0;
  for (const auto& cg : cgroups) (cg.value.kind == EGR_CG_SANDBOX ? sandboxes : contained) += 1;
  e.Family("egressd_cgroups", "gauge", "Cgroups in the kernel's table, by kind");
  e.Sample(sandboxes, {{"kind", "sandbox"}});
  e.Sample(contained, {{"kind", "contained-root"}});
  e.Family("egressd_sandboxes", "gauge", "Sandboxes registered (their records)");
  e.Sample(records.size());
  // Names are served from the records by the DNS proxy (no kernel map holds
  // them): their node-wide use, beside the maps' (egressd_map_entries).
  e.Family("egressd_declared_names", "gauge", "Names and wildcard rules the registered sandboxes declare, all together");
  e.Sample(control::DeclaredNames(records));
  if (daemon) {
    e.Family("egressd_dns_self_test_late_answers_total", "counter",
             "DNS self-test answers that came after the test's 1 s timeout and were dropped by the next test: "
             "each a moment readyz saw the proxy slower than readiness allows (this daemon process's count)");
    e.Sample(daemon->dns_self_test_late_answers);
  }
  return std::move(e).text();
}

absl::Status WriteMetricsFile(const Paths& paths, const std::string& file) {
  EGR_ASSIGN_OR_RETURN(std::string text, RenderMetrics(paths));
  // Rewritten every interval and read by a scraper: whole, not fsynced.
  return WriteFileAtomically(file, text, 0644, FileSync::kWhole);
}

}  // namespace egressd::audit
