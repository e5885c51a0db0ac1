// audit_bench: the audit trail's export rate (issue 13's bench row) beside
// nftables logging each new connection, on the lab (tests/lab) with an
// egressd instance of its own (tests/priv/egressd_env.h).
//
//  1. drain: sandboxes make denied connects with no reader, each within its
//     budget (EGR_AUDIT_BURST) and together within the ring (nothing folded,
//     nothing lost); then `egressctl audit > /dev/null` takes them all off
//     the ring: records/s and CPU (user + system) per record of the exporter.
//     With EGRESSCTL_BASELINE=PATH the same for another egressctl binary, in
//     the same run (the ratio is the figure to read on a shared machine).
//  2. sustained: `egressctl audit --follow > /dev/null` reads while P sandboxes
//     at a time make denied connects, round after round, more than the ring
//     holds in total: the rate produced, and the kernel's counters of what was
//     recorded, folded and lost (zero loss and zero folding is the claim).
//  3. side by side with nftables logging each new connection (`ct state new
//     counter log group N` in the pod's netns), read by egr-nflog-reader
//     (bench/nflog_reader.cc, nfnetlink_log): the same allowed connects from
//     sandboxes seen by both readers at once, `egressctl audit --follow` and
//     the nflog reader, each writing a line per event.  For each: events
//     produced (the kernel's counters; the nft rule's counter), exported,
//     summarised and lost, and the reader's CPU per event; once with the
//     nflog instance's kernel defaults (what tcpdump -i nflog gets), once
//     tuned.  `--only nflog`: this row alone.
//
//   audit_bench [--quick] [--only nflog] [--out FILE.json]
// Prints a markdown table.  Never a pass/fail on a figure: exit 0 when
// every measurement ran.
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "egressd_env.h"

namespace egressd::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// utime + stime of a live process, seconds.
double ProcCpu(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  double ut = 0, st = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) ut = std::stod(field);
    if (i == 15) st = std::stod(field);
  }
  return (ut + st) / sysconf(_SC_CLK_TCK);
}

// Time on CPU of every thread of a live process, seconds, from the
// scheduler's nanosecond account (/proc/PID/task/TID/schedstat); the tick
// count of ProcCpu is too coarse for a few thousand events.
double TaskCpu(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(dir.c_str());
  if (!d) return ProcCpu(pid);
  double sum = 0;
  while (const dirent* t = readdir(d)) {
    if (t->d_name[0] == '.') continue;
    std::ifstream in(dir + "/" + t->d_name + "/schedstat");
    unsigned long long ns = 0;
    if (in >> ns) sum += ns / 1e9;
  }
  closedir(d);
  return sum;
}

std::map<std::string, long long> Counters(test::Egressd& e) {
  std::map<std::string, long long> c;
  lab::RunResult r = e.Ctl({"status", "--json"});
  json j = json::parse(r.out, nullptr, false);
  if (j.is_discarded() || !j.contains("counters")) return c;
  for (auto& [k, v] : j["counters"].items()) c[k] = v.get<long long>();
  return c;
}

long long Delta(const std::map<std::string, long long>& a, const std::map<std::string, long long>& b,
                const std::string& k) {
  auto ia = a.find(k), ib = b.find(k);
  return (ia == a.end() ? 0 : ia->second) - (ib == b.end() ? 0 : ib->second);
}

// P sandboxes side by side, each `tcp-burst` of k denied connects; true when
// every one ran and was refused.
bool DeniedWave(test::Egressd& e, int p, int k) {
  std::vector<lab::Background> runs;
  for (int i = 0; i < p; ++i) {
    auto bg = e.StartSandboxed({"--egress", lab::kPublicA4}, {"tcp-burst", lab::kPublicB4, "80", std::to_string(k)});
    if (!bg.ok()) return false;
    runs.push_back(*std::move(bg));
  }
  bool ok = true;
  for (auto& bg : runs) {
    lab::RunResult r = bg.Wait(std::chrono::seconds(120));
    const json line = json::parse(r.out.substr(0, r.out.find('\n')), nullptr, false);
    const bool refused = !line.is_discarded() && line.value("refused", -1LL) == k;
    ok &= r.exit_code == 0 && refused;
    if (!refused) std::fprintf(stderr, "audit_bench: sandbox run: %s\n", r.Describe().c_str());
  }
  return ok;
}

