// Turns what the kernel recorded into numbered JSON lines: records off the
// ring as they come, and at the end of each fold window the summaries (folded
// counts), the losses and the gaps.  `seq` numbers every line this instance
// ever wrote: it continues across restarts (the state file), and anything the
// kernel numbered that never arrived is written as a gap record, never
// skipped.  The holder of the reader lock also writes every line to the
// spools (all.jsonl and <sandbox id>.jsonl) the other readers tail.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "maps/egressd_abi.h"
#include "maps/event_ring.h"
#include "userspace/audit/ns_pids.h"
#include "userspace/audit/record.h"
#include "userspace/audit/spool.h"
#include "userspace/common/node.h"
#include "userspace/common/unique_fd.h"
#include "userspace/control/sandbox_record.h"

namespace egressd::audit {

struct ExporterOptions {
  std::string state_path;  // persisted seq and kernel positions; empty: none
  std::string spool_dir;   // empty: no spools
  SpoolLimits spool_limits;
};

// Who a line is for, without parsing it: its sandbox (0: none), and whether
// it concerns every reader (a gap).
struct LineMeta {
  uint64_t sandbox_id = 0;
  bool every_sandbox = false;
};

// Occurrences the exporter wrote (records' counts), by what they were.
struct OccurrenceKey {
  uint8_t kind, action, reason;
  auto operator<=>(const OccurrenceKey&) const = default;
};

class Exporter {
 public:
  // The record parsed back from its line: for callers that want the object
  // (tests); the exporter itself never builds one per kernel record.
  using Sink = std::function<void(const nlohmann::json& record, const std::string& line)>;
  // The hot path's sink: each line (no newline) as it is numbered.
  using LineSink = std::function<void(const LineMeta& meta, const std::string& line)>;

  static absl::StatusOr<std::unique_ptr<Exporter>> Create(const Paths& paths, ExporterOptions options,
                                                          Sink sink);
  static absl::StatusOr<std::unique_ptr<Exporter>> Create(const Paths& paths, ExporterOptions options,
                                                          LineSink sink);

  absl::Status OnEvent(const egr_event& e);
  // The window's summaries and losses, the gaps no record filled within a
  // window; then the state is saved and the spools' progress mark moved to
  // `closed_boot_ns` (every occurrence before it is written).
  absl::Status OnWindow(const maps::WindowCounts& w, uint64_t closed_boot_ns);
  // A record of a user-space source (user_events.h: DNS, lifecycle, channel
  // losses), numbered in the same sequence; its sandbox's labels are added
  // when the record has none.
  absl::Status OnUserRecord(nlohmann::json record);
  // How far each pending file was read: saved with the state.
  nlohmann::json& pending_offsets() { return pending_; }
  // Writes what is buffered for the spools: one write() per spool per batch
  // (OnWindow flushes too, before it moves the progress mark).
  absl::Status Flush();

  uint64_t seq() const { return seq_; }
  // Occurrences written so far as records' counts and losses, per sandbox.
  const std::map<uint64_t, uint64_t>& counted() const { return counted_; }
  const std::map<uint64_t, uint64_t>& lost() const { return lost_; }
  // The same per sandbox by what they were (the daemon's GET
  // /v1/sandboxes/{id} counters): since this reader started; null: none yet.
  const std::map<OccurrenceKey, uint64_t>* SandboxOccurrences(uint64_t id) const {
    auto it = by_sandbox_.find(id);
    return it == by_sandbox_.end() ? nullptr : &it->second;
  }
  // Since the instance's first reader (kept in the state file).
  const std::map<OccurrenceKey, uint64_t>& occurrences() const { return occurrences_; }
  uint64_t lost_total() const { return lost_total_; }
  uint64_t gap_total() const { return gap_total_; }

 private:
  Exporter(const Paths& paths, ExporterOptions options, LineSink sink);
  absl::Status LoadState();
  absl::Status SaveState() const;
  // A record built as an object (losses, gaps; any user-space source).
  absl::Status Emit(nlohmann::json record, uint64_t sandbox_id, bool every_spool);
  // line_ holds a numbered line: to the sink and the spools' buffers.
  absl::Status EmitLine(uint64_t sandbox_id, bool every_spool);
  absl::Status Spool(uint64_t id);
  const std::optional<SandboxInfo>& Sandbox(uint64_t id);
  struct SandboxCache {
    std::optional<SandboxInfo> info;
    EncodedSandbox encoded;
    uint64_t* counted = nullptr;
    std::map<OccurrenceKey, uint64_t>* tally = nullptr;  // in by_sandbox_
    // The record file as loaded (inode, mtime), and the window it was last
    // compared in: a record rewritten (a policy flip, the pid namespace
    // recorded) is read again at its sandbox's first line of a window.
    uint64_t record_ino = 0;
    int64_t record_mtime_ns = -1;
    uint64_t checked_window = ~0ull;
  };
  void Refresh(uint64_t id, SandboxCache& c, bool fresh);
  SandboxCache& Cached(uint64_t id);
  uint64_t Realtime(uint64_t boot_ns) const { return boot_ns + offset_ns_; }
  void RefreshClock();

