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
//   enforcer_bench [--quick] [--only dns|dnsspeed] --out results.json   (bench/run.sh renders the table and plots)
//
// Files: bench_stats (medians, intervals, the interleaving), loops (connect,
// UDP send, iperf3), kernel_figures (bpf_stats, map and kernel memory),
// sandbox_axis (1/100/1,000 sandboxes), dns_rows (egressd's proxy against the
// incumbent's per-pod forwarder, nft_forwarder.cc), resolved_axis (10 to 100k
// resolved addresses).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench_stats.h"
#include "dns_rows.h"
#include "dns_speed.h"
#include "egressd_env.h"
#include "kernel_figures.h"
#include "loops.h"
#include "resolved_axis.h"
#include "sandbox_axis.h"
#include "scale_inputs.h"

namespace egressd::bench {
namespace {

struct Options {
  bool quick = false;
  bool only_dns = false;  // --only dns: the DNS rows and the resolved-address axis alone
  bool only_dnsspeed = false;  // --only dnsspeed: the DNS speed rows alone (dns_speed.h)
  std::string out;
};

constexpr int kStressEntries = 1'000'000;
constexpr uint16_t kIperfPort = 5201;

// One cell of the entries axis: the sizes of its loops.
struct CellPlan {
  int entries;
  int apply_reps, rounds, conns, sends;
  bool iperf, stress;
};

lab::RunResult Run(std::vector<std::string> argv, const std::string& netns, std::chrono::seconds timeout,
                   std::map<std::string, std::string> env = {}) {
  return lab::Run({.argv = std::move(argv), .netns = netns, .cgroup = "", .hostile = false, .timeout = timeout,
                   .env = std::move(env), .stdin_data = ""});
}

// egressctl on the instance with a timeout fit for a 1M-entry policy.
lab::RunResult Ctl(test::Egressd& e, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {lab::BinaryPath("egressctl")};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv, e.lab().node_netns(), std::chrono::seconds(900), e.CtlEnv());
}

class Bench {
 public:
  Bench(test::Egressd& e, const std::string (&netns)[3], std::string dir)
      : e_(e), netns_(netns), dir_(std::move(dir)) {}

  json Cell(const CellPlan& p);
  bool all_ran = true;