// `sh -c 'exec CMD > OUT'` in `netns` with the instance's env.
absl::StatusOr<lab::Background> StartQuiet(test::Egressd& e, const std::string& netns, const std::string& cmd,
                                           const std::string& out = "/dev/null", bool ctl_env = true) {
  lab::RunSpec spec;
  spec.argv = {"sh", "-c", "exec " + cmd + " > " + out};
  spec.netns = netns;
  if (ctl_env) spec.env = e.CtlEnv();
  spec.timeout = std::chrono::minutes(30);
  return lab::Start(spec);
}

struct Drain {
  long long records = 0, folded = 0, lost = 0;
  double wall_s = 0, cpu_s = 0;
  bool ok = false;
};

// Fills the ring (nothing folded: each sandbox stays within its burst), then
// times one `egressctl audit` taking it all off and writing it.
Drain MeasureDrain(test::Egressd& e, const std::string& ctl, int p, int k) {
  Drain d;
  e.Ctl({"audit"});  // whatever was queued before
  auto before = Counters(e);
  if (p > 0 && !DeniedWave(e, p, k)) return d;
  auto filled = Counters(e);
  d.records = Delta(filled, before, "event_submitted");
  d.folded = Delta(filled, before, "event_folded");
  d.lost = Delta(filled, before, "event_lost");
  lab::RunSpec spec;
  // AUDIT_BENCH_WRAP="perf record -g -o FILE --": the drain under a profiler
  // (FILE gets a suffix per binary).
  std::string cmd = ctl + " audit > /dev/null";
  if (const char* wrap = getenv("AUDIT_BENCH_WRAP"); wrap && p > 0) {
    std::string w = wrap;
    const size_t dash = w.rfind(" --");
    if (dash != std::string::npos) w.insert(dash, "." + std::to_string(ctl.size()));
    cmd = w + " " + cmd;
  }
  spec.argv = {"/usr/bin/time", "-f", "%e %U %S", "sh", "-c", "exec " + cmd};
  spec.netns = e.lab().node_netns();
  spec.env = e.CtlEnv();
  spec.timeout = std::chrono::minutes(5);
  lab::RunResult r = lab::Run(spec);
  double wall = 0, user = 0, sys = 0;
  const size_t last = r.err.rfind('\n', r.err.size() >= 2 ? r.err.size() - 2 : 0);
  const std::string tail = r.err.substr(last == std::string::npos ? 0 : last + 1);
  if (r.exit_code == 0 && std::sscanf(tail.c_str(), "%lf %lf %lf", &wall, &user, &sys) == 3) {
    d.wall_s = wall;
    d.cpu_s = user + sys;
    d.ok = true;
  } else {
    std::fprintf(stderr, "audit_bench: drain failed: %s\n", r.Describe().c_str());
  }
  return d;
}

struct Sustained {
  int parallel = 0;
  long long occurrences = 0, recorded = 0, folded = 0, lost = 0;
  double wall_s = 0, reader_cpu_s = 0;
  bool ok = false;
};

Sustained MeasureSustained(test::Egressd& e, int p, int k, int rounds) {
  Sustained s;
  s.parallel = p;
  e.Ctl({"audit"});
  auto before = Counters(e);
  auto reader = StartQuiet(e, e.lab().node_netns(), lab::BinaryPath("egressctl") + " audit --follow");
  if (!reader.ok()) return s;
  const double cpu0 = ProcCpu(reader->pid());
  const auto t0 = Clock::now();
  bool ok = true;
  for (int i = 0; i < rounds; ++i) ok &= DeniedWave(e, p, k);
  s.wall_s = Seconds(Clock::now() - t0);
  // The reader finishes what is on the ring and closes a last window on
  // SIGTERM; its CPU is read just before (the last window's is not counted).
  s.reader_cpu_s = ProcCpu(reader->pid()) - cpu0;
  kill(reader->pid(), SIGTERM);
  lab::RunResult r = reader->Wait(std::chrono::seconds(60));
  auto after = Counters(e);
  s.occurrences = static_cast<long long>(p) * k * rounds;
  s.recorded = Delta(after, before, "event_submitted");
  s.folded = Delta(after, before, "event_folded");
  s.lost = Delta(after, before, "event_lost");
  s.ok = ok && r.exit_code == 0;
  if (r.exit_code != 0) std::fprintf(stderr, "audit_bench: reader: %s\n", r.Describe().c_str());
  return s;
}

