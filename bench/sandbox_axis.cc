#include "sandbox_axis.h"

#include <cstdio>
#include <fstream>

#include "kernel_figures.h"
#include "scale_inputs.h"

namespace egressd::bench {
namespace {

constexpr int kAxisCidrs = 100;
constexpr int kAxisNames = 50;

// `ip -batch` of one command per namespace: creating 1,000 namespaces is not
// what is timed, so one process does it.
bool IpBatch(const std::string& dir, const std::vector<std::string>& lines, std::string* err) {
  const std::string path = dir + "/ip.batch";
  {
    std::ofstream f(path);
    for (const auto& l : lines) f << l << "\n";
  }
  lab::RunResult r = lab::Run({.argv = {"ip", "-batch", path}, .netns = "", .cgroup = "", .hostile = false,
                               .timeout = std::chrono::seconds(600), .env = {}, .stdin_data = ""});
  if (r.exit_code != 0) *err = r.Describe();
  return r.exit_code == 0;
}

json Bytes(const KernelMemory& after, const KernelMemory& before) {
  return {{"slab_percpu", after.SlabPercpu() - before.SlabPercpu()},
          {"sunreclaim_percpu", after.UnreclaimablePercpu() - before.UnreclaimablePercpu()}};
}

// The pod namespaces made for the axis, deleted whatever happens (a run that
// dies leaves them to the lab's sweep: the names are the lab's pod pattern).
struct PodNamespaces {
  std::string dir;
  std::vector<std::string> names;
  ~PodNamespaces() {
    std::vector<std::string> del;
    for (const auto& name : names) del.push_back("netns del " + name);
    std::string err;
    if (!del.empty() && !IpBatch(dir, del, &err)) std::fprintf(stderr, "enforcer_bench: %s\n", err.c_str());
  }
};

void Accumulate(json& total, const json& delta) {
  for (const auto& [k, v] : delta.items()) total[k] = total.value(k, 0.0) + v.get<double>();
}

}  // namespace

std::string AxisTaskYaml() {
  std::string yaml = "egress:\n  allow:\n";
  for (int i = 0; i < kAxisCidrs; ++i) yaml += "    - " + CidrText(i) + "\n";
  for (int i = 0; i < kAxisNames; ++i) yaml += "    - svc-" + std::to_string(i) + ".bench.example\n";
  return yaml;
}

json SandboxAxis(test::Egressd& e, const std::vector<int>& stages, const std::string& dir, const char* server,
                 bool& all_ran) {
  lab::Lab& lab = e.lab();
  json out;
  const std::string task = dir + "/axis.yaml";
  std::ofstream(task) << AxisTaskYaml();
  const std::vector<std::string> flags = {"--policy", task, "--egress", server};
  std::vector<std::string> compile = {"policy", "compile", "-o", "nft"};
  compile.insert(compile.end(), flags.begin(), flags.end());
  lab::RunResult rules = e.Ctl(compile);
  if (rules.exit_code != 0) {
    out["error"] = "compile -o nft: " + rules.Describe();
    all_ran = false;
    return out;
  }
  const std::string rules_path = dir + "/axis.nft";
  std::ofstream(rules_path) << rules.out;

  // egressd's maps as loaded: preallocated hashes and bucket arrays, paid once
  // per node whatever N is (the per-sandbox growth is measured below).
  out["egressd_maps_at_start_bytes"] = MapMemlockBytes(e.pin_root());
  PodNamespaces pods{dir, {}};
  std::vector<std::string>& netns_names = pods.names;
  json egr_total = json::object(), cgroup_bare = json::object(), nft_total = json::object(),
       netns_bare = json::object();
  double maps_total = 0;
  int have = 0;
  bool nft_stopped = false;
  for (int n : stages) {
    json stage;
    const int add = n - have;
    std::vector<double> egr_apply, nft_apply;

    // egressd: N cgroups (their bare cost measured alone), then registered.
    const KernelMemory m0 = ReadKernelMemory();
    std::vector<std::string> cgroups;
    for (int i = have; i < n; ++i) {
      auto cg = lab.MakeCgroup("axis-" + std::to_string(i));
      if (!cg.ok()) {
        out["error"] = "cgroup: " + cg.status().ToString();
        all_ran = false;
        return out;
      }
      cgroups.push_back(*cg);
    }
    const KernelMemory m1 = ReadKernelMemory();
    const double maps0 = MapMemlockBytes(e.pin_root());
    for (const std::string& cg : cgroups) {
      std::vector<std::string> argv = {"sandbox", "add", "--cgroup", cg};
      argv.insert(argv.end(), flags.begin(), flags.end());
      const auto t0 = Clock::now();
      lab::RunResult r = e.Ctl(argv);
      egr_apply.push_back(Seconds(Clock::now() - t0));
      if (r.exit_code != 0) {
        stage["egressd_error"] = r.Describe();
        all_ran = false;
        break;
      }
    }
    const KernelMemory m2 = ReadKernelMemory();
    const double maps1 = MapMemlockBytes(e.pin_root());
    Accumulate(cgroup_bare, Bytes(m1, m0));
    Accumulate(egr_total, Bytes(m2, m1));
    maps_total += maps1 - maps0;

    // nftables: N bare pod namespaces (their cost alone), then a ruleset each.
    if (!nft_stopped) {
      std::vector<std::string> lines, added;
      for (int i = have; i < n; ++i) {
        added.push_back("egl-" + lab.id() + "-p" + std::to_string(9000 + i));
        lines.push_back("netns add " + added.back());
      }
      std::string err;
      if (!IpBatch(dir, lines, &err)) {
        stage["nftables_error"] = "ip netns add: " + err;
        nft_stopped = true;
        all_ran = false;
      }
      netns_names.insert(netns_names.end(), added.begin(), added.end());
      const KernelMemory m3 = ReadKernelMemory();
      for (const std::string& name : nft_stopped ? std::vector<std::string>{} : added) {
        const auto t0 = Clock::now();
        lab::RunResult r = lab::Run({.argv = {"nft", "-f", rules_path}, .netns = "/var/run/netns/" + name,
                                     .cgroup = "", .hostile = false, .timeout = std::chrono::seconds(120),
                                     .env = {}, .stdin_data = ""});
        nft_apply.push_back(Seconds(Clock::now() - t0));
        if (r.exit_code != 0) {
          stage["nftables_error"] = "nft -f in " + name + ": " + r.Describe();
          nft_stopped = true;
          all_ran = false;
          break;
        }
      }
      const KernelMemory m4 = ReadKernelMemory();
      Accumulate(netns_bare, Bytes(m3, m2));
      Accumulate(nft_total, Bytes(m4, m3));
    } else {
      stage["nftables_error"] = "not run: an earlier stage failed";
    }

    stage["added"] = add;
    stage["apply_s"]["egressd"] = Summary(egr_apply, true);
    if (!nft_apply.empty()) stage["apply_s"]["nftables"] = Summary(nft_apply, true);
    // Cumulative at N: the enforcer's own memory (bare cgroups / namespaces
    // subtracted, each given as its own baseline).
    stage["memory_bytes"] = {{"egressd", egr_total},
                             {"egressd_maps_memlock", maps_total},
                             {"cgroups_bare", cgroup_bare},
                             {"nftables", nft_total},
                             {"netns_bare", netns_bare}};
    out["stages"][std::to_string(n)] = stage;
    have = n;
    std::fprintf(stderr, "enforcer_bench: sandbox axis at %d done\n", n);
  }
  return out;
}

}  // namespace egressd::bench
