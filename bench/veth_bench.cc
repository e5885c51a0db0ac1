// veth_bench: issue 17's figure, packets/s and connect rate through a pod's
// veth with and without egressd's tc program.  Three pods of one lab behind
// veths to the node, the lab's servers on the world host: pod 0 with no
// filter, pod 1 with the incumbent's nftables ruleset in its netns (rendered
// by `egressctl policy compile -o nft`), pod 2 registered with egressd by its
// host-side interface only (`egressctl sandbox add --interface IF`, no
// cgroup: the tc program on the veth is all that judges it, as for a gVisor
// or VM pod).  One policy for both: 1,000 CIDRs and the server.  Every row is
// interleaved round by round with the order rotated and reported as the ratio
// to the no-filter run of the same round (median, distribution-free 95%
// interval), because the machine is shared: only a round's own floor is
// comparable.  The tc programs' in-kernel time per run comes from
// kernel.bpf_stats_enabled (on for the whole run, for every pod: its two
// clock reads per program run are in the figures).  Never a pass/fail on
// time: exit 0 when everything ran and both filters were seen enforcing,
// 1 otherwise.
//
//   veth_bench [--quick] --out results.json    (bench/run.sh --only veth renders the table)
//
// CPU per unit is the loop's own process (user + system).  The kernel here
// charges softirq work to the task it interrupts (no IRQ time accounting), so
// a sender's CPU includes the veth's receive path, the tc program included,
// when that path runs on the sender's return from the transmit (as on an idle
// CPU it does); the in-kernel ns per run is the program's cost alone.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench_stats.h"
#include "egressd_env.h"
#include "kernel_figures.h"
#include "loops.h"
#include "scale_inputs.h"

namespace egressd::bench {
namespace {

constexpr int kPolicyCidrs = 1000;
constexpr uint16_t kIperfPort = 5201;
const std::vector<std::string> kPods = {"none", "nftables", "egressd-tc"};
constexpr int kTc = 2;  // the pod judged at its veth

struct Plan {
  int rounds, conns, sends, iperf_rounds, iperf_seconds;
};

// In-kernel time of the tc programs over the tc pod's runs of one row.
using ProgTotals = std::map<std::string, std::pair<double, double>>;  // name -> (ns, runs)

json ProgRow(const ProgTotals& t, double units) {
  json out = json::object();
  double ns_per_unit = 0;
  for (const auto& [name, v] : t) {
    if (v.second <= 0) continue;
    out[name] = {{"ns_per_run", v.first / v.second}, {"runs", v.second}};
    if (units > 0) out[name]["runs_per_unit"] = v.second / units;
    ns_per_unit += units > 0 ? v.first / units : 0;
  }
  if (units > 0) out["ns_per_unit"] = ns_per_unit;
  return out;
}

class VethBench {
 public:
  VethBench(test::Egressd& e, std::vector<std::string> netns) : e_(e), netns_(std::move(netns)) {}
  bool all_ran = true;

  // Runs fn under pod idx; for the tc pod adds the tc programs' runs (and
  // the units they served) to the row's totals.
  Measured Timed(int idx, ProgTotals& totals, double& units, const std::function<Measured(double&)>& fn) {
    double served = 0;
    if (idx != kTc) return fn(served);
    const auto before = PinnedProgStats(e_.pin_root() + "/progs");
    Measured m = fn(served);
    AddProgStats(totals, before, PinnedProgStats(e_.pin_root() + "/progs"));
    units += served;
    return m;
  }
  Measured Loop(const LoopResult& lr, int n, const char* what, int idx, double& served) {
    if (lr.ok != n) std::fprintf(stderr, "veth_bench: %s: %d of %d %s failed\n", kPods[idx].c_str(), n - lr.ok, n, what);
    served = lr.ok;
    return Measured{lr.wall_s > 0 ? lr.ok / lr.wall_s : 0, lr.ok ? lr.cpu_s / lr.ok * 1e6 : 0, lr.ok == n};
  }