 private:
  test::Egressd& e_;
  const std::string (&netns_)[3];
  const std::string dir_;
  const char* server_ = lab::kPublicA4;
  int generation_ = 0;
};

json Bench::Cell(const CellPlan& p) {
  json cell;
  const std::string task = dir_ + "/task-" + std::to_string(p.entries) + ".yaml";
  std::ofstream(task) << (p.stress ? TaskYamlV4Heavy(p.entries) : TaskYaml(p.entries));
  if (p.stress) cell["generator"] = "v4-heavy: 15 of 16 entries IPv4 (EGR_MAX_ALLOW4 1<<20, EGR_MAX_ALLOW6 1<<18)";

  // ---- (4) apply: egressd (compile + batch map updates) vs nft -f (pre-rendered) ----
  std::vector<double> apply_nft, apply_egr;
  std::string cgroup;
  bool nft_loaded = false;
  for (int rep = 0; rep < p.apply_reps; ++rep) {
    // A policy of its own each time (one more address), so nothing is cached.
    const std::string extra = "192.0.2." + std::to_string(20 + (generation_++ % 200));
    const std::vector<std::string> flags = {"--policy", task, "--egress", server_, "--egress", extra};
    std::vector<std::string> compile = {"policy", "compile", "-o", "nft"};
    compile.insert(compile.end(), flags.begin(), flags.end());
    lab::RunResult rules = Ctl(e_, compile);
    if (rules.exit_code != 0) {
      cell["error"] = "compile -o nft: " + rules.Describe();
      all_ran = false;
      return cell;
    }
    const std::string rules_path = dir_ + "/rules.nft";
    std::ofstream(rules_path) << rules.out;
    rules.out.clear();
    const auto t0 = Clock::now();
    lab::RunResult loaded = Run({"nft", "-f", rules_path}, netns_[1], std::chrono::seconds(900));
    apply_nft.push_back(Seconds(Clock::now() - t0));
    nft_loaded = loaded.exit_code == 0;
    if (!nft_loaded) {
      std::fprintf(stderr, "nft -f failed at %d entries: %s\n", p.entries, loaded.Describe().c_str());
      cell["nftables_error"] = loaded.err;
      all_ran = false;
    }
    if (!cgroup.empty()) Ctl(e_, {"sandbox", "remove", "--cgroup", cgroup});
    auto made = e_.lab().MakeCgroup("bench-" + std::to_string(generation_));
    if (!made.ok()) {
      cell["error"] = made.status().ToString();
      all_ran = false;
      return cell;
    }
    cgroup = *made;
    std::vector<std::string> add = {"sandbox", "add", "--cgroup", cgroup};
    add.insert(add.end(), flags.begin(), flags.end());
    const auto t1 = Clock::now();
    lab::RunResult added = Ctl(e_, add);
    apply_egr.push_back(Seconds(Clock::now() - t1));
    if (added.exit_code != 0) {
      std::fprintf(stderr, "sandbox add failed at %d entries: %s\n", p.entries, added.Describe().c_str());
      cell["egressd_error"] = added.Describe();
      all_ran = false;
      return cell;
    }
  }
  cell["apply_s"] = {{"nftables", Summary(apply_nft)}, {"egressd", Summary(apply_egr)}};

  // ---- (4b) one resolved address: nft's timeout set (egressd: blocked, issue 11) ----
  if (nft_loaded) {
    std::vector<double> add_one;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = Clock::now();
      Run({"nft", "add", "element", "inet", "egressd_sandbox", "resolved4",
           "{ 198.51.100." + std::to_string(rep + 1) + " timeout 300s }"},
          netns_[1], std::chrono::seconds(60));
      add_one.push_back(Seconds(Clock::now() - t0));
    }
    cell["add_resolved_s"] = {{"nftables", Summary(add_one)}};
  }

  const std::string cgroups[] = {"", "", cgroup};
  std::map<std::string, std::pair<double, double>> prog_total;
  // Runs fn under enforcer idx, adding egressd's program runs to prog_total.
  auto with_stats = [&](int idx, const std::function<Measured()>& fn) {
    if (idx != 2) return fn();
    const auto before = ProgStats(e_.pin_root());
    Measured m = fn();
    AddProgStats(prog_total, before, ProgStats(e_.pin_root()));
    return m;
  };
  auto loop_measure = [&](const LoopResult& lr, int n, const char* what, int idx) {
    if (lr.ok != n) {
      std::fprintf(stderr, "%s: %d of %d %s failed at %d entries\n", kEnforcers[idx], n - lr.ok, n, what,
                   p.entries);
    }
    return Measured{lr.wall_s > 0 ? lr.ok / lr.wall_s : 0, lr.ok ? lr.cpu_s / lr.ok * 1e6 : 0, lr.ok == n};
  };

  // ---- (1) connect rate and CPU per connection, (3) ns per program run ----
  Interleaved connect = Interleave(p.rounds, [&](int idx) {
    return with_stats(idx, [&] {
      return loop_measure(ConnectLoop(netns_[idx], cgroups[idx], server_, 80, p.conns), p.conns, "connects", idx);
    });
  });
  Store(connect, cell, "connect_per_s", "cpu_us_per_conn");
  // ---- (2) unconnected UDP sends: rate and CPU per send ----
  Interleaved udp = Interleave(p.rounds, [&](int idx) {
    return with_stats(idx, [&] {
      return loop_measure(UdpSendLoop(netns_[idx], cgroups[idx], server_, lab::kUdpPorts[0], p.sends), p.sends,
                          "sends", idx);
    });
  });
  Store(udp, cell, "udp_sends_per_s", "cpu_us_per_send");
  all_ran = all_ran && connect.all_ok && udp.all_ok;