// nftables logging each new connection, the incumbent's audit trail: `ct
// state new counter log group N` in the pod's netns, read by
// egr-nflog-reader (bench/nflog_reader.cc) in that netns.  One config of
// the nflog instance and its socket.
struct NflogConfig {
  std::string name;
  std::vector<std::string> args;  // egr-nflog-reader's options
  bool tcpdump = false;           // the reader is `tcpdump -i nflog:N` instead
};

// One run of the same connects seen by both: egressd's exporter (`egressctl
// audit --follow`, the one reader of the ring) and the nflog reader.
struct SideBySide {
  std::string config;
  long long connects = 0;
  // egressd: the kernel's counters of the connects and their fates, and the
  // records the exporter wrote.
  long long egr_produced = 0, egr_recorded = 0, egr_folded = 0, egr_lost = 0, egr_exported = 0;
  double egr_cpu_s = 0, egr_idle_cpu_per_s = 0;
  // nft: the rule's counter (records asked for), the reader's figures.
  long long nft_produced = 0, nft_exported = 0, nft_seq_gaps = 0, nft_enobufs = 0, nft_socket_drops = 0;
  double nft_cpu_s = 0;
  double wall_s = 0;
  bool ok = false;
};

lab::RunResult NftIn(const std::string& netns, const std::vector<std::string>& args, const std::string& in = "") {
  lab::RunSpec spec;
  spec.argv = {"nft"};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.netns = netns;
  spec.stdin_data = in;
  return lab::Run(spec);
}

// The packets of the first counter of `table`'s rules; -1 when unreadable.
long long NftCounter(const std::string& netns, const std::string& table) {
  json j = json::parse(NftIn(netns, {"-j", "list", "table", "inet", table}).out, nullptr, false);
  if (!j.is_object() || !j.contains("nftables")) return -1;
  for (const auto& item : j["nftables"]) {
    if (!item.contains("rule")) continue;
    for (const auto& e : item["rule"]["expr"]) {
      if (e.contains("counter")) return e["counter"]["packets"].get<long long>();
    }
  }
  return -1;
}

