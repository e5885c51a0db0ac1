// enforcer_bench: egressd against the incumbent (an nftables ruleset in the
// pod's netns, rendered by `egressctl policy compile -o nft`) and against no
// filter at all, on one lab topology: three pods behind veths to the node,
// the lab's server on the world host.  Pod 0 has no enforcement, pod 1 the
// nft ruleset, pod 2 a cgroup registered with egressd (backstop attached).
// Every measurement is interleaved round by round with the order rotated, and
// reported as the ratio to the no-filter run of the same round (median and a
// distribution-free 95% interval), because the machine is shared: absolute
// times say how busy it was, ratios within a round say what the enforcer
// costs.  Never a pass/fail on time: exit 0 when everything ran, 1 otherwise.
//
//   enforcer_bench [--quick] --out results.json   (bench/run.sh renders the table and plots)
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "scale_inputs.h"
#include "egressd_env.h"

namespace egressd::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// ---- statistics ---------------------------------------------------------------------
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The distribution-free interval for the median: order statistics (l, u) of
// n samples such that P(l <= median <= u) >= 95% under Binomial(n, 1/2); with
// fewer than 6 samples no such pair exists and the full range is given with
// its real coverage.
struct Interval {
  double lo, hi, coverage;
};
Interval MedianCi(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const int n = static_cast<int>(v.size());
  std::vector<double> cdf(n + 1);
  double acc = 0;
  for (int k = 0; k <= n; ++k) {
    acc += std::exp(std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1) - n * std::log(2.0));
    cdf[k] = acc;
  }
  // Largest j with P(X < j) <= 2.5%: interval [v[j], v[n-1-j]].
  int j = 0;
  while (j + 1 < n / 2 && cdf[j] <= 0.025) ++j;
  const double coverage = 1 - 2 * (j == 0 ? 0 : cdf[j - 1]);
  return {v[j], v[n - 1 - j], j == 0 ? 1 - 2 * std::pow(0.5, n) : coverage};
}

json Summary(const std::vector<double>& v) {
  const Interval ci = MedianCi(v);
  return {{"median", Median(v)}, {"ci95", {ci.lo, ci.hi}}, {"coverage", ci.coverage}, {"samples", v}};
}

// ---- the connect loop -----------------------------------------------------------------
struct LoopResult {
  int ok = 0, failed = 0;
  double wall_s = 0, cpu_s = 0;
};

// connect() + the server's accept + close, n times, from a child in `netns`
// (and `cgroup`, when egressd governs it).  SO_LINGER 0: the close is a reset,
// so no TIME_WAIT exhausts the pod's ports over a long run.  CPU is the
// child's (user + system): the syscalls, the hooks and the stack they run.
LoopResult ConnectLoop(const std::string& netns, const std::string& cgroup, const char* dst, uint16_t port,
                       int n) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const int ns = open(netns.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) _exit(3);
    if (!cgroup.empty()) {
      std::ofstream(cgroup + "/cgroup.procs") << getpid();
    }
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    inet_pton(AF_INET, dst, &sa.sin_addr);
    rusage r0{}, r1{};
    getrusage(RUSAGE_SELF, &r0);
    const auto t0 = Clock::now();
    int ok = 0, failed = 0;
    const linger lg{1, 0};
    for (int i = 0; i < n; ++i) {
      const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
        ++ok;
      } else {
        ++failed;
      }
      setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
      close(s);
    }
    const double wall = Seconds(Clock::now() - t0);
    getrusage(RUSAGE_SELF, &r1);
    auto tv = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
    const double cpu = tv(r1.ru_utime) - tv(r0.ru_utime) + tv(r1.ru_stime) - tv(r0.ru_stime);
    char buf[128];
    const int len = std::snprintf(buf, sizeof(buf), "%d %d %.9f %.9f\n", ok, failed, wall, cpu);
    if (write(fds[1], buf, len) != len) _exit(4);
    _exit(0);
  }
  close(fds[1]);
  char buf[128] = {};
  ssize_t got = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  LoopResult r;
  if (got > 0) std::sscanf(buf, "%d %d %lf %lf", &r.ok, &r.failed, &r.wall_s, &r.cpu_s);
  return r;
}

