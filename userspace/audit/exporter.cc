#include "userspace/audit/exporter.h"

#include <dirent.h>
#include <net/if.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <vector>

#include <spdlog/spdlog.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "userspace/audit/reader_lock.h"
#include "userspace/audit/user_events.h"
#include "userspace/common/errors.h"
#include "userspace/dns/scope.h"
#include "userspace/net/ip.h"

namespace egressd::audit {
namespace {

// A jump this far ahead is not reordering between CPUs: written as a gap at
// once rather than remembered number by number.
constexpr uint64_t kMaxPendingGap = 65536;
// destination_names: addresses remembered (the oldest forgotten first),
// names kept per address and name id, and records held back for their DNS
// record at most (beyond, written at once with what is known).
constexpr size_t kMaxLearned = 65536;
constexpr size_t kMaxNamesPerAddress = 16;
constexpr size_t kMaxDeferred = 65536;

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

Exporter::Exporter(const Paths& paths, ExporterOptions options, LineSink sink)
    : paths_(paths), options_(std::move(options)), sink_(std::move(sink)), records_(paths) {
  line_.reserve(1024);
}

absl::StatusOr<std::unique_ptr<Exporter>> Exporter::Create(const Paths& paths, ExporterOptions options,
                                                           LineSink sink) {
  std::unique_ptr<Exporter> x(new Exporter(paths, std::move(options), std::move(sink)));
  x->RefreshClock();
  EGR_RETURN_IF_ERROR(x->LoadState());
  return x;
}

absl::StatusOr<std::unique_ptr<Exporter>> Exporter::Create(const Paths& paths, ExporterOptions options,
                                                           Sink sink) {
  LineSink parsed;
  if (sink) {
    parsed = [sink = std::move(sink)](const LineMeta&, const std::string& line) {
      sink(nlohmann::json::parse(line), line);
    };
  }
  return Create(paths, std::move(options), std::move(parsed));
}

void Exporter::RefreshClock() { offset_ns_ = ClockNs(CLOCK_REALTIME) - ClockNs(CLOCK_BOOTTIME); }

namespace {

absl::StatusOr<nlohmann::json> ReadState(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json::object();  // first run
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::DataLossError(absl::StrCat(path, ": not the audit state (JSON object)"));
  }
  return j;
}

void ReadTotals(const nlohmann::json& j, ExportTotals& t) {
  t.lines = j.value("seq", uint64_t{0});
  t.lost = j.value("lost_total", uint64_t{0});
  t.gaps = j.value("gap_total", uint64_t{0});
  // [kind, action, reason, occurrences] rows; absent in older state files.
  if (j.contains("occurrences") && j["occurrences"].is_array()) {
    for (const auto& row : j["occurrences"]) {
      if (!row.is_array() || row.size() != 4) continue;
      t.occurrences[{row[0].get<uint8_t>(), row[1].get<uint8_t>(), row[2].get<uint8_t>()}] = row[3].get<uint64_t>();
    }
  }
  // [verdict, rcode, queries] rows; absent in older state files.
  if (j.contains("dns_queries") && j["dns_queries"].is_array()) {
    for (const auto& row : j["dns_queries"]) {
      if (!row.is_array() || row.size() != 3) continue;
      t.dns_queries[{row[0].get<std::string>(), row[1].get<std::string>()}] = row[2].get<uint64_t>();
    }
  }
  // {outcome: addresses}; absent in older state files.
  if (j.contains("dns_bounds") && j["dns_bounds"].is_object()) {
    for (const auto& [k, v] : j["dns_bounds"].items()) t.dns_bounds[k] = v.get<uint64_t>();
  }
}

}  // namespace

std::string StatePath(const Paths& paths) { return AuditDir(paths) + "/state.json"; }

absl::StatusOr<ExportTotals> ReadExportTotals(const std::string& state_path) {
  EGR_ASSIGN_OR_RETURN(nlohmann::json j, ReadState(state_path));
  ExportTotals t;
  try {
    ReadTotals(j, t);
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(state_path, ": ", e.what()));
  }
  return t;
}