off_t FileSize(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

// Both readers are done once neither output grew for 1.4 s: past nflog's
// default flush timeout (1 s: records wait in the kernel until 100 of them
// or the timer), and the exporter's window.
void WaitQuiet(const std::vector<std::string>& files, std::chrono::seconds limit) {
  const auto end = Clock::now() + limit;
  std::vector<off_t> last(files.size(), -2);
  int still = 0;
  while (Clock::now() < end && still < 7) {
    bool same = true;
    for (size_t i = 0; i < files.size(); ++i) {
      const off_t now = FileSize(files[i]);
      same &= now == last[i];
      last[i] = now;
    }
    still = same ? still + 1 : 0;
    poll(nullptr, 0, 200);
  }
}

SideBySide MeasureSideBySide(test::Egressd& e, const NflogConfig& cfg, int p, int k, int rounds, int idle_ms,
                             const std::string& dir) {
  SideBySide s;
  s.config = cfg.name;
  const std::string netns = e.lab().client_netns();
  const std::string table = "egr_bench_nflog";
  const std::string group = "7";
  lab::RunResult lr = NftIn(netns, {"-f", "-"},
                            "table inet " + table +
                                " {\n chain out {\n  type filter hook output priority 0; policy accept;\n"
                                "  ct state new counter log group " + group + "\n  ip daddr " + lab::kPublicB4 +
                                " tcp dport 80 reject with tcp reset\n }\n}\n");
  if (lr.exit_code != 0) {
    std::fprintf(stderr, "audit_bench: nft: %s\n", lr.Describe().c_str());
    return s;
  }
  e.Ctl({"audit"});  // what was queued before
  const std::string nft_out = dir + "/nflog-" + cfg.name + ".txt", egr_out = dir + "/audit-" + cfg.name + ".jsonl";
  lab::RunSpec rs;
  rs.argv = {lab::BinaryPath("egr-nflog-reader"), group, "--out", nft_out};
  rs.argv.insert(rs.argv.end(), cfg.args.begin(), cfg.args.end());
  // tcpdump writes each packet to its file as it comes (-U), so the quiet
  // wait below sees it finish too.
  if (cfg.tcpdump) rs.argv = {"tcpdump", "-n", "-Z", "root", "--immediate-mode", "-U", "-i", "nflog:" + group, "-w", nft_out};
  rs.stdin_data = "";
  rs.netns = netns;
  rs.timeout = std::chrono::minutes(30);
  auto nflog = lab::Start(rs);
  bool ok = nflog.ok();
  if (ok && cfg.tcpdump) {
    // It says on stderr when it listens; its stdout stays silent (-w).
    for (int i = 0; i < 100 && nflog->err().find("listening on") == std::string::npos; ++i)
      (void)nflog->ReadOutLine(std::chrono::milliseconds(50));
    ok = nflog->err().find("listening on") != std::string::npos;
    if (!ok) std::fprintf(stderr, "audit_bench: tcpdump: %s\n", nflog->err().c_str());
  } else if (ok) {
    auto ready = nflog->ReadOutLine(std::chrono::seconds(10));
    ok = ready && ready->rfind("ready", 0) == 0;
    if (!ok) std::fprintf(stderr, "audit_bench: nflog reader: %s\n", nflog->err().c_str());
  }
  auto follower = ok ? StartQuiet(e, e.lab().node_netns(), lab::BinaryPath("egressctl") + " audit --follow", egr_out)
                     : absl::StatusOr<lab::Background>(absl::InternalError("no nflog reader"));
  ok = ok && follower.ok();
  if (ok) {
    // Each reader's cost with nothing to read (egressd's closes a window a
    // second), over idle_ms, is subtracted for the time it then reads.
    const double egr_idle0 = TaskCpu(follower->pid()), nft_idle0 = TaskCpu(nflog->pid());
    const auto i0 = Clock::now();
    poll(nullptr, 0, idle_ms);
    const double idle_s = Seconds(Clock::now() - i0);
    const double egr_idle_rate = (TaskCpu(follower->pid()) - egr_idle0) / idle_s;
    const double nft_idle_rate = (TaskCpu(nflog->pid()) - nft_idle0) / idle_s;
    auto before = Counters(e);
    const long long nft0 = NftCounter(netns, table);
    const double egr_cpu0 = TaskCpu(follower->pid()), nft_cpu0 = TaskCpu(nflog->pid());
    const auto t0 = Clock::now();
    for (int r = 0; r < rounds; ++r) {
      std::vector<lab::Background> runs;
      for (int i = 0; i < p; ++i) {
        auto bg = e.StartSandboxed({"--egress", lab::kPublicB4}, {"tcp-burst", lab::kPublicB4, "80", std::to_string(k)});
        if (bg.ok()) runs.push_back(*std::move(bg));
        ok &= bg.ok();
      }
      for (auto& bg : runs) {
        lab::RunResult rr = bg.Wait(std::chrono::seconds(120));
        const json line = json::parse(rr.out.substr(0, rr.out.find('\n')), nullptr, false);
        // egressd allowed each connect (nothing refused with EPERM); nft's
        // reset answered it (ECONNREFUSED, "other").
        const bool made = !line.is_discarded() && line.value("refused", -1LL) == 0 &&
                          line.value("connected", 0LL) + line.value("other", 0LL) == k;
        if (!made) std::fprintf(stderr, "audit_bench: side-by-side run: %s\n", rr.Describe().c_str());
        ok &= rr.exit_code == 0 && made;
      }
    }
    s.wall_s = Seconds(Clock::now() - t0);
    WaitQuiet({nft_out, egr_out}, std::chrono::seconds(60));
    const double read_s = Seconds(Clock::now() - t0);
    s.egr_cpu_s = std::max(0.0, TaskCpu(follower->pid()) - egr_cpu0 - egr_idle_rate * read_s);
    s.nft_cpu_s = std::max(0.0, TaskCpu(nflog->pid()) - nft_cpu0 - nft_idle_rate * read_s);
    s.egr_idle_cpu_per_s = egr_idle_rate;
    kill(nflog->pid(), cfg.tcpdump ? SIGINT : SIGTERM);
    kill(follower->pid(), SIGTERM);
    lab::RunResult nr = nflog->Wait(std::chrono::seconds(30));
    lab::RunResult fr = follower->Wait(std::chrono::seconds(60));
    auto after = Counters(e);
    s.connects = static_cast<long long>(p) * k * rounds;
    s.egr_produced = Delta(after, before, "connect_allow");
    s.egr_recorded = Delta(after, before, "event_submitted");
    s.egr_folded = Delta(after, before, "event_folded");
    s.egr_lost = Delta(after, before, "event_lost");
    s.nft_produced = NftCounter(netns, table) - nft0;
    // The exporter's lines of these connects, one record each.
    std::ifstream in(egr_out);
    std::string line;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("type", "") == "connect" && j["IP"]["destination"] == lab::kPublicB4 &&
          !j.value("summary", false))
        ++s.egr_exported;
    }
    // The reader's last line: its figures.
    const size_t at = nr.out.rfind('{');
    json sum = at == std::string::npos ? json() : json::parse(nr.out.substr(at), nullptr, false);
    if (cfg.tcpdump) {
      if (getenv("AUDIT_BENCH_DEBUG")) std::fprintf(stderr, "tcpdump: %s\n", nr.Describe().c_str());
      long long v = 0;
      std::istringstream err(nr.err);
      std::string l;
      sum = json::object();
      // Its summary lines are "N packets captured", "N packets received by
      // filter", "N packets dropped by kernel".  (sscanf's return cannot tell
      // them apart: "%lld packets captured" converts one number on each of
      // the three lines, which is how an earlier version read the kernel's
      // drop count, mostly 0, as tcpdump's records.)
      auto figure = [](const std::string& line, const std::string& what, long long* out) {
        const size_t sp = line.find(' ');
        if (sp == std::string::npos || line.substr(sp + 1) != what) return false;
        *out = std::atoll(line.substr(0, sp).c_str());
        return true;
      };
      while (std::getline(err, l)) {
        if (figure(l, "packets captured", &v)) sum["records"] = v;
        if (figure(l, "packets dropped by kernel", &v)) sum["enobufs"] = v;
      }
      if (!sum.contains("records")) sum = json();
    }
    if (sum.is_object()) {
      s.nft_exported = sum.value("records", 0LL);
      s.nft_seq_gaps = sum.value("seq_gaps", 0LL);
      s.nft_enobufs = sum.value("enobufs", 0LL);
      s.nft_socket_drops = sum.value("socket_drops", 0LL);
    } else {
      std::fprintf(stderr, "audit_bench: nflog reader said no figures: %s\n", nr.Describe().c_str());
      ok = false;
    }
    ok &= fr.exit_code == 0 && nr.exit_code == 0;
  }
  NftIn(netns, {"delete", "table", "inet", table});
  s.ok = ok;
  return s;
}

