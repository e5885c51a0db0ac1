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
//   enforcer_bench [--quick] [--only dns|dnsspeed|startup] --out results.json   (bench/run.sh renders the table and plots)
//
// Files: bench_stats (medians, intervals, the interleaving), loops (connect,
// UDP send, iperf3), kernel_figures (bpf_stats, map and kernel memory),
// sandbox_axis (1/100/1,000 sandboxes), dns_rows (egressd's proxy against the
// incumbent's per-pod forwarder, nft_forwarder.cc), resolved_axis (10 to 100k
// resolved addresses, and the combined cell's fill).  Here: the entries axis
// (with the combined cell: 100k CIDRs + 10k resolved, names on), the
// sandbox's own in-kernel runs (OwnRuns), start-up, and an HTTP request
// under `egressctl run`.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
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
  // --only startup: `egressctl run -- true` and an HTTP request under run
  // alone (7, 7b), on a node with nothing else registered (a minute).
  bool only_startup = false;
  std::string out;
};

constexpr int kStressEntries = 1'000'000;
constexpr uint16_t kIperfPort = 5201;

// One cell of the entries axis: the sizes of its loops.  resolved > 0: the
// combined cell (the 1% goal's "100k CIDRs + 10k resolved addresses, names
// on"): the policy also has a name rule, egressd's sandbox a DNS endpoint,
// and both enforcers hold `resolved` resolved addresses (resolved_axis.h).
struct CellPlan {
  int entries;
  int apply_reps, rounds, conns, sends;
  bool iperf, stress;
  int resolved = 0;
};

// bpf_stats sums (run_time_ns, run_cnt) by program name.
using ProgTotals = std::map<std::string, std::pair<double, double>>;

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
      : e_(e), netns_(netns), dir_(std::move(dir)) {
    // The per-sandbox caps (issue 14: 4096 IPv4 and 1024 IPv6 entries by
    // default) raised to the maps' capacities, as a deployment that wants
    // 100k-entry policies configures them; given to compile and add alike.
    std::ofstream(config_) << "limits:\n  maxCidrEntriesPerSandbox: 1048576\n  maxCidr6EntriesPerSandbox: 262144\n"
                           << "dns:\n  maxAddressesPerSandbox: 1048576\n";
  }

  json Cell(const CellPlan& p);
  bool all_ran = true;

 private:
  test::Egressd& e_;
  const std::string (&netns_)[3];
  const std::string dir_;
  const char* server_ = lab::kPublicA4;
  const std::string config_ = dir_ + "/deployment.yaml";
  int generation_ = 0;
};

// In-kernel ns per run of the sandbox's own runs.  bpf_stats counts every run
// of a program, and the programs sit at the cgroup2 root, so a loop's figure
// also holds other processes' runs (on a shared machine: other sessions'
// connects, which the programs pass at once as "not a sandbox").  The loops
// know their own runs exactly: one connect4 per connect(), one sendmsg4 and
// one backstop run per sendto() of a datagram.  The rest are priced at what
// a run cost during the no-filter loop of the same kind (every run there is
// "not a sandbox"): own ns = (total ns - foreign runs x that price) / own runs.
json OwnRuns(const ProgTotals& egr, const ProgTotals& none, const std::map<std::string, double>& own,
             const char* loop) {
  json out;
  for (const auto& [prog, own_runs] : own) {
    auto e = egr.find(prog);
    if (e == egr.end() || own_runs <= 0) continue;
    const double foreign = std::max(0.0, e->second.second - own_runs);
    auto n = none.find(prog);
    const bool priced = n != none.end() && n->second.second > 0;
    const double price = priced ? n->second.first / n->second.second : 0;
    json j = {{"loop", loop}, {"own_runs", own_runs}, {"all_runs", e->second.second},
              {"all_ns_per_run", e->second.second > 0 ? e->second.first / e->second.second : 0},
              {"foreign_runs", foreign}};
    if (priced || foreign == 0) {
      j["ns"] = std::max(0.0, (e->second.first - foreign * price) / own_runs);
      j["foreign_ns_per_run"] = price;
    } else {
      j["error"] = "foreign runs but no no-filter runs to price them";
    }
    out[prog] = j;
  }
  return out;
}