// The `seq` of the last whole line of `path`; 0 when there is none (no file,
// empty, unreadable).  A line is far shorter than the 1 MiB read.
static uint64_t LastSeqIn(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (!fd.valid() || fstat(fd.get(), &st) != 0 || st.st_size <= 0) return 0;
  const off_t want = std::min<off_t>(st.st_size, off_t{1} << 20);
  std::string buf(static_cast<size_t>(want), '\0');
  const ssize_t n = pread(fd.get(), buf.data(), buf.size(), st.st_size - want);
  if (n <= 0) return 0;
  buf.resize(static_cast<size_t>(n));
  const size_t end = buf.rfind('\n');
  if (end == std::string::npos || end == 0) return 0;
  size_t start = buf.rfind('\n', end - 1);
  if (start == std::string::npos) {
    if (want < st.st_size) return 0;  // the line began before what was read
    start = 0;
  } else {
    ++start;
  }
  auto j = nlohmann::json::parse(buf.substr(start, end - start), nullptr, false);
  return j.is_object() ? j.value("seq", uint64_t{0}) : 0;
}

absl::Status Exporter::LoadState() {
  if (options_.state_path.empty()) return absl::OkStatus();
  EGR_ASSIGN_OR_RETURN(nlohmann::json j, ReadState(options_.state_path));
  ExportTotals t;
  ReadTotals(j, t);
  seq_ = t.lines;
  lost_total_ = t.lost;
  gap_total_ = t.gaps;
  occurrences_ = std::move(t.occurrences);
  dns_queries_ = std::move(t.dns_queries);
  dns_bounds_ = std::move(t.dns_bounds);
  if (j.contains("cpus")) {
    for (auto& [cpu, next] : j["cpus"].items()) cpus_[std::stoul(cpu)].next = next.get<uint64_t>();
  }
  if (j.contains("pending") && j["pending"].is_object()) pending_ = j["pending"];
  // The state is saved when a window closes; a holder killed mid-window had
  // already written lines numbered past it to the spools.  Numbering on from
  // the state would give those numbers twice: go on after the spool's last
  // line (all.jsonl, or its rotated predecessor when a rotation just
  // emptied it).  What that holder took off the ring since the save is
  // reported as a gap (its kernel positions are the state's): more said than
  // lost, never less.
  if (!options_.spool_dir.empty()) {
    const std::string all = SpoolPath(paths_, 0);
    uint64_t spooled = LastSeqIn(all);
    if (spooled == 0) spooled = LastSeqIn(all + ".1");
    if (spooled > seq_) {
      spdlog::warn("audit: the spool ends at seq {}, the saved state at {} (the last reader stopped mid-window): "
                   "numbering on from {}",
                   spooled, seq_, spooled + 1);
      seq_ = spooled;
    }
  }
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
  j["occurrences"] = nlohmann::json::array();
  for (const auto& [k, n] : occurrences_) j["occurrences"].push_back({k.kind, k.action, k.reason, n});
  j["dns_queries"] = nlohmann::json::array();
  for (const auto& [k, n] : dns_queries_) j["dns_queries"].push_back({k.first, k.second, n});
  j["dns_bounds"] = nlohmann::json::object();
  for (const auto& [k, n] : dns_bounds_) j["dns_bounds"][k] = n;
  j["lost_total"] = lost_total_;
  j["gap_total"] = gap_total_;
  return WriteFileAtomically(options_.state_path, j.dump() + "\n");
}

void Exporter::Refresh(uint64_t id, SandboxCache& c, bool fresh) {
  c.checked_window = window_;
  struct stat st;
  if (stat(records_.PathOf(id).c_str(), &st) != 0) {
    // No record yet (asked again next window), or none any more: a removed
    // sandbox's last lines keep the labels it had.
    if (fresh) c.encoded = EncodeSandbox(id, c.info);
    return;
  }
  const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (c.info && st.st_ino == c.record_ino && mtime == c.record_mtime_ns) return;
  auto rec = records_.Load(id);
  if (rec.ok() && rec->has_value()) {
    c.info = SandboxInfo{(*rec)->labels, {}, (*rec)->pidns_dev, (*rec)->pidns_inode};
    // The names of the policy in force and, during a flip, of the one
    // before: a record of either may be read now.
    for (const control::PolicyRef* ref : {&(*rec)->current, (*rec)->previous ? &*(*rec)->previous : nullptr}) {
      if (ref && ref->policy) c.info->names.merge(NameRulesById(*ref->policy));
    }
    c.record_ino = st.st_ino;
    c.record_mtime_ns = mtime;
  }
  c.encoded = EncodeSandbox(id, c.info);
}

Exporter::SandboxCache& Exporter::Cached(uint64_t id) {
  if (last_sandbox_ && last_sandbox_id_ == id) return *last_sandbox_;
  auto [it, fresh] = sandboxes_.try_emplace(id);
  SandboxCache& c = it->second;
  if (fresh) c.counted = &counted_[id];
  if (fresh) c.tally = &by_sandbox_[id];
  if (fresh || c.checked_window != window_) Refresh(id, c, fresh);
  last_sandbox_ = &c;
  last_sandbox_id_ = id;
  return c;
}