// The drain and sustained rows: egressd's exporter alone.
bool ExportRows(test::Egressd& e, bool quick, json& j) {
  // Sizes: each sandbox within EGR_AUDIT_BURST (8192), a drain within the
  // ring (~65,000 records).
  const int k = quick ? 2000 : 8000;
  const int drain_p = quick ? 2 : 7;
  const int rounds = quick ? 2 : 6;
  std::vector<int> parallel = quick ? std::vector<int>{2} : std::vector<int>{1, 2, 4};
  bool all_ok = true;
  std::printf("| measurement | events | wall s | events/s | exporter CPU µs/event | folded | lost |\n|---|---|---|---|---|---|---|\n");
  std::vector<std::pair<std::string, std::string>> binaries = {{"egressctl", lab::BinaryPath("egressctl")}};
  if (const char* base = getenv("EGRESSCTL_BASELINE")) binaries.emplace_back("baseline", base);
  for (const auto& [name, path] : binaries) {
    // The process's own start and one window, with nothing on the ring:
    // subtracted, so the figures are the export's alone.
    Drain empty = MeasureDrain(e, path, 0, 0);
    Drain d = MeasureDrain(e, path, drain_p, k);
    all_ok &= d.ok && empty.ok;
    const double wall = d.wall_s - empty.wall_s, cpu = d.cpu_s - empty.cpu_s;
    const double rate = wall > 0 ? d.records / wall : 0;
    const double cpu_us = d.records ? cpu / d.records * 1e6 : 0;
    j["drain_empty"][name] = {{"wall_s", empty.wall_s}, {"cpu_s", empty.cpu_s}};
    j["drain"][name] = {{"records", d.records}, {"wall_s", d.wall_s}, {"cpu_s", d.cpu_s}, {"folded", d.folded},
                        {"lost", d.lost}, {"records_per_s", rate}, {"cpu_us_per_record", cpu_us}, {"ok", d.ok}};
    std::printf("| drain of a queued ring (%s; an empty drain's %.2f s wall, %.3f s CPU subtracted) | %lld | %.2f | %.0f | %.2f | %lld | %lld |\n",
                name.c_str(), empty.wall_s, empty.cpu_s, d.records, wall, rate, cpu_us, d.folded, d.lost);
  }
  for (int p : parallel) {
    Sustained s = MeasureSustained(e, p, k, rounds);
    all_ok &= s.ok;
    const double rate = s.wall_s > 0 ? s.occurrences / s.wall_s : 0;
    const double cpu_us = s.recorded ? s.reader_cpu_s / s.recorded * 1e6 : 0;
    j["sustained"].push_back({{"parallel", p}, {"occurrences", s.occurrences}, {"recorded", s.recorded},
                              {"folded", s.folded}, {"lost", s.lost}, {"wall_s", s.wall_s},
                              {"reader_cpu_s", s.reader_cpu_s}, {"events_per_s", rate},
                              {"cpu_us_per_event", cpu_us}, {"ok", s.ok}});
    std::printf("| egressd, reader following, %d sandboxes at a time | %lld | %.2f | %.0f | %.2f | %lld | %lld |\n", p,
                s.occurrences, s.wall_s, rate, cpu_us, s.folded, s.lost);
  }
  return all_ok;
}