json Bench::Cell(const CellPlan& p) {
  json cell;
  const std::string task = dir_ + "/task-" + std::to_string(p.entries) + (p.resolved ? "-names" : "") + ".yaml";
  std::ofstream(task) << (p.stress ? TaskYamlV4Heavy(p.entries) : TaskYaml(p.entries))
                      << (p.resolved ? std::string("    - \"") + kBenchScope + "\"\n" : "");
  if (p.stress) cell["generator"] = "v4-heavy: 15 of 16 entries IPv4 (EGR_MAX_ALLOW4 1<<20, EGR_MAX_ALLOW6 1<<18)";

  // ---- (4) apply: egressd (compile + batch map updates) vs nft -f (pre-rendered) ----
  std::vector<double> apply_nft, apply_egr;
  std::string cgroup;
  bool nft_loaded = false;
  for (int rep = 0; rep < p.apply_reps; ++rep) {
    // A policy of its own each time (one more address), so nothing is cached.
    const std::string extra = "192.0.2." + std::to_string(20 + (generation_++ % 200));
    const std::vector<std::string> flags = {"--policy", task, "--egress", server_, "--egress", extra,
                                            "--config", config_};
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
    // Names on: queries steered to the DNS endpoint, as users run it (no
    // query is made in this cell; the resolved entries are written below).
    if (p.resolved) add.insert(add.end(), {"--dns-endpoint4", lab::kPodGatewayV4});
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

  // ---- the combined cell: `resolved` addresses held by both enforcers ----
  if (p.resolved) {
    struct stat st {};
    absl::Status filled = !nft_loaded ? absl::FailedPreconditionError("the incumbent's ruleset did not load")
                          : stat(cgroup.c_str(), &st) != 0 ? absl::InternalError("stat " + cgroup)
                                                            : FillResolvedBoth(e_, st.st_ino, kBenchScope, netns_[1],
                                                                               p.resolved, cell["resolved"]);
    if (!filled.ok()) {
      std::fprintf(stderr, "resolved fill at %d entries: %s\n", p.entries, filled.ToString().c_str());
      cell["error"] = "resolved fill: " + filled.ToString();
      all_ran = false;
      return cell;
    }
  }

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
  ProgTotals prog_total, loop_egr, loop_none;
  // Runs fn under enforcer idx, adding the program runs during egressd's
  // loop to prog_total and loop_egr, and those during the no-filter loop to
  // loop_none (the price of a "not a sandbox" run, OwnRuns).
  auto with_stats = [&](int idx, const std::function<Measured()>& fn) {
    if (idx == 1) return fn();
    const auto before = ProgStats(e_.pin_root());
    Measured m = fn();
    const auto after = ProgStats(e_.pin_root());
    AddProgStats(idx == 2 ? loop_egr : loop_none, before, after);
    if (idx == 2) AddProgStats(prog_total, before, after);
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
  cell["bpf_own"] = OwnRuns(loop_egr, loop_none, {{"egr_connect4", double(p.rounds) * p.conns}}, "connect");
  loop_egr.clear();
  loop_none.clear();
  // ---- (2) unconnected UDP sends: rate and CPU per send ----
  Interleaved udp = Interleave(p.rounds, [&](int idx) {
    return with_stats(idx, [&] {
      return loop_measure(UdpSendLoop(netns_[idx], cgroups[idx], server_, lab::kUdpPorts[0], p.sends), p.sends,
                          "sends", idx);
    });
  });
  Store(udp, cell, "udp_sends_per_s", "cpu_us_per_send");
  cell["bpf_own"].update(OwnRuns(loop_egr, loop_none,
                                 {{"egr_sendmsg4", double(p.rounds) * p.sends},
                                  {"egr_skb_egress", double(p.rounds) * p.sends}},
                                 "udp"));
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

// ---- (7b) the added time of an allowed HTTP request under `egressctl run` ----
// A static file served by python3's http.server on the world host; curl in
// pod 2's netns fetches it `requests` times in one shell loop, timing each
// request itself (-w time_total), so `egressctl run`'s own start-up is not in
// the figure.  Per round, one loop under `egressctl run --egress <server>`
// and one without, order alternated: the ratio and the difference of the two
// loops' median request times.
json HttpUnderRun(test::Egressd& e, const std::string& pod_netns, const std::string& dir, bool quick,
                  bool& all_ran) {
  constexpr uint16_t kHttpPort = 8090;
  const int rounds = quick ? 3 : 9, requests = quick ? 20 : 200;
  json out = {{"rounds", rounds}, {"requests_per_loop", requests}, {"port", kHttpPort}};
  const std::string www = dir + "/www";
  std::filesystem::create_directories(www);
  std::ofstream(www + "/f") << std::string(1024, 'x');
  auto srv = lab::Start({.argv = {"python3", "-u", "-m", "http.server", std::to_string(kHttpPort), "--bind",
                                  lab::kPublicA4, "--directory", www},
                         .netns = e.lab().world_netns(), .cgroup = "", .hostile = false,
                         .timeout = std::chrono::hours(1), .env = {}, .stdin_data = ""});
  std::optional<std::string> ready;
  if (srv.ok()) ready = srv->ReadOutLine(std::chrono::seconds(20));
  if (!srv.ok() || !ready || ready->find("Serving HTTP") == std::string::npos) {
    out["error"] = "python3 -m http.server did not start: " + (srv.ok() ? srv->err() : srv.status().ToString());
    all_ran = false;
    return out;
  }
  const std::string url = std::string("http://") + lab::kPublicA4 + ":" + std::to_string(kHttpPort) + "/f";
  const std::string loop = "for i in $(seq " + std::to_string(requests) +
                           "); do curl -s -o /dev/null --max-time 5 -w '%{http_code} %{time_total}\\n' " + url +
                           "; done";
  // The median request time of one loop, or a negative value when a request
  // was not answered 200.
  auto median_of = [&](const lab::RunResult& r, std::vector<double>& all) {
    std::vector<double> t;
    std::istringstream in(r.out);
    int code = 0;
    double secs = 0;
    while (in >> code >> secs) {
      if (code != 200) return -1.0;
      t.push_back(secs);
    }
    if (r.exit_code != 0 || static_cast<int>(t.size()) != requests) return -1.0;
    all.insert(all.end(), t.begin(), t.end());
    return Summary(t)["median"].get<double>();
  };
  std::vector<double> ratio, diff_us, run_all, plain_all;
  for (int round = 0; round < rounds; ++round) {
    double med[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      const int w = (k + round) % 2;
      lab::RunResult r = w == 0 ? e.CtlIn(pod_netns, {"run", "--egress", lab::kPublicA4, "--", "sh", "-c", loop})
                                : Run({"sh", "-c", loop}, pod_netns, std::chrono::seconds(300));
      med[w] = median_of(r, w == 0 ? run_all : plain_all);
      if (med[w] < 0) {
        std::fprintf(stderr, "http %s: %s\n", w == 0 ? "under egressctl run" : "without", r.Describe().c_str());
        out["error"] = std::string("a request was not answered 200 ") + (w == 0 ? "under egressctl run" : "without");
        all_ran = false;
        return out;
      }
    }
    ratio.push_back(med[0] / med[1]);
    diff_us.push_back((med[0] - med[1]) * 1e6);
  }
  out["request_s"] = {{"egressctl_run", Summary(run_all, true)}, {"without", Summary(plain_all, true)}};
  out["ratio"] = Summary(ratio);
  out["added_us"] = Summary(diff_us);
  return out;
}

int Main(const Options& opt) {
  json results;
  results["loadavg_start"] = Slurp("/proc/loadavg");
  results["nproc"] = sysconf(_SC_NPROCESSORS_ONLN);
  results["kernel"] = Slurp("/proc/sys/kernel/osrelease");
  results["mode"] = opt.quick ? "quick" : "full";
  if (opt.only_dns) results["only"] = "dns";
  if (opt.only_dnsspeed) results["only"] = "dnsspeed";
  if (opt.only_startup) results["only"] = "startup";
  results["date"] = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();

  auto env = test::Egressd::Start();
  if (!env.ok()) {
    std::fprintf(stderr, "enforcer_bench: cannot start the lab and egressd: %s\n", env.status().ToString().c_str());
    return 1;
  }
  test::Egressd& e = **env;
  lab::Lab& lab = e.lab();
  // No row counts captured packets: the capture's copy and wake-up for every
  // frame to the world would be load on every path that no node has.
  if (absl::Status s = lab.SetCapture(false); !s.ok()) {
    std::fprintf(stderr, "enforcer_bench: %s\n", s.ToString().c_str());
    return 1;
  }
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
  if (opt.only_dns || opt.only_dnsspeed || opt.only_startup) {
    // the DNS rows alone (below)
  } else if (opt.quick) {
    plan = {{10, 1, 3, 300, 2000, false, false},
            {1000, 1, 3, 300, 2000, true, false},
            {1000, 1, 3, 300, 2000, false, false, 100}};
  } else {
    plan = {{10, 3, 9, 3000, 20000, false, false},
            {1000, 3, 9, 3000, 20000, false, false},
            {100000, 3, 9, 3000, 20000, true, false},
            {100000, 1, 9, 3000, 20000, false, false, 10000},
            {kStressEntries, 1, 5, 2000, 10000, false, true}};
  }
  Bench bench(e, netns, dir);
  for (const CellPlan& p : plan) {
    // "combined": CIDRs + resolved addresses with names on (the 1% goal's cell).
    results[p.stress ? "stress" : p.resolved ? "combined" : "scales"][std::to_string(p.entries)] = bench.Cell(p);
    std::fprintf(stderr, "enforcer_bench: %d entries done\n", p.entries);
  }

  // ---- (6) DNS: latency and rate, allowed and denied; the resolved-address axis ----
  if (!opt.only_startup) {
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
      // Memory of the resolver-path processes (the sandbox axis's totals): the
      // incumbent runs one forwarder per pod, egressd one proxy per node.
      results["process_memory"] = {{"nftables_forwarder", SmapsRollupBytes((*dns)->forwarder_pid())},
                                   {"egressd_dns_serve", SmapsRollupBytes((*dns)->serve_pid())}};
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
  if (!opt.only_startup) {
    results["sandbox_axis"] = SandboxAxis(e, opt.quick ? std::vector<int>{1, 10} : std::vector<int>{1, 100, 1000},
                                          dir, lab::kPublicA4, bench.all_ran);
  }

  // ---- (7) start-up: egressctl run -- true vs unshare --fork --pid --mount true ----
  // Measured on the node as the sandbox axis left it (its sandboxes still
  // registered, the audit spool unread: no daemon ingests it here), and the
  // row says so: a run's cost must not grow with either (issue 10: 332 ms in
  // the 2026-12-03 run, each run reading every sandbox's record).
  {
    const int n = opt.quick ? 5 : 21;
    auto count = [](const std::string& dir, const std::string& suffix) {
      int k = 0;
      std::error_code ec;
      for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = f.path().filename().string();
        if (name[0] != '.' && name.size() > suffix.size() &&
            name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
          ++k;
      }
      return k;
    };
    const json node = {{"registered_sandboxes", count(e.runtime_dir() + "/sandboxes", ".json")},
                       {"pending_audit_files", count(e.runtime_dir() + "/audit/pending", ".jsonl")}};
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
    results["startup_s"] = {{"egressctl_run", Summary(run_t)}, {"unshare", Summary(unshare_t)}, {"node", node}};
  }
  results["http_under_run"] = HttpUnderRun(e, netns[2], dir, opt.quick, bench.all_ran);

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
    } else if (a == "--only" && i + 1 < argc && std::string(argv[i + 1]) == "startup") {
      opt.only_startup = true;
      ++i;
    } else if (a == "--only" && i + 1 < argc && std::string(argv[i + 1]) == "dnsspeed") {
      opt.only_dnsspeed = true;
      ++i;
    } else if (a == "--out" && i + 1 < argc) {
      opt.out = argv[++i];
    } else {
      std::fprintf(stderr, "usage: enforcer_bench [--quick] [--only dns|dnsspeed|startup] --out FILE.json (got \"%s\")\n", a.c_str());
      return 2;
    }
  }
  if (opt.out.empty()) {
    std::fprintf(stderr, "usage: enforcer_bench [--quick] [--only dns|dnsspeed|startup] --out FILE.json\n");
    return 2;
  }
  return egressd::bench::Main(opt);
}
