// egressctl metrics (tools/: it reads the pinned maps and the audit state
// file, two layers apart).  The instance's figures in Prometheus' text exposition format (names
// egressd_*, as Tetragon and Cilium name theirs), until a daemon serves
// /metrics: the programs' decision counters (egr_stats_v3, exact), what the
// audit readers exported (the state file, saved every window), every pinned
// map's entries and capacity, and the sandboxes.  docs/audit.md lists them.
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
