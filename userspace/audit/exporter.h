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
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "maps/egressd_abi.h"
#include "maps/event_ring.h"
#include "userspace/audit/record.h"
#include "userspace/common/node.h"
#include "userspace/common/unique_fd.h"
#include "userspace/control/sandbox_record.h"

namespace egressd::audit {

struct ExporterOptions {
  std::string state_path;  // persisted seq and kernel positions; empty: none
  std::string spool_dir;   // empty: no spools
};

class Exporter {
 public:
  using Sink = std::function<void(const nlohmann::json& record, const std::string& line)>;

  static absl::StatusOr<std::unique_ptr<Exporter>> Create(const Paths& paths, ExporterOptions options,
                                                          Sink sink);

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

  uint64_t seq() const { return seq_; }
  // Occurrences written so far as records' counts and losses, per sandbox.
  const std::map<uint64_t, uint64_t>& counted() const { return counted_; }
  const std::map<uint64_t, uint64_t>& lost() const { return lost_; }

 private:
  Exporter(const Paths& paths, ExporterOptions options, Sink sink);
  absl::Status LoadState();
  absl::Status SaveState() const;
  absl::Status Emit(nlohmann::json record, uint64_t sandbox_id, bool every_spool);
  const std::optional<SandboxInfo>& Sandbox(uint64_t id);
  uint64_t Realtime(uint64_t boot_ns) const { return boot_ns + offset_ns_; }
  void RefreshClock();

  struct CpuSeq {
    uint64_t next = 0;                   // 0: nothing seen yet
    std::map<uint64_t, int> missing;     // seq -> windows it has been missing
  };

  Paths paths_;
  ExporterOptions options_;
  Sink sink_;
  control::SandboxRecords records_;
  std::map<uint64_t, std::optional<SandboxInfo>> sandboxes_;
  std::map<uint32_t, CpuSeq> cpus_;
  std::map<uint64_t, UniqueFd> spools_;  // 0: all.jsonl
  std::map<uint64_t, uint64_t> counted_, lost_;
  uint64_t seq_ = 0;
  uint64_t offset_ns_ = 0;  // CLOCK_REALTIME - CLOCK_BOOTTIME
  nlohmann::json pending_ = nlohmann::json::object();
};

// The spools' progress mark: every occurrence before this boot time is in
// the spools.  0 when none was written.
uint64_t ReadProgress(const Paths& paths);
uint64_t BootNowNs();

}  // namespace egressd::audit