  json Rows(const Plan& p) {
    json rows;
    const char* server = lab::kPublicA4;
    {
      ProgTotals t;
      double units = 0;
      Interleaved r = Interleave(p.rounds, kPods, [&](int idx) {
        return Timed(idx, t, units, [&](double& served) {
          return Loop(ConnectLoop(netns_[idx], "", server, 80, p.conns), p.conns, "connects", idx, served);
        });
      });
      Store(r, kPods, rows["connect"], "connect_per_s", "cpu_us_per_conn");
      rows["connect"]["tc_programs"] = ProgRow(t, units);
      all_ran = all_ran && r.all_ok;
    }
    {
      ProgTotals t;
      double units = 0;
      Interleaved r = Interleave(p.rounds, kPods, [&](int idx) {
        return Timed(idx, t, units, [&](double& served) {
          return Loop(UdpSendLoop(netns_[idx], "", server, lab::kUdpPorts[0], p.sends), p.sends, "sends", idx,
                      served);
        });
      });
      Store(r, kPods, rows["udp_send"], "udp_sends_per_s", "cpu_us_per_send");
      rows["udp_send"]["tc_programs"] = ProgRow(t, units);
      all_ran = all_ran && r.all_ok;
    }
    auto srv = StartIperf3Server(e_.lab(), server, kIperfPort);
    if (!srv.ok()) {
      rows["iperf3_error"] = srv.status().ToString();
      all_ran = false;
      return rows;
    }
    for (bool udp : {false, true}) {
      ProgTotals t;
      double units = 0;
      Interleaved r = Interleave(p.iperf_rounds, kPods, [&](int idx) {
        return Timed(idx, t, units, [&](double& served) {
          IperfResult ir = Iperf3(netns_[idx], "", server, kIperfPort, udp, p.iperf_seconds);
          if (!ir.ok) std::fprintf(stderr, "veth_bench: iperf3 (%s) under %s: %s\n", udp ? "udp" : "tcp",
                                   kPods[idx].c_str(), ir.error.c_str());
          // UDP: datagrams received; TCP: no unit count (runs per GB would
          // need the bytes: ns per run is the figure).
          served = udp ? ir.value * p.iperf_seconds : 0;
          return Measured{ir.value, ir.cpu_per_unit, ir.ok};
        });
      });
      const std::string row = udp ? "iperf_udp64" : "iperf_tcp";
      Store(r, kPods, rows[row], udp ? "iperf_udp64_pps" : "iperf_tcp_bps",
            udp ? "iperf_udp64_cpu_us_per_dgram" : "iperf_tcp_cpu_s_per_gb");
      rows[row]["tc_programs"] = ProgRow(t, units);
      all_ran = all_ran && r.all_ok;
    }
    return rows;
  }

