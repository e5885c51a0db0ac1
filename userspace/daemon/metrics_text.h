// The instance's figures in Prometheus' text exposition format (names
// egressd_*, as Tetragon and Cilium name theirs): the programs' decision
// counters (egr_stats_v3, exact), what the audit readers exported (the state
// file, saved every window), every pinned map's entries and capacity, and the
// sandboxes.  One renderer for `egressctl metrics` and the daemon's /metrics
// (metrics.address); docs/audit.md lists them.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "userspace/common/node.h"

namespace egressd::audit {

absl::StatusOr<std::string> RenderMetrics(const Paths& paths);
// Renders, then writes FILE.tmp and renames it over FILE (mode 0644: what a
// node_exporter textfile collector or a scraper sidecar reads), so a reader
// sees the whole previous file or the whole new one.
absl::Status WriteMetricsFile(const Paths& paths, const std::string& file);

}  // namespace egressd::audit