  struct CpuSeq {
    uint64_t next = 0;                   // 0: nothing seen yet
    std::map<uint64_t, int> missing;     // seq -> windows it has been missing
  };

  struct SpoolFile {
    SpoolWriter writer;
    std::string pending;  // whole lines not written yet
  };

  Paths paths_;
  // What user space adds to a kernel record (record.h Enrichment).
  Enrichment Enrich(const SandboxCache& sb, const egr_event_key& k, const egr_event_task& t, uint16_t flags,
                    uint32_t match_id, uint64_t boot_ns);
  // destination_names: the query names of the DNS records ingested that
  // learned `k`'s address for this sandbox under the name id that allowed
  // it, and an exact rule's own name.  false: none known yet for a wildcard
  // rule (its DNS record may still be on its way).
  bool DestinationNames(const SandboxCache& sb, const egr_event_key& k, uint32_t match_id,
                        std::vector<std::string>& out) const;
  void Learn(const nlohmann::json& dns_record);
  void Forget(uint64_t sandbox_id);
  absl::Status EmitEvent(const egr_event& e, bool may_defer);
  // Spools of sandboxes that are gone (spool.h RemoveSpool): see OnWindow.
  absl::Status RemoveGoneSpools();

  ExporterOptions options_;
  LineSink sink_;
  control::SandboxRecords records_;
  // A sandbox without a record is looked up again at the next window.
  std::map<uint64_t, SandboxCache> sandboxes_;
  SandboxCache* last_sandbox_ = nullptr;
  uint64_t last_sandbox_id_ = 0;
  std::map<uint32_t, CpuSeq> cpus_;
  std::map<uint64_t, SpoolFile> spools_;  // 0: all.jsonl
  std::map<uint64_t, uint64_t> counted_, lost_;
  std::map<OccurrenceKey, uint64_t> occurrences_;
  std::map<uint64_t, std::map<OccurrenceKey, uint64_t>> by_sandbox_;
  std::map<std::pair<std::string, std::string>, uint64_t> dns_queries_;  // ExportTotals::dns_queries
  std::map<std::string, uint64_t> dns_bounds_;                            // ExportTotals::dns_bounds
  uint64_t lost_total_ = 0, gap_total_ = 0;  // since the first reader
  std::string line_;  // reused for every line
  uint64_t seq_ = 0;
  uint64_t offset_ns_ = 0;  // CLOCK_REALTIME - CLOCK_BOOTTIME
  nlohmann::json pending_ = nlohmann::json::object();
  uint64_t window_ = 0;  // windows closed
  NsPids ns_pids_;
  // (sandbox, address) -> name id -> query names, from ingested DNS records;
  // the oldest addresses forgotten beyond kMaxLearned.
  std::map<std::pair<uint64_t, std::string>, std::map<uint32_t, std::set<std::string>>> learned_;
  // tc records' interface names by ifindex (if_indextoname in this netns,
  // the node's), forgotten every window: an index may be reused.
  const std::optional<std::string>& InterfaceName(uint32_t ifindex);
  std::map<uint32_t, std::optional<std::string>> ifnames_;
  std::deque<std::pair<uint64_t, std::string>> learned_order_;
  // Resolved-name records waiting for their DNS record until the window's end.
  std::vector<egr_event> deferred_;
  std::vector<NsIds> deferred_ns_;  // their ids, found when they came
  // Sandbox spools: the window each was last written in.
  std::map<uint64_t, uint64_t> spool_written_;
  bool spools_scanned_ = false;
};

// What the instance's readers exported so far, as the state file keeps it
// (saved at the end of every window): lines, occurrences by what they were,
// losses and gaps reported.  No state file: all zero.
struct ExportTotals {
  uint64_t lines = 0;
  uint64_t lost = 0;
  uint64_t gaps = 0;
  std::map<OccurrenceKey, uint64_t> occurrences;
  // The DNS proxy's query records exported, by (verdict, rcode name; "none"
  // when no answer was sent).
  std::map<std::pair<std::string, std::string>, uint64_t> dns_queries;
  // Addresses the proxy's bounds acted on, from the DNS records: "evicted"
  // (dns.evicted), "name-cap" and "sandbox-quota" (dns.refused, not learned).
  std::map<std::string, uint64_t> dns_bounds;
};
absl::StatusOr<ExportTotals> ReadExportTotals(const std::string& state_path);
// <runtime_dir>/audit/state.json
std::string StatePath(const Paths& paths);

// The spools' progress mark: every occurrence before this boot time is in
// the spools.  0 when none was written.
uint64_t ReadProgress(const Paths& paths);
uint64_t BootNowNs();

}  // namespace egressd::audit