 private:
  test::Egressd& e_;
  const std::vector<std::string> netns_;
};

// Both filters judge: a connect to a host the policy does not name fails from
// their pods and succeeds from the unfiltered one.  Without this a filter
// that never attached would pass for a free one.
json Enforcing(test::Egressd& e, const std::vector<std::string>& netns, bool& all_ran) {
  json out;
  for (size_t i = 0; i < netns.size(); ++i) {
    lab::RunResult r = e.lab().ProbeIn(netns[i], {"tcp", lab::kPublicB4, "80", "--timeout-ms", "1000"}, "",
                                       /*hostile=*/false);
    const auto lines = test::Lines(r);
    const bool connected = lines.size() == 1 && test::Ok(lines[0]);
    const bool as_expected = i == 0 ? connected : !connected;
    out[kPods[i]] = {{"denied_host_connected", connected}, {"as_expected", as_expected}};
    if (!as_expected) {
      std::fprintf(stderr, "veth_bench: %s: a connect to %s %s: %s\n", kPods[i].c_str(), lab::kPublicB4,
                   connected ? "connected" : "failed", r.Describe().c_str());
      all_ran = false;
    }
  }
  return out;
}

int Main(bool quick, const std::string& out_path) {
  json results;
  results["loadavg_start"] = Slurp("/proc/loadavg");
  results["nproc"] = sysconf(_SC_NPROCESSORS_ONLN);
  results["kernel"] = Slurp("/proc/sys/kernel/osrelease");
  results["mode"] = quick ? "quick" : "full";
  results["date"] = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
  results["pods"] = kPods;
  results["policy"] = std::to_string(kPolicyCidrs) + " CIDRs (bench/scale_inputs.h) and the server";
  // Many short rounds rather than a few long ones: on a shared 2-CPU host a
  // loop's rate swings with whatever else runs (850 to 13,500 connects/s
  // within one run of 3,000-connect rounds), and a round's pods only share
  // a background load when the round is short.
  const Plan plan = quick ? Plan{5, 300, 2000, 3, 1} : Plan{41, 1000, 5000, 15, 2};
  results["plan"] = {{"rounds", plan.rounds}, {"connects", plan.conns}, {"sends", plan.sends},
                     {"iperf_rounds", plan.iperf_rounds}, {"iperf_seconds", plan.iperf_seconds}};

  auto env = test::Egressd::Start();
  if (!env.ok()) {
    std::fprintf(stderr, "veth_bench: cannot start the lab and egressd: %s\n", env.status().ToString().c_str());
    return 1;
  }
  test::Egressd& e = **env;
  lab::Lab& lab = e.lab();
  // No row counts captured packets: the capture's copy and wake-up for every
  // frame to the world would be load on every path that no node has.
  if (absl::Status s = lab.SetCapture(false); !s.ok()) {
    std::fprintf(stderr, "veth_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  auto nft_pod = lab.AddPod();
  auto tc_pod = lab.AddPod();
  if (!nft_pod.ok() || !tc_pod.ok()) {
    std::fprintf(stderr, "veth_bench: cannot add pods\n");
    return 1;
  }
  const std::vector<std::string> netns = {lab.client_netns(), (*nft_pod)->netns, (*tc_pod)->netns};
  const std::string dir = "/tmp/egr-veth-bench-" + lab.id();
  std::filesystem::create_directories(dir);
  const std::string task = dir + "/task.yaml";
  std::ofstream(task) << TaskYaml(kPolicyCidrs);
  const std::vector<std::string> policy = {"--policy", task, "--egress", lab::kPublicA4};
  bool all_ran = true;
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "veth_bench: %s\n", what.c_str());
    std::filesystem::remove_all(dir);
    return 1;
  };

  // The incumbent: the same policy as an nftables ruleset in pod 1's netns.
  std::vector<std::string> compile = {"policy", "compile", "-o", "nft"};
  compile.insert(compile.end(), policy.begin(), policy.end());
  lab::RunResult rules = e.Ctl(compile);
  if (rules.exit_code != 0) return fail("policy compile -o nft: " + rules.Describe());
  lab::RunResult loaded = lab::Run({.argv = {"nft", "-f", "-"}, .netns = netns[1], .cgroup = "", .hostile = false,
                                    .timeout = std::chrono::seconds(120), .env = {}, .stdin_data = rules.out});
  if (loaded.exit_code != 0) return fail("nft -f in the nftables pod: " + loaded.Describe());
  // egressd: pod 2 by its host-side interface alone.
  std::vector<std::string> add = {"sandbox", "add", "--interface", (*tc_pod)->node_ifname};
  add.insert(add.end(), policy.begin(), policy.end());
  lab::RunResult added = e.Ctl(add);
  if (added.exit_code != 0) return fail("sandbox add --interface: " + added.Describe());
  results["enforcing"] = Enforcing(e, netns, all_ran);

  // bpf_stats: global, so restored at exit.
  const std::string stats_before = Slurp("/proc/sys/kernel/bpf_stats_enabled");
  std::ofstream("/proc/sys/kernel/bpf_stats_enabled") << "1";
  VethBench bench(e, netns);
  results["rows"] = bench.Rows(plan);
  std::ofstream("/proc/sys/kernel/bpf_stats_enabled") << stats_before;
  all_ran = all_ran && bench.all_ran;
  // The program must have judged the tc pod's packets, or its rows say nothing.
  const json& tc = results["rows"]["connect"]["tc_programs"];
  if (!tc.contains("egr_tc_ingress") || tc["egr_tc_ingress"].value("runs", 0.0) < double(plan.rounds) * plan.conns) {
    std::fprintf(stderr, "veth_bench: egr_tc_ingress ran fewer times than the connects: %s\n", tc.dump().c_str());
    all_ran = false;
  }

  lab::RunResult rm = e.Ctl({"sandbox", "remove", "--interface", (*tc_pod)->node_ifname});
  if (rm.exit_code != 0) std::fprintf(stderr, "veth_bench: sandbox remove: %s\n", rm.Describe().c_str());
  results["loadavg_end"] = Slurp("/proc/loadavg");
  results["all_ran"] = all_ran;
  std::ofstream(out_path) << results.dump(2) << "\n";
  std::filesystem::remove_all(dir);
  return all_ran ? 0 : 1;
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
      std::fprintf(stderr, "usage: veth_bench [--quick] --out FILE.json (got \"%s\")\n", a.c_str());
      return 2;
    }
  }
  if (out.empty()) {
    std::fprintf(stderr, "usage: veth_bench [--quick] --out FILE.json\n");
    return 2;
  }
  return egressd::bench::Main(quick, out);
}