  // ---- (2b) iperf3 through the veth: TCP bits/s, 64-byte UDP datagrams/s ----
  if (p.iperf) {
    auto srv = StartIperf3Server(e_.lab(), server_, kIperfPort);
    if (!srv.ok()) {
      cell["iperf3_error"] = srv.status().ToString();
      all_ran = false;
    } else {
      const int secs = p.rounds > 3 ? 2 : 1;
      for (bool u : {false, true}) {
        Interleaved ip = Interleave(p.rounds > 5 ? 5 : p.rounds, [&](int idx) {
          IperfResult r = Iperf3(netns_[idx], cgroups[idx], server_, kIperfPort, u, secs);
          if (!r.ok) std::fprintf(stderr, "iperf3 (%s) under %s: %s\n", u ? "udp" : "tcp", kEnforcers[idx],
                                  r.error.c_str());
          return Measured{r.value, r.cpu_per_unit, r.ok};
        });
        Store(ip, cell, u ? "iperf_udp64_pps" : "iperf_tcp_bps", u ? "iperf_udp64_cpu_us_per_dgram"
                                                                  : "iperf_tcp_cpu_s_per_gb");
        all_ran = all_ran && ip.all_ok;
      }
      cell["iperf3_seconds"] = secs;
    }
  }
  for (const auto& [name, v] : prog_total) {
    if (v.second > 0) cell["bpf_ns_per_run"][name] = {{"ns", v.first / v.second}, {"runs", v.second}};
  }
  if (!cgroup.empty()) Ctl(e_, {"sandbox", "remove", "--cgroup", cgroup});
  // The next cell starts from an empty incumbent too (and 1M elements go).
  Run({"nft", "delete", "table", "inet", "egressd_sandbox"}, netns_[1], std::chrono::seconds(300));
  return cell;
}