const std::optional<SandboxInfo>& Exporter::Sandbox(uint64_t id) { return Cached(id).info; }

absl::Status Exporter::Emit(nlohmann::json record, uint64_t sandbox_id, bool every_spool) {
  line_ = Line(record, ++seq_);
  return EmitLine(sandbox_id, every_spool);
}

absl::Status Exporter::EmitLine(uint64_t sandbox_id, bool every_spool) {
  if (sink_) sink_(LineMeta{sandbox_id, every_spool}, line_);
  if (options_.spool_dir.empty()) return absl::OkStatus();
  line_.push_back('\n');
  EGR_RETURN_IF_ERROR(Spool(0));
  if (every_spool) {
    std::vector<uint64_t> ids;
    for (const auto& [id, f] : spools_) {
      if (id) ids.push_back(id);
    }
    for (uint64_t id : ids) EGR_RETURN_IF_ERROR(Spool(id));
  } else if (sandbox_id) {
    EGR_RETURN_IF_ERROR(Spool(sandbox_id));
  }
  return absl::OkStatus();
}

absl::Status Exporter::Spool(uint64_t id) {
  auto it = spools_.find(id);
  if (it == spools_.end()) {
    it = spools_.emplace(id, SpoolFile{SpoolWriter(SpoolPath(paths_, id), options_.spool_limits), {}}).first;
  }
  it->second.pending += line_;
  if (id) spool_written_[id] = window_;
  // A batch is written whole at Flush(); a very large one in pieces of
  // whole lines.
  if (it->second.pending.size() >= (1u << 20)) return Flush();
  return absl::OkStatus();
}

absl::Status Exporter::Flush() {
  for (auto& [id, f] : spools_) {
    if (f.pending.empty()) continue;
    // One write of whole lines on an O_APPEND file, rotation only between
    // batches: a tailing reader never sees half of one line.
    EGR_RETURN_IF_ERROR(f.writer.Append(f.pending));
    f.pending.clear();
  }
  return absl::OkStatus();
}

