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
//  3. nftables: the same connects from a pod with `ct state new log group N`
//     and a reject, read by `tcpdump -i nflog:N -w /dev/null` (nflog is how a
//     packet log reaches a reader; the `log` statement's printk is off in a
//     non-initial netns by default and overwrites silently): connects/s, the
//     reader's CPU per record, and the kernel's "dropped" count.
//
//   audit_bench [--quick] [--out FILE.json]
// Prints a markdown table.  Never a pass/fail on a figure: exit 0 when
// every measurement ran.
#include <signal.h>
#include <unistd.h>

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

// `sh -c 'exec CMD > /dev/null'` in the node netns with the instance's env.
absl::StatusOr<lab::Background> StartQuiet(test::Egressd& e, const std::string& netns, const std::string& cmd,
                                           bool ctl_env = true) {
  lab::RunSpec spec;
  spec.argv = {"sh", "-c", "exec " + cmd + " > /dev/null"};
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

struct NftLog {
  long long connects = 0, captured = 0, dropped = 0;
  double wall_s = 0, reader_cpu_s = 0;
  bool ok = false;
};

NftLog MeasureNft(test::Egressd& e, int p, int k, int rounds) {
  NftLog n;
  const std::string netns = e.lab().client_netns();
  const std::string table = "egr_bench_nflog";
  const std::string rules = "table inet " + table +
                            " {\n chain out {\n  type filter hook output priority 0; policy accept;\n"
                            "  ct state new counter log group 7\n  ip daddr " + std::string(lab::kPublicB4) +
                            " tcp dport 80 reject with tcp reset\n }\n}\n";
  lab::RunSpec load;
  load.argv = {"nft", "-f", "-"};
  load.netns = netns;
  load.stdin_data = rules;
  lab::RunResult lr = lab::Run(load);
  if (lr.exit_code != 0) {
    std::fprintf(stderr, "audit_bench: nft: %s\n", lr.Describe().c_str());
    return n;
  }
  lab::RunSpec dump;
  dump.argv = {"tcpdump", "-n", "-Z", "root", "--immediate-mode", "-i", "nflog:7", "-w", "/dev/null"};
  dump.stdin_data = "";
  dump.netns = netns;
  dump.timeout = std::chrono::minutes(30);
  auto reader = lab::Start(dump);
  bool ok = reader.ok();
  // tcpdump says on stderr when it listens; its stdout stays silent (-w).
  for (int i = 0; ok && i < 100 && reader->err().find("listening on") == std::string::npos; ++i) {
    (void)reader->ReadOutLine(std::chrono::milliseconds(50));
  }
  ok = ok && reader->err().find("listening on") != std::string::npos;
  if (getenv("AUDIT_BENCH_DEBUG")) std::fprintf(stderr, "tcpdump pid %d: %s\n", reader->pid(), reader->err().c_str());
  if (ok) {
    const double cpu0 = ProcCpu(reader->pid());
    const auto t0 = Clock::now();
    for (int r = 0; r < rounds; ++r) {
      std::vector<lab::Background> runs;
      for (int i = 0; i < p; ++i) {
        lab::RunSpec spec;
        spec.argv = {lab::BinaryPath("egressd-probe"), "tcp-burst", lab::kPublicB4, "80", std::to_string(k)};
        spec.netns = netns;
        spec.timeout = std::chrono::seconds(120);
        auto bg = lab::Start(spec);
        if (bg.ok()) runs.push_back(*std::move(bg));
        ok &= bg.ok();
      }
      for (auto& bg : runs) ok &= bg.Wait(std::chrono::seconds(120)).exit_code == 0;
    }
    n.wall_s = Seconds(Clock::now() - t0);
    n.reader_cpu_s = ProcCpu(reader->pid()) - cpu0;
    kill(reader->pid(), SIGINT);
    lab::RunResult rr = reader->Wait(std::chrono::seconds(30));
    if (rr.err.find("packets captured") == std::string::npos) {
      std::fprintf(stderr, "audit_bench: tcpdump said no figures: %s\n", rr.Describe().c_str());
    }
    long long v = 0;
    std::istringstream err(rr.err);
    std::string line;
    while (std::getline(err, line)) {
      if (std::sscanf(line.c_str(), "%lld packets captured", &v) == 1) n.captured = v;
      if (std::sscanf(line.c_str(), "%lld packets dropped by kernel", &v) == 1) n.dropped = v;
    }
  }
  n.connects = static_cast<long long>(p) * k * rounds;
  if (getenv("AUDIT_BENCH_DEBUG")) {
    lab::RunSpec list;
    list.argv = {"nft", "list", "table", "inet", table};
    list.netns = netns;
    std::fprintf(stderr, "%s\n", lab::Run(list).out.c_str());
  }
  lab::RunSpec del;
  del.argv = {"nft", "delete", "table", "inet", table};
  del.netns = netns;
  lab::Run(del);
  n.ok = ok;
  return n;
}

int Main(bool quick, const std::string& out) {
  auto& e = test::Shared();
  // Sizes: each sandbox within EGR_AUDIT_BURST (8192), a drain within the
  // ring (~65,000 records).
  const int k = quick ? 2000 : 8000;
  const int drain_p = quick ? 2 : 7;
  const int rounds = quick ? 2 : 6;
  std::vector<int> parallel = quick ? std::vector<int>{2} : std::vector<int>{1, 2, 4};
  json j;
  j["quick"] = quick;
  {
    std::ifstream la("/proc/loadavg");
    std::string l;
    std::getline(la, l);
    j["loadavg_start"] = l;
  }
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
  for (int p : parallel) {
    NftLog n = MeasureNft(e, p, k, rounds);
    all_ok &= n.ok;
    const double rate = n.wall_s > 0 ? n.connects / n.wall_s : 0;
    const double cpu_us = n.captured ? n.reader_cpu_s / n.captured * 1e6 : 0;
    j["nft_nflog"].push_back({{"parallel", p}, {"connects", n.connects}, {"captured", n.captured},
                              {"dropped", n.dropped}, {"wall_s", n.wall_s}, {"reader_cpu_s", n.reader_cpu_s},
                              {"connects_per_s", rate}, {"cpu_us_per_record", cpu_us}, {"ok", n.ok}});
    std::printf("| nft `log group` + tcpdump nflog reader, %d pods' workers at a time | %lld (captured %lld) | %.2f | %.0f | %.2f | - | %lld |\n",
                p, n.connects, n.captured, n.wall_s, rate, cpu_us, n.dropped + (n.connects - n.captured));
  }
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
  bool quick = false;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--out" && i + 1 < argc) {
      out = argv[++i];
    } else {
      std::fprintf(stderr, "usage: audit_bench [--quick] [--out FILE.json] (got \"%s\")\n", a.c_str());
      return 2;
    }
  }
  return egressd::bench::Main(quick, out);
}