int Main(const Options& opt) {
  json results;
  results["loadavg_start"] = Slurp("/proc/loadavg");
  results["nproc"] = sysconf(_SC_NPROCESSORS_ONLN);
  results["kernel"] = Slurp("/proc/sys/kernel/osrelease");
  results["mode"] = opt.quick ? "quick" : "full";
  if (opt.only_dns) results["only"] = "dns";
  if (opt.only_dnsspeed) results["only"] = "dnsspeed";
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
  const std::string netns[3] = {lab.client_netns(), (*nft_pod)->netns, (*egr_pod)->netns};
  const std::string dir = "/tmp/egr-bench-" + lab.id();
  std::filesystem::create_directories(dir);

  // bpf_stats: global, so restored at exit.
  const std::string stats_before = Slurp("/proc/sys/kernel/bpf_stats_enabled");
  std::ofstream("/proc/sys/kernel/bpf_stats_enabled") << "1";

  std::vector<CellPlan> plan;
  if (opt.only_dns || opt.only_dnsspeed) {
    // the DNS rows alone (below)
  } else if (opt.quick) {
    plan = {{10, 1, 3, 300, 2000, false, false}, {1000, 1, 3, 300, 2000, true, false}};
  } else {
    plan = {{10, 3, 9, 3000, 20000, false, false},
            {1000, 3, 9, 3000, 20000, false, false},
            {100000, 3, 9, 3000, 20000, true, false},
            {kStressEntries, 1, 5, 2000, 10000, false, true}};
  }
  Bench bench(e, netns, dir);
  for (const CellPlan& p : plan) {
    results[p.stress ? "stress" : "scales"][std::to_string(p.entries)] = bench.Cell(p);
    std::fprintf(stderr, "enforcer_bench: %d entries done\n", p.entries);
  }

  // ---- (6) DNS: latency and rate, allowed and denied; the resolved-address axis ----
  {
    auto dns = DnsLab::Start(e, netns, dir);
    if (!dns.ok()) {
      std::fprintf(stderr, "enforcer_bench: DNS rows not run: %s\n", dns.status().ToString().c_str());
      results["dns"] = {{"error", dns.status().ToString()}};
      bench.all_ran = false;
    } else {
      if (!opt.only_dnsspeed) {
        results["dns"] = DnsRows(**dns, opt.quick, bench.all_ran);
        std::fprintf(stderr, "enforcer_bench: DNS rows done\n");
      }
      results["dns_speed"] = DnsSpeed(**dns, opt.quick, bench.all_ran);
      std::fprintf(stderr, "enforcer_bench: DNS speed rows done\n");
    }
    if (dns.ok() && !opt.only_dnsspeed) {
      results["resolved_axis"] = ResolvedAxis(e, **dns, opt.quick ? std::vector<int>{10, 1000}
                                                                  : std::vector<int>{10, 1000, 100000},
                                              opt.quick, bench.all_ran);
      results["dns"]["forwarder_counters"] = (*dns)->StopForwarder();
    }
  }
  if (opt.only_dns || opt.only_dnsspeed) {
    std::ofstream("/proc/sys/kernel/bpf_stats_enabled") << stats_before;
    results["loadavg_end"] = Slurp("/proc/loadavg");
    results["all_ran"] = bench.all_ran;
    std::ofstream(opt.out) << results.dump(2) << "\n";
    std::filesystem::remove_all(dir);
    return bench.all_ran ? 0 : 1;
  }

  // ---- (5) the sandbox axis: apply time per sandbox and memory at N sandboxes ----
  results["sandbox_axis"] = SandboxAxis(e, opt.quick ? std::vector<int>{1, 10} : std::vector<int>{1, 100, 1000},
                                        dir, lab::kPublicA4, bench.all_ran);

  // ---- (7) start-up: egressctl run -- true vs unshare --fork --pid --mount true ----
  {
    const int n = opt.quick ? 5 : 21;
    std::vector<double> run_t, unshare_t;
    for (int i = 0; i < n; ++i) {
      for (int which = 0; which < 2; ++which) {
        const int w = (which + i) % 2;
        const auto t0 = Clock::now();
        lab::RunResult r = w == 0 ? e.CtlIn(netns[2], {"run", "--egress", lab::kPublicA4, "--", "true"})
                                  : Run({"unshare", "--fork", "--pid", "--mount", "true"}, netns[0],
                                        std::chrono::seconds(30));
        (w == 0 ? run_t : unshare_t).push_back(Seconds(Clock::now() - t0));
        if (r.exit_code != 0) {
          std::fprintf(stderr, "start-up run failed: %s\n", r.Describe().c_str());
          bench.all_ran = false;
        }
      }
    }
    results["startup_s"] = {{"egressctl_run", Summary(run_t)}, {"unshare", Summary(unshare_t)}};
  }

  std::ofstream("/proc/sys/kernel/bpf_stats_enabled") << stats_before;
  results["loadavg_end"] = Slurp("/proc/loadavg");
  results["all_ran"] = bench.all_ran;
  std::ofstream(opt.out) << results.dump(2) << "\n";
  std::filesystem::remove_all(dir);
  return bench.all_ran ? 0 : 1;
}

}  // namespace
}  // namespace egressd::bench

int main(int argc, char** argv) {
  egressd::bench::Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      opt.quick = true;
    } else if (a == "--only" && i + 1 < argc && std::string(argv[i + 1]) == "dns") {
      opt.only_dns = true;
      ++i;
    } else if (a == "--only" && i + 1 < argc && std::string(argv[i + 1]) == "dnsspeed") {
      opt.only_dnsspeed = true;
      ++i;
    } else if (a == "--out" && i + 1 < argc) {
      opt.out = argv[++i];
    } else {
      std::fprintf(stderr, "usage: enforcer_bench [--quick] [--only dns|dnsspeed] --out FILE.json (got \"%s\")\n", a.c_str());
      return 2;
    }
  }
  if (opt.out.empty()) {
    std::fprintf(stderr, "usage: enforcer_bench [--quick] [--only dns|dnsspeed] --out FILE.json\n");
    return 2;
  }
  return egressd::bench::Main(opt);
}
