// The instance's figures in Prometheus' text exposition format (names
// egressd_*, as Tetragon and Cilium name theirs): the programs' decision
// counters (egr_stats_v3, exact), what the audit readers exported (the state
// file, saved every window), every pinned map's entries and capacity, and the
// sandboxes.  One renderer for `egressctl metrics` and the daemon's /metrics
// (metrics.address); docs/audit.md lists them.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "userspace/common/node.h"

namespace egressd::audit {

// Figures only a running daemon holds (its process's own counters, reset
// when it restarts, as a Prometheus counter may be): on its /metrics after
// the pinned state's families, never in `egressctl metrics`, which has no
// daemon to ask.
struct DaemonFigures {
  // Self-test answers come after their 1 s timeout and dropped by the next
  // test (/v1/status dns.self_test_late_answers): each one a moment the
  // DNS proxy answered its own loop slower than readiness allows.
  uint64_t dns_self_test_late_answers = 0;
};

// `daemon` null: the pinned state's families alone.
absl::StatusOr<std::string> RenderMetrics(const Paths& paths, const DaemonFigures* daemon = nullptr);
// Renders, then writes FILE.tmp and renames it over FILE (mode 0644: what a
// node_exporter textfile collector or a scraper sidecar reads), so a reader
// sees the whole previous file or the whole new one.
absl::Status WriteMetricsFile(const Paths& paths, const std::string& file);

}  // namespace egressd::audit