int Main(bool quick, bool only_nflog, const std::string& out) {
  auto& e = test::Shared();
  json j;
  j["quick"] = quick;
  {
    std::ifstream la("/proc/loadavg");
    std::string l;
    std::getline(la, l);
    j["loadavg_start"] = l;
  }
  bool all_ok = only_nflog || ExportRows(e, quick, j);
  // nftables logging each new connection beside egressd's exporter: the same
  // connects, both readers at once.  The nflog instance with the kernel's
  // defaults and whole packets copied (what libpcap, so tcpdump -i nflog,
  // asks for), and at its best: a record is the 64 bytes that name the
  // destination, up to 256 records per netlink message of up to 64 KiB,
  // flushed every 10 ms, into a socket buffer of egressd's ring size (8 MiB).
  std::vector<NflogConfig> configs = {
      {"tcpdump", {}, true},
      {"kernel-defaults", {}},
      {"tuned", {"--copy-range", "64", "--qthresh", "256", "--nlbufsiz", "65536", "--flush-cs", "1", "--rcvbuf",
                 std::to_string(8 << 20)}}};
  // AUDIT_BENCH_NFLOG=NAME: that config alone.
  if (const char* only = getenv("AUDIT_BENCH_NFLOG")) {
    std::erase_if(configs, [&](const NflogConfig& c) { return c.name != only; });
  }
  char dir_tmpl[] = "/run/egr-audit-bench-XXXXXX";
  const std::string dir = mkdtemp(dir_tmpl) ? dir_tmpl : "";
  all_ok &= !dir.empty();
  std::printf("\n| nflog config | connects | wall s | connects/s | egressd: produced / exported / summarised / lost | "
              "egressd CPU µs/event | nft: produced / exported / lost (seq gaps, ENOBUFS) | nft reader CPU µs/record | "
              "exported ratio egressd : nft | CPU ratio nft : egressd |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& cfg : configs) {
    if (dir.empty()) break;
    const int sp = quick ? 1 : 2, sk = quick ? 300 : 8000, sr = quick ? 1 : 3;
    SideBySide r = MeasureSideBySide(e, cfg, sp, sk, sr, quick ? 300 : 2000, dir);
    all_ok &= r.ok;
    const double egr_us = r.egr_exported ? r.egr_cpu_s / r.egr_exported * 1e6 : 0;
    const double nft_us = r.nft_exported ? r.nft_cpu_s / r.nft_exported * 1e6 : 0;
    const double egr_share = r.egr_produced ? static_cast<double>(r.egr_exported) / r.egr_produced : 0;
    const double nft_share = r.nft_produced > 0 ? static_cast<double>(r.nft_exported) / r.nft_produced : 0;
    j["side_by_side"].push_back(
        {{"config", r.config}, {"nflog_args", cfg.args}, {"parallel", sp}, {"connects", r.connects},
         {"wall_s", r.wall_s}, {"egressd", {{"produced", r.egr_produced}, {"recorded", r.egr_recorded},
                                           {"exported", r.egr_exported}, {"folded", r.egr_folded},
                                           {"lost", r.egr_lost}, {"reader_cpu_s", r.egr_cpu_s},
                                           {"idle_cpu_s_per_s", r.egr_idle_cpu_per_s},
                                           {"cpu_us_per_event", egr_us}}},
         {"nft", {{"produced", r.nft_produced}, {"exported", r.nft_exported},
                  {"lost", r.nft_produced - r.nft_exported}, {"seq_gaps", r.nft_seq_gaps},
                  {"enobufs", r.nft_enobufs}, {"socket_drops", r.nft_socket_drops},
                  {"reader_cpu_s", r.nft_cpu_s}, {"cpu_us_per_record", nft_us}}},
         {"ok", r.ok}});
    std::printf("| %s | %lld | %.2f | %.0f | %lld / %lld / %lld / %lld | %.2f | %lld / %lld / %lld (%lld, %lld) | %.2f | "
                "%.3f : %.3f | %.2f |\n",
                r.config.c_str(), r.connects, r.wall_s, r.wall_s > 0 ? r.connects / r.wall_s : 0, r.egr_produced,
                r.egr_exported, r.egr_folded, r.egr_lost, egr_us, r.nft_produced, r.nft_exported,
                r.nft_produced - r.nft_exported, r.nft_seq_gaps, r.nft_enobufs, nft_us, egr_share, nft_share,
                egr_us > 0 ? nft_us / egr_us : 0);
  }
  if (!dir.empty()) (void)system(("rm -rf " + dir).c_str());
  {
    std::ifstream la("/proc/loadavg");
    std::string l;
    std::getline(la, l);
    j["loadavg_end"] = l;
  }
  if (!out.empty()) std::ofstream(out) << j.dump(2) << "\n";
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace egressd::bench

int main(int argc, char** argv) {
  bool quick = false, only_nflog = false;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--only" && i + 1 < argc && std::string(argv[i + 1]) == "nflog") {
      only_nflog = true;
      ++i;
    } else if (a == "--out" && i + 1 < argc) {
      out = argv[++i];
    } else {
      std::fprintf(stderr, "usage: audit_bench [--quick] [--only nflog] [--out FILE.json] (got \"%s\")\n", a.c_str());
      return 2;
    }
  }
  return egressd::bench::Main(quick, only_nflog, out);
}