absl::Status Exporter::OnEvent(const egr_event& e) {
  CpuSeq& c = cpus_[e.cpu];
  if (c.next == 0 || e.seq == c.next) {
    c.next = e.seq + 1;
  } else if (e.seq > c.next) {
    if (e.seq - c.next > kMaxPendingGap) {
      gap_total_ += e.seq - c.next;
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
  return EmitEvent(e, true);
}

Enrichment Exporter::Enrich(const SandboxCache& sb, const egr_event_key& k, const egr_event_task& t,
                            uint16_t flags, uint32_t match_id, uint64_t boot_ns) {
  Enrichment x;
  if ((flags & EGR_EVENT_HAS_TASK) && sb.info && sb.info->pidns_inode) {
    NsIds ids = ns_pids_.Lookup(t.tgid, t.pid, t.cgroup_id, boot_ns, {sb.info->pidns_dev, sb.info->pidns_inode});
    x.ns_pid = ids.pid;
    x.ns_tid = ids.tid;
  }
  if (k.reason == EGR_REASON_RESOLVED && match_id) DestinationNames(sb, k, match_id, x.destination_names);
  if (k.ifindex) x.interface_name = InterfaceName(k.ifindex);
  return x;
}

const std::optional<std::string>& Exporter::InterfaceName(uint32_t ifindex) {
  auto [it, fresh] = ifnames_.try_emplace(ifindex);
  if (fresh) {
    char name[IF_NAMESIZE] = {};
    if (if_indextoname(ifindex, name)) it->second = std::string(name);
  }
  return it->second;
}

bool Exporter::DestinationNames(const SandboxCache& sb, const egr_event_key& k, uint32_t match_id,
                                std::vector<std::string>& out) const {
  std::set<std::string> names;
  if (sb.info) {
    auto rule = sb.info->names.find(match_id);
    // An exact rule's id is written only for answers to that very name.
    if (rule != sb.info->names.end() && !absl::StartsWith(rule->second, "*.")) names.insert(rule->second);
  }
  std::array<uint8_t, 16> b;
  __builtin_memcpy(b.data(), k.daddr, 16);
  if (auto it = learned_.find({k.sandbox_id, net::IpAddr::V6(b).ToString()}); it != learned_.end()) {
    if (auto n = it->second.find(match_id); n != it->second.end()) names.insert(n->second.begin(), n->second.end());
  }
  out.assign(names.begin(), names.end());
  return !out.empty();
}

void Exporter::Learn(const nlohmann::json& r) {
  if (!r.contains("dns") || !r["dns"].is_object() || !r.contains("sandbox") || !r["sandbox"].is_object()) return;
  const nlohmann::json& d = r["dns"];
  if (!d.contains("learned") || !d["learned"].is_array() || !d.contains("query") || !d["query"].is_string() ||
      !d.contains("rule") || !d["rule"].is_string()) {
    return;
  }
  const uint64_t id = r["sandbox"].value("id", uint64_t{0});
  std::string name = d["query"].get<std::string>();
  if (!name.empty() && name.back() == '.') name.pop_back();  // as match.name: no root label
  const uint32_t rule_id = dns::NameId(d["rule"].get<std::string>());
  for (const auto& l : d["learned"]) {
    if (!l.is_object() || !l.contains("ip") || !l["ip"].is_string()) continue;
    std::pair<uint64_t, std::string> key{id, l["ip"].get<std::string>()};
    auto [it, fresh] = learned_.try_emplace(key);
    if (fresh) learned_order_.push_back(std::move(key));
    std::set<std::string>& names = it->second[rule_id];
    if (names.size() < kMaxNamesPerAddress) names.insert(name);
  }
  while ((learned_.size() > kMaxLearned || learned_order_.size() > 2 * kMaxLearned) && !learned_order_.empty()) {
    learned_.erase(learned_order_.front());
    learned_order_.pop_front();
  }
}

void Exporter::Forget(uint64_t sandbox_id) {
  auto it = learned_.lower_bound({sandbox_id, std::string()});
  while (it != learned_.end() && it->first.first == sandbox_id) it = learned_.erase(it);
}

absl::Status Exporter::EmitEvent(const egr_event& e, bool may_defer) {
  SandboxCache& sb = Cached(e.key.sandbox_id);
  Enrichment x = Enrich(sb, e.key, e.task, e.flags, e.match_id, e.boot_ns);
  // A resolved address whose wildcard rule's DNS record has not been read
  // yet (the proxy writes it after its answer left, the holder ingests at
  // the window's end): the record waits for that window's end.
  if (may_defer && e.key.reason == EGR_REASON_RESOLVED && e.match_id && x.destination_names.empty() &&
      deferred_.size() < kMaxDeferred) {
    deferred_.push_back(e);
    deferred_ns_.push_back({x.ns_pid, x.ns_tid});
    return absl::OkStatus();
  }
  *sb.counted += 1;
  ++occurrences_[{e.key.kind, e.key.action, e.key.reason}];
  ++(*sb.tally)[{e.key.kind, e.key.action, e.key.reason}];
  line_.clear();
  AppendEventLine(line_, e, Realtime(e.boot_ns), sb.encoded, ++seq_, x);
  return EmitLine(e.key.sandbox_id, false);
}

absl::Status Exporter::OnUserRecord(nlohmann::json record) {
  uint64_t id = 0;
  if (record.contains("sandbox") && record["sandbox"].is_object()) id = record["sandbox"].value("id", uint64_t{0});
  if (id && !record["sandbox"].contains("labels")) AddSandboxLabels(record, Sandbox(id));
  record["schema"] = kSchema;
  const std::string type = record.value("type", "");
  if (type == "dns") Learn(record);
  if (type == "sandbox" && record.value("event", "") == "removed") Forget(id);
  if (type == "dns") {
    std::string rcode = "none";
    if (record.contains("dns") && record["dns"].is_object()) rcode = record["dns"].value("rcode_name", rcode);
    ++dns_queries_[{record.value("verdict", "unknown"), rcode}];
    // What the learned-address bounds did (docs/dns.md, "Bounds").
    if (record.contains("dns") && record["dns"].is_object()) {
      const nlohmann::json& d = record["dns"];
      if (d.contains("evicted") && d["evicted"].is_array()) dns_bounds_["evicted"] += d["evicted"].size();
      if (d.contains("refused") && d["refused"].is_array()) {
        for (const auto& r : d["refused"]) {
          const std::string why = r.is_object() ? r.value("why", "") : "";
          if (why == "name-cap" || why == "sandbox-quota") ++dns_bounds_[why];
        }
      }
    }
  }
  return Emit(std::move(record), id, false);
}

absl::Status Exporter::OnWindow(const maps::WindowCounts& w, uint64_t closed_boot_ns) {
  RefreshClock();
  ifnames_.clear();
  const uint64_t now = Realtime(BootNowNs());
  // Held back for their DNS records, which are read now (IngestPending ran
  // before this): written with the names known, the ids found then.
  std::vector<egr_event> deferred;
  std::vector<NsIds> deferred_ns;
  deferred.swap(deferred_);
  deferred_ns.swap(deferred_ns_);
  for (size_t i = 0; i < deferred.size(); ++i) {
    const egr_event& e = deferred[i];
    SandboxCache& sb = Cached(e.key.sandbox_id);
    Enrichment x;
    x.ns_pid = deferred_ns[i].pid;
    x.ns_tid = deferred_ns[i].tid;
    DestinationNames(sb, e.key, e.match_id, x.destination_names);
    if (e.key.ifindex) x.interface_name = InterfaceName(e.key.ifindex);
    *sb.counted += 1;
    ++occurrences_[{e.key.kind, e.key.action, e.key.reason}];
    ++(*sb.tally)[{e.key.kind, e.key.action, e.key.reason}];
    line_.clear();
    AppendEventLine(line_, e, Realtime(e.boot_ns), sb.encoded, ++seq_, x);
    EGR_RETURN_IF_ERROR(EmitLine(e.key.sandbox_id, false));
  }
  for (const auto& [k, v] : w.folds) {
    SandboxCache& sb = Cached(k.sandbox_id);
    *sb.counted += v.count;
    occurrences_[{k.kind, k.action, k.reason}] += v.count;
    (*sb.tally)[{k.kind, k.action, k.reason}] += v.count;
    const Enrichment x = Enrich(sb, k, v.task, v.flags, v.match_id, v.first_boot_ns);
    line_.clear();
    AppendSummaryLine(line_, k, v, Realtime(v.first_boot_ns), now, sb.encoded, ++seq_, x);
    EGR_RETURN_IF_ERROR(EmitLine(k.sandbox_id, false));
  }
  for (size_t i = 0; i < w.loss_keys.size(); ++i) {
    const uint64_t id = w.loss_keys[i].sandbox_id;
    lost_[id] += w.lost[i];
    lost_total_ += w.lost[i];
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
      gap_total_ += gone[j] - gone[i] + 1;
      i = j + 1;
    }
    for (uint64_t s : gone) c.missing.erase(s);
  }
  EGR_RETURN_IF_ERROR(Flush());
  EGR_RETURN_IF_ERROR(SaveState());
  // Records are compared with their files again (Refresh), task ids asked
  // again, at their first use in the next window.
  ++window_;
  last_sandbox_ = nullptr;
  ns_pids_.NewWindow();
  if (!options_.spool_dir.empty()) EGR_RETURN_IF_ERROR(RemoveGoneSpools());
  if (!options_.spool_dir.empty()) {
    EGR_RETURN_IF_ERROR(WriteFileAtomically(ProgressPath(paths_), absl::StrCat(closed_boot_ns, "\n")));
  }
  return absl::OkStatus();
}

absl::Status Exporter::RemoveGoneSpools() {
  if (!spools_scanned_) {
    // What earlier holders spooled: "<id>.jsonl" and its rotations.
    spools_scanned_ = true;
    if (DIR* d = opendir(options_.spool_dir.c_str())) {
      while (const dirent* e = readdir(d)) {
        absl::string_view n = e->d_name;
        const size_t dot = n.find(".jsonl");
        uint64_t id;
        if (dot == absl::string_view::npos || !absl::SimpleAtoi(n.substr(0, dot), &id) || id == 0) continue;
        // As if written in the window before this holder's first: removed
        // (when gone) at the end of its second.
        spool_written_.try_emplace(id, window_ - 1);
      }
      closedir(d);
    }
  }
  for (auto it = spool_written_.begin(); it != spool_written_.end();) {
    const uint64_t id = it->first;
    // Written in the window just closed: what that window folded may still
    // be on its way; and a sandbox with a record is not gone.
    if (it->second + 2 > window_ || access(records_.PathOf(id).c_str(), F_OK) == 0) {
      ++it;
      continue;
    }
    EGR_ASSIGN_OR_RETURN(bool removed, RemoveSpool(SpoolPath(paths_, id), options_.spool_limits.files));
    if (!removed) {
      ++it;  // a reader has it open: again next window
      continue;
    }
    spdlog::debug("audit: spool of removed sandbox {} removed", id);
    spools_.erase(id);
    it = spool_written_.erase(it);
  }
  return absl::OkStatus();
}

}  // namespace egressd::audit