// ---- bpf_stats ------------------------------------------------------------------------
lab::RunResult Bpftool(std::vector<std::string> args) {
  lab::RunSpec spec;
  spec.argv = {"bpftool", "-j"};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  return lab::Run(spec);
}

// run_time_ns and run_cnt of the programs behind the links pinned under the
// instance's pin root (kernel.bpf_stats_enabled counts them).
std::map<std::string, std::pair<double, double>> ProgStats(const std::string& pin_root) {
  std::map<std::string, std::pair<double, double>> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(pin_root, ec)) {
    if (entry.is_directory(ec)) continue;
    lab::RunResult link = Bpftool({"link", "show", "pinned", entry.path().string()});
    if (link.exit_code != 0) continue;  // a map
    const json l = json::parse(link.out, nullptr, false);
    if (l.is_discarded() || !l.contains("prog_id")) continue;
    lab::RunResult prog = Bpftool({"prog", "show", "id", std::to_string(l["prog_id"].get<long>())});
    const json j = json::parse(prog.out, nullptr, false);
    if (j.is_discarded() || !j.contains("run_cnt")) continue;
    auto& v = out[j.value("name", entry.path().filename().string())];
    v.first += j.value("run_time_ns", 0.0);
    v.second += j.value("run_cnt", 0.0);
  }
  return out;
}

struct Options {
  bool quick = false;
  std::string out;
};

const char* kEnforcers[] = {"none", "nftables", "egressd"};

