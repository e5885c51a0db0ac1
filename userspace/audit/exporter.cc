#include "userspace/audit/exporter.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <vector>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "userspace/audit/reader_lock.h"
#include "userspace/audit/user_events.h"
#include "userspace/common/errors.h"

namespace egressd::audit {
namespace {

// A jump this far ahead is not reordering between CPUs: written as a gap at
// once rather than remembered number by number.
constexpr uint64_t kMaxPendingGap = 65536;

uint64_t ClockNs(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("create ", tmp));
  UniqueFd f(fd);
  if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    return ErrnoStatus(errno, absl::StrCat("write ", tmp));
  if (fsync(fd) != 0) return ErrnoStatus(errno, absl::StrCat("fsync ", tmp));
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus(errno, absl::StrCat("rename to ", path));
  return absl::OkStatus();
}

std::string ProgressPath(const Paths& paths) { return SpoolDir(paths) + "/progress"; }

}  // namespace

uint64_t BootNowNs() { return ClockNs(CLOCK_BOOTTIME); }

uint64_t ReadProgress(const Paths& paths) {
  std::ifstream in(ProgressPath(paths));
  uint64_t v = 0;
  if (in) in >> v;
  return v;
}

Exporter::Exporter(const Paths& paths, ExporterOptions options, Sink sink)
    : paths_(paths), options_(std::move(options)), sink_(std::move(sink)), records_(paths) {}

absl::StatusOr<std::unique_ptr<Exporter>> Exporter::Create(const Paths& paths, ExporterOptions options,
                                                           Sink sink) {
  std::unique_ptr<Exporter> x(new Exporter(paths, std::move(options), std::move(sink)));
  x->RefreshClock();
  EGR_RETURN_IF_ERROR(x->LoadState());
  return x;
}

void Exporter::RefreshClock() { offset_ns_ = ClockNs(CLOCK_REALTIME) - ClockNs(CLOCK_BOOTTIME); }

absl::Status Exporter::LoadState() {
  if (options_.state_path.empty()) return absl::OkStatus();
  std::ifstream in(options_.state_path);
  if (!in) return absl::OkStatus();  // first run
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::DataLossError(absl::StrCat(options_.state_path, ": not the audit state (JSON object)"));
  }
  seq_ = j.value("seq", uint64_t{0});
  if (j.contains("cpus")) {
    for (auto& [cpu, next] : j["cpus"].items()) cpus_[std::stoul(cpu)].next = next.get<uint64_t>();
  }
  if (j.contains("pending") && j["pending"].is_object()) pending_ = j["pending"];
  return absl::OkStatus();
}

absl::Status Exporter::SaveState() const {
  if (options_.state_path.empty()) return absl::OkStatus();
  nlohmann::json j;
  j["seq"] = seq_;
  j["cpus"] = nlohmann::json::object();
  for (const auto& [cpu, s] : cpus_) {
    // A number still missing is where the next reader resumes looking.
    uint64_t next = s.missing.empty() ? s.next : s.missing.begin()->first;
    j["cpus"][std::to_string(cpu)] = next;
  }
  j["pending"] = pending_;
  return WriteFileAtomically(options_.state_path, j.dump() + "\n");
}

const std::optional<SandboxInfo>& Exporter::Sandbox(uint64_t id) {
  auto it = sandboxes_.find(id);
  if (it != sandboxes_.end() && it->second) return it->second;
  std::optional<SandboxInfo> info;
  auto rec = records_.Load(id);
  if (rec.ok() && rec->has_value()) info = SandboxInfo{(*rec)->labels};
  // A sandbox without a record yet is looked up again next time.
  return sandboxes_[id] = std::move(info);
}