int Main(const Options& opt) {
  json results;
  results["loadavg_start"] = Slurp("/proc/loadavg");
  results["nproc"] = sysconf(_SC_NPROCESSORS_ONLN);
  results["kernel"] = Slurp("/proc/sys/kernel/osrelease");
  results["mode"] = opt.quick ? "quick" : "full";
  results["date"] = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();

  auto env = test::Egressd::Start();
  if (!env.ok()) {
    std::fprintf(stderr, "enforcer_bench: cannot start the lab and egressd: %s\n", env.status().ToString().c_str());
    return 1;
  }
  test::Egressd& e = **env;
  lab::Lab& lab = e.lab();
  auto nft_pod = lab.AddPod();
  auto egr_pod = lab.AddPod();
  if (!nft_pod.ok() || !egr_pod.ok()) {
    std::fprintf(stderr, "enforcer_bench: cannot add pods\n");
    return 1;
  }
  const std::string netns[] = {lab.client_netns(), (*nft_pod)->netns, (*egr_pod)->netns};
  const char* server = lab::kPublicA4;
  const uint16_t port = 80;
  const std::string dir = "/tmp/egr-bench-" + lab.id();
  std::filesystem::create_directories(dir);

  // bpf_stats: global, so restored at exit.
  const std::string stats_before = Slurp("/proc/sys/kernel/bpf_stats_enabled");
  std::ofstream("/proc/sys/kernel/bpf_stats_enabled") << "1";

  const std::vector<int> scales = opt.quick ? std::vector<int>{10, 1000} : std::vector<int>{10, 1000, 100000};
  const int rounds = opt.quick ? 3 : 9;
  const int conns = opt.quick ? 300 : 3000;
  const int apply_reps = opt.quick ? 1 : 3;
  bool all_ran = true;
  int generation = 0;

  for (int scale : scales) {
    json cell;
    const std::string task = dir + "/task-" + std::to_string(scale) + ".yaml";
    std::ofstream(task) << TaskYaml(scale);
    // ---- (4) apply: egressd (compile + batch map updates) vs nft -f (pre-rendered) ----
    std::vector<double> apply_nft, apply_egr;
    std::string cgroup;
    for (int rep = 0; rep < apply_reps; ++rep) {
      // A policy of its own each time (one more address), so nothing is cached.
      const std::string extra = "192.0.2." + std::to_string(20 + (generation++ % 200));
      const std::vector<std::string> flags = {"--policy", task, "--egress", server, "--egress", extra};
      std::vector<std::string> compile = {"policy", "compile", "-o", "nft"};
      compile.insert(compile.end(), flags.begin(), flags.end());
      lab::RunResult rules = e.Ctl(compile);
      if (rules.exit_code != 0) {
        std::fprintf(stderr, "compile -o nft failed: %s\n", rules.Describe().c_str());
        return 1;
      }
      const std::string rules_path = dir + "/rules.nft";
      std::ofstream(rules_path) << rules.out;
      const auto t0 = Clock::now();
      lab::RunResult loaded = lab::Run({.argv = {"nft", "-f", rules_path}, .netns = netns[1], .cgroup = "",
                                        .hostile = false, .timeout = std::chrono::seconds(300), .env = {},
                                        .stdin_data = ""});
      apply_nft.push_back(Seconds(Clock::now() - t0));
      if (loaded.exit_code != 0) {
        std::fprintf(stderr, "nft -f failed at %d entries: %s\n", scale, loaded.Describe().c_str());
        cell["nftables_error"] = loaded.err;
        all_ran = false;
      }
      if (!cgroup.empty()) e.Ctl({"sandbox", "remove", "--cgroup", cgroup});
      auto made = lab.MakeCgroup("bench-" + std::to_string(generation));
      if (!made.ok()) return 1;
      cgroup = *made;
      std::vector<std::string> add = {"sandbox", "add", "--cgroup", cgroup};
      add.insert(add.end(), flags.begin(), flags.end());
      const auto t1 = Clock::now();
      lab::RunResult added = e.Ctl(add);
      apply_egr.push_back(Seconds(Clock::now() - t1));
      if (added.exit_code != 0) {
        std::fprintf(stderr, "sandbox add failed at %d entries: %s\n", scale, added.Describe().c_str());
        return 1;
      }
    }
    cell["apply_s"] = {{"nftables", Summary(apply_nft)}, {"egressd", Summary(apply_egr)}};

    // ---- (4b) one resolved address: nft's timeout set (egressd: blocked, issue 11) ----
    {
      std::vector<double> add_one;
      for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = Clock::now();
        lab::Run({.argv = {"nft", "add", "element", "inet", "egressd_sandbox", "resolved4",
                           "{ 198.51.100." + std::to_string(rep + 1) + " timeout 300s }"},
                  .netns = netns[1], .cgroup = "", .hostile = false, .timeout = std::chrono::seconds(30),
                  .env = {}, .stdin_data = ""});
        add_one.push_back(Seconds(Clock::now() - t0));
      }
      cell["add_resolved_s"] = {{"nftables", Summary(add_one)}};
    }

    // ---- (1) connect rate and CPU per connection, (3) ns per program run ----
    const std::string cgroups[] = {"", "", cgroup};
    std::map<std::string, std::vector<double>> rate, cpu, rate_ratio, cpu_ratio;
    std::map<std::string, std::pair<double, double>> prog_total;
    for (int round = 0; round < rounds; ++round) {
      double r_none = 0, c_none = 0;
      std::map<std::string, double> r_round, c_round;
      for (int k = 0; k < 3; ++k) {
        const int idx = (k + round) % 3;  // rotated order
        std::map<std::string, std::pair<double, double>> before;
        if (idx == 2) before = ProgStats(e.pin_root());
        const LoopResult lr = ConnectLoop(netns[idx], cgroups[idx], server, port, conns);
        if (idx == 2) {
          for (const auto& [name, v] : ProgStats(e.pin_root())) {
            prog_total[name].first += v.first - before[name].first;
            prog_total[name].second += v.second - before[name].second;
          }
        }
        if (lr.ok != conns) {
          std::fprintf(stderr, "%s: %d of %d connects failed at %d entries\n", kEnforcers[idx], lr.failed,
                       conns, scale);
          all_ran = false;
        }
        const double per_s = lr.wall_s > 0 ? lr.ok / lr.wall_s : 0;
        const double cpu_us = lr.ok ? lr.cpu_s / lr.ok * 1e6 : 0;
        rate[kEnforcers[idx]].push_back(per_s);
        cpu[kEnforcers[idx]].push_back(cpu_us);
        r_round[kEnforcers[idx]] = per_s;
        c_round[kEnforcers[idx]] = cpu_us;
      }
      r_none = r_round["none"];
      c_none = c_round["none"];
      for (const char* en : {"nftables", "egressd"}) {
        rate_ratio[en].push_back(r_none > 0 ? r_round[en] / r_none : 0);
        cpu_ratio[en].push_back(c_none > 0 ? c_round[en] / c_none : 0);
      }
    }
    for (const char* en : kEnforcers) {
      cell["connect_per_s"][en] = Summary(rate[en]);
      cell["cpu_us_per_conn"][en] = Summary(cpu[en]);
    }
    for (const char* en : {"nftables", "egressd"}) {
      cell["connect_rate_ratio"][en] = Summary(rate_ratio[en]);
      cell["cpu_ratio"][en] = Summary(cpu_ratio[en]);
    }
    for (const auto& [name, v] : prog_total) {
      if (v.second > 0) cell["bpf_ns_per_run"][name] = {{"ns", v.first / v.second}, {"runs", v.second}};
    }
    if (!cgroup.empty()) e.Ctl({"sandbox", "remove", "--cgroup", cgroup});
    results["scales"][std::to_string(scale)] = cell;
    std::fprintf(stderr, "enforcer_bench: %d entries done\n", scale);
  }

  // ---- (7) start-up: egressctl run -- true vs unshare --fork --pid --mount true ----
  {
    const int n = opt.quick ? 5 : 21;
    std::vector<double> run_t, unshare_t;
    for (int i = 0; i < n; ++i) {
      for (int which = 0; which < 2; ++which) {
        const int w = (which + i) % 2;
        const auto t0 = Clock::now();
        lab::RunResult r = w == 0 ? e.CtlIn(netns[2], {"run", "--egress", server, "--", "true"})
                                  : lab::Run({.argv = {"unshare", "--fork", "--pid", "--mount", "true"},
                                              .netns = netns[0], .cgroup = "", .hostile = false,
                                              .timeout = std::chrono::seconds(30), .env = {}, .stdin_data = ""});
        (w == 0 ? run_t : unshare_t).push_back(Seconds(Clock::now() - t0));
        if (r.exit_code != 0) {
          std::fprintf(stderr, "start-up run failed: %s\n", r.Describe().c_str());
          all_ran = false;
        }
      }
    }
    results["startup_s"] = {{"egressctl_run", Summary(run_t)}, {"unshare", Summary(unshare_t)}};
  }

  std::ofstream("/proc/sys/kernel/bpf_stats_enabled") << stats_before;
  results["loadavg_end"] = Slurp("/proc/loadavg");
  results["all_ran"] = all_ran;
  std::ofstream(opt.out) << results.dump(2) << "\n";
  std::filesystem::remove_all(dir);
  return all_ran ? 0 : 1;
}

}  // namespace
}  // namespace egressd::bench

int main(int argc, char** argv) {
  egressd::bench::Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      opt.quick = true;
    } else if (a == "--out" && i + 1 < argc) {
      opt.out = argv[++i];
    } else {
      std::fprintf(stderr, "usage: enforcer_bench [--quick] --out FILE.json (got \"%s\")\n", a.c_str());
      return 2;
    }
  }
  if (opt.out.empty()) {
    std::fprintf(stderr, "usage: enforcer_bench [--quick] --out FILE.json\n");
    return 2;
  }
  return egressd::bench::Main(opt);
}