absl::Status Exporter::Emit(nlohmann::json record, uint64_t sandbox_id, bool every_spool) {
  const std::string line = Line(record, ++seq_);
  if (sink_) sink_(record, line);
  if (options_.spool_dir.empty()) return absl::OkStatus();
  const std::string text = line + "\n";
  auto spool = [&](uint64_t id) -> absl::Status {
    auto it = spools_.find(id);
    if (it == spools_.end()) {
      const std::string path = SpoolPath(paths_, id);
      int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
      if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open spool ", path));
      it = spools_.emplace(id, UniqueFd(fd)).first;
    }
    // One write of a whole line on an O_APPEND file: a tailing reader
    // never sees half of one line followed by another.
    if (write(it->second.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      return ErrnoStatus(errno, absl::StrCat("write spool ", SpoolPath(paths_, id)));
    return absl::OkStatus();
  };
  EGR_RETURN_IF_ERROR(spool(0));
  if (every_spool) {
    std::vector<uint64_t> ids;
    for (const auto& [id, fd] : spools_) {
      if (id) ids.push_back(id);
    }
    for (uint64_t id : ids) EGR_RETURN_IF_ERROR(spool(id));
  } else if (sandbox_id) {
    EGR_RETURN_IF_ERROR(spool(sandbox_id));
  }
  return absl::OkStatus();
}

absl::Status Exporter::OnEvent(const egr_event& e) {
  CpuSeq& c = cpus_[e.cpu];
  if (c.next == 0 || e.seq == c.next) {
    c.next = e.seq + 1;
  } else if (e.seq > c.next) {
    if (e.seq - c.next > kMaxPendingGap) {
      EGR_RETURN_IF_ERROR(Emit(GapJson(e.cpu, c.next, e.seq - 1, Realtime(BootNowNs())), 0, true));
    } else {
      for (uint64_t s = c.next; s < e.seq; ++s) c.missing.emplace(s, 0);
    }
    c.next = e.seq + 1;
  } else if (c.missing.erase(e.seq) == 0) {
    // Behind and never missing: the pins were made anew (unload, load).
    c.missing.clear();
    c.next = e.seq + 1;
  }
  counted_[e.key.sandbox_id] += 1;
  return Emit(EventJson(e, Realtime(e.boot_ns), Sandbox(e.key.sandbox_id)), e.key.sandbox_id, false);
}

absl::Status Exporter::OnUserRecord(nlohmann::json record) {
  uint64_t id = 0;
  if (record.contains("sandbox") && record["sandbox"].is_object()) id = record["sandbox"].value("id", uint64_t{0});
  if (id && !record["sandbox"].contains("labels")) AddSandboxLabels(record, Sandbox(id));
  record["schema"] = kSchema;
  return Emit(std::move(record), id, false);
}

absl::Status Exporter::OnWindow(const maps::WindowCounts& w, uint64_t closed_boot_ns) {
  RefreshClock();
  const uint64_t now = Realtime(BootNowNs());
  for (const auto& [k, v] : w.folds) {
    counted_[k.sandbox_id] += v.count;
    EGR_RETURN_IF_ERROR(
        Emit(SummaryJson(k, v, Realtime(v.first_boot_ns), now, Sandbox(k.sandbox_id)), k.sandbox_id, false));
  }
  for (size_t i = 0; i < w.loss_keys.size(); ++i) {
    const uint64_t id = w.loss_keys[i].sandbox_id;
    lost_[id] += w.lost[i];
    EGR_RETURN_IF_ERROR(Emit(LossJson(id, w.lost[i], now, Sandbox(id)), id, false));
  }
  // A number missing for a whole window is not late: it is gone.
  for (auto& [cpu, c] : cpus_) {
    std::vector<uint64_t> gone;
    for (auto& [s, age] : c.missing) {
      if (age++ >= 1) gone.push_back(s);
    }
    for (size_t i = 0; i < gone.size();) {
      size_t j = i;
      while (j + 1 < gone.size() && gone[j + 1] == gone[j] + 1) ++j;
      EGR_RETURN_IF_ERROR(Emit(GapJson(cpu, gone[i], gone[j], now), 0, true));
      i = j + 1;
    }
    for (uint64_t s : gone) c.missing.erase(s);
  }
  EGR_RETURN_IF_ERROR(SaveState());
  if (!options_.spool_dir.empty()) {
    EGR_RETURN_IF_ERROR(WriteFileAtomically(ProgressPath(paths_), absl::StrCat(closed_boot_ns, "\n")));
  }
  return absl::OkStatus();
}

}  // namespace egressd::audit
