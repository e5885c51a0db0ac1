// daemon_apply_bench: issue 14's load figure.  N sandboxes (default 1,000),
// each with the sandbox axis's policy (100 CIDRs and 50 names,
// bench/sandbox_axis.h), registered through the node daemon's API: one
// `PUT /v1/sandboxes/{id}` each over the unix socket with the library client
// (userspace/daemon/client.h, a fresh connection per request, as an
// orchestrator makes them), timed from the request to the answer, which
// comes only once the policy is in the kernel and the DNS endpoint serves it.
// Beside each PUT, in the same loop (so the machine's load falls on both
// alike), the incumbent's per-pod apply from the benchmark issue: `nft -f` of
// the equivalent ruleset (`egressctl policy compile -o nft`) in a pod network
// namespace of its own.  Also the daemon's RSS (/proc/PID/status) and the
// maps' memory (bpftool's bytes_memlock of every pinned map) before and
// after, and each DELETE's latency at the end.
//
//   daemon_apply_bench [--quick] [--sandboxes N] [--out FILE.json]
// --quick: 20 sandboxes (the smoke CI runs).  Prints a markdown table.
// Never a pass/fail on a figure: exit 0 when every measurement ran, 1 when
// one could not (its reason is in the JSON and on stderr).
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_stats.h"
#include "egressd_env.h"
#include "kernel_figures.h"
#include "lab_dns.h"
#include "scale_inputs.h"
#include "userspace/daemon/client.h"

namespace egressd::bench {
namespace {

constexpr int kCidrs = 100;  // the sandbox axis's policy (sandbox_axis.cc)
constexpr int kNames = 50;
constexpr const char* kUpstream = lab::kPublicE4;  // the daemon's dns.upstreams

// VmRSS and VmHWM of a live process, bytes (0 when unreadable).
std::pair<double, double> Rss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  double rss = 0, hwm = 0;
  while (in >> key) {
    double kb = 0;
    if (key == "VmRSS:" && in >> kb) rss = kb * 1024;
    if (key == "VmHWM:" && in >> kb) hwm = kb * 1024;
    std::string rest;
    std::getline(in, rest);
  }
  return {rss, hwm};
}

bool IpBatch(const std::string& path, const std::vector<std::string>& lines, std::string* err) {
  {
    std::ofstream f(path);
    for (const auto& l : lines) f << l << "\n";
  }
  lab::RunResult r = lab::Run({.argv = {"ip", "-batch", path}, .netns = "", .cgroup = "", .hostile = false,
                               .timeout = std::chrono::seconds(600), .env = {}, .stdin_data = ""});
  if (r.exit_code != 0) *err = r.Describe();
  return r.exit_code == 0;
}

std::string Mib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", bytes / (1 << 20));
  return buf;
}
std::string Ms(double s) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f ms", s * 1e3);
  return buf;
}
std::string Kib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f KiB", bytes / 1024);
  return buf;
}

std::string LoadAvg() {
  std::ifstream la("/proc/loadavg");
  std::string l;
  std::getline(la, l);
  return l;
}

int Main(int n, bool quick, const std::string& out_path) {
  auto& e = test::Shared();
  lab::Lab& lab = e.lab();
  json j;
  j["quick"] = quick;
  j["sandboxes"] = n;
  j["policy"] = {{"cidrs", kCidrs}, {"names", kNames}};
  j["loadavg_start"] = LoadAvg();
  bool ok = true;
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "daemon_apply_bench: %s\n", what.c_str());
    j["error"] = what;
    ok = false;
  };

  char tmpl[] = "/run/egr-daemon-apply-XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::fprintf(stderr, "daemon_apply_bench: mkdtemp /run: %s\n", strerror(errno));
    return 1;
  }
  const std::string dir = tmpl;
  struct Cleanup {
    std::string dir;
    std::vector<std::string> netns;
    ~Cleanup() {
      std::vector<std::string> del;
      for (const auto& name : netns) del.push_back("netns del " + name);
      std::string err;
      if (!del.empty() && !IpBatch(dir + "/del.batch", del, &err)) std::fprintf(stderr, "%s\n", err.c_str());
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir, {}};

  // The policy: the same list as the PUT body and as the incumbent's ruleset.
  json egress = json::array();
  std::string yaml = "egress:\n  allow:\n";
  for (int i = 0; i < kCidrs; ++i) egress.push_back(CidrText(i));
  for (int i = 0; i < kNames; ++i) egress.push_back("svc-" + std::to_string(i) + ".bench.example");
  for (const auto& x : egress) yaml += "    - " + x.get<std::string>() + "\n";
  std::ofstream(dir + "/policy.yaml") << yaml;
  lab::RunResult rules = e.Ctl({"policy", "compile", "-o", "nft", "--policy", dir + "/policy.yaml"});
  if (rules.exit_code != 0) {
    fail("egressctl policy compile -o nft: " + rules.Describe());
    return 1;
  }
  const std::string rules_path = dir + "/policy.nft";
  std::ofstream(rules_path) << rules.out;

  // The daemon, as daemon_test runs it: node netns, the lab's upstream.
  auto upstream = lab::DnsServer::Start(lab::DnsServerSpec{.netns = lab.world_netns(), .listen = {kUpstream}});
  if (!upstream.ok()) {
    fail("upstream dnsmasq: " + upstream.status().ToString());
    return 1;
  }
  const std::string config = dir + "/egressd.yaml";
  std::ofstream(config) << "dns:\n  upstreams: [" << kUpstream << "]\n  endpoint4: " << lab::kPodGatewayV4
                        << "\n  endpoint6: \"" << lab::kPodGatewayV6 << "\"\n";
  const std::string socket = dir + "/egressd.sock";
  lab::RunSpec ds;
  ds.netns = lab.node_netns();
  ds.env = e.CtlEnv();
  ds.argv = {lab::BinaryPath("egressd"), "--config", config, "--socket", socket};
  ds.timeout = std::chrono::hours(4);
  auto daemon = lab::Start(ds);
  if (!daemon.ok()) {
    fail("egressd: " + daemon.status().ToString());
    return 1;
  }
  auto ready = daemon->ReadOutLine(std::chrono::seconds(60));
  if (!ready || ready->rfind("ready:", 0) != 0) {
    fail("egressd never said ready: " + daemon->err());
    return 1;
  }
  const pid_t pid = daemon->pid();
  {
    std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
    std::string c;
    std::getline(comm, c);
    j["daemon_comm"] = c;  // the RSS below is this process's
  }

  // N cgroups and N pod namespaces, not timed.
  std::vector<std::string> cgroups, pods, add;
  for (int i = 0; i < n; ++i) {
    auto cg = lab.MakeCgroup("dapply-" + std::to_string(i));
    if (!cg.ok()) {
      fail("cgroup: " + cg.status().ToString());
      return 1;
    }
    cgroups.push_back(*cg);
    pods.push_back("egl-" + lab.id() + "-p" + std::to_string(20000 + i));
    add.push_back("netns add " + pods.back());
  }
  std::string err;
  if (!IpBatch(dir + "/add.batch", add, &err)) {
    fail("ip netns add: " + err);
    return 1;
  }
  cleanup.netns = pods;

  const auto [rss0, hwm0] = Rss(pid);
  const double maps0 = MapMemlockBytes(e.pin_root());
  const KernelMemory k0 = ReadKernelMemory();
  std::vector<double> put_s, nft_s, delete_s;
  std::vector<int> statuses;
  for (int i = 0; i < n && ok; ++i) {
    const std::string id = "bench-" + std::to_string(i);
    const json body = {{"cgroup", cgroups[i]}, {"egress", egress}, {"labels", {{"pod", id}}}};
    const std::string text = body.dump();
    const auto t0 = Clock::now();
    auto r = daemon::Call(socket, "PUT", "/v1/sandboxes/" + id, text);
    put_s.push_back(Seconds(Clock::now() - t0));
    if (!r.ok() || r->status != 201 || !r->body.value("enforced", false)) {
      fail("PUT " + id + ": " + (r.ok() ? std::to_string(r->status) + " " + r->body.dump() : r.status().ToString()));
      break;
    }
    const auto t1 = Clock::now();
    lab::RunResult nft = lab::Run({.argv = {"nft", "-f", rules_path}, .netns = "/var/run/netns/" + pods[i],
                                   .cgroup = "", .hostile = false, .timeout = std::chrono::seconds(120), .env = {},
                                   .stdin_data = ""});
    nft_s.push_back(Seconds(Clock::now() - t1));
    if (nft.exit_code != 0) {
      fail("nft -f in " + pods[i] + ": " + nft.Describe());
      break;
    }
    if ((i + 1) % 100 == 0) std::fprintf(stderr, "daemon_apply_bench: %d sandboxes\n", i + 1);
  }
  const auto [rss1, hwm1] = Rss(pid);
  const double maps1 = MapMemlockBytes(e.pin_root());
  const KernelMemory k1 = ReadKernelMemory();
  daemon::ClientResponse status;
  if (auto st = daemon::Call(socket, "GET", "/v1/status"); st.ok()) status = *st;

  // DELETE each (the registrations must go anyway).
  for (size_t i = 0; i < put_s.size(); ++i) {
    const auto t0 = Clock::now();
    auto r = daemon::Call(socket, "DELETE", "/v1/sandboxes/bench-" + std::to_string(i));
    delete_s.push_back(Seconds(Clock::now() - t0));
    if (!r.ok() || r->status / 100 != 2) {
      fail("DELETE bench-" + std::to_string(i) + ": " + (r.ok() ? std::to_string(r->status) : r.status().ToString()));
      break;
    }
  }
  // One more request: the daemon's loop has run what the DELETEs queued
  // (the freed endpoints, the heap trim after them) before it answers.
  if (auto st = daemon::Call(socket, "GET", "/v1/status"); st.ok() && st->body.is_object()) {
    j["status_after_deletes"] = {{"sandboxes", st->body.value("sandboxes", -1)},
                                 {"dns_served", st->body["dns"].value("served", -1)}};
  }
  const auto [rss2, hwm2] = Rss(pid);
  kill(pid, SIGTERM);  // never tears enforcement down; nothing of ours is left registered
  daemon->Wait(std::chrono::seconds(20));

  if (put_s.empty() || nft_s.empty() || delete_s.empty()) {
    if (!out_path.empty()) std::ofstream(out_path) << j.dump(2) << "\n";
    return 1;
  }
  const double done = static_cast<double>(put_s.size());
  j["put_s"] = Summary(put_s, true);
  j["nft_f_s"] = Summary(nft_s, true);
  j["delete_s"] = Summary(delete_s, true);
  j["daemon_rss_bytes"] = {{"start", rss0}, {"after_puts", rss1}, {"after_deletes", rss2}, {"hwm", hwm2}};
  j["maps_memlock_bytes"] = {{"start", maps0}, {"after_puts", maps1}};
  j["kernel_slab_percpu_delta_bytes"] = k1.SlabPercpu() - k0.SlabPercpu();  // both enforcers' growth together
  if (status.body.is_object()) j["status_after_puts"] = status.body;
  j["loadavg_end"] = LoadAvg();
  if (!out_path.empty()) std::ofstream(out_path) << j.dump(2) << "\n";

  auto p = [](const json& s, const char* k) { return s.value(k, 0.0); };
  const json& put = j["put_s"];
  const json& nft = j["nft_f_s"];
  std::printf("### The daemon's apply: %d sandboxes of %d CIDRs and %d names\n\n"
              "Reproduce: `sudo bench/run.sh --only daemon-apply --sandboxes %d` (bench/daemon_apply.cc). "
              "PUT: `PUT /v1/sandboxes/{id}` over the unix socket (library client, a connection per request), "
              "answered once the policy is in the kernel and the DNS endpoint serves it; nft -f: the incumbent's "
              "per-pod apply of the same policy (`egressctl policy compile -o nft`) in a pod netns of its own, "
              "a process per apply; each PUT followed by its nft -f, so load falls on both alike.\n\n",
              n, kCidrs, kNames, n);
  std::printf("| sandboxes | PUT p50 [95%% CI] | PUT p99 | nft -f per pod p50 [95%% CI] | nft -f p99 | "
              "nft / PUT (p50) | daemon RSS start -> after PUTs -> after DELETEs | per sandbox | maps memlock start -> after | "
              "DELETE p50 (p99) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  std::printf("| %s | %s [%s, %s] | %s | %s [%s, %s] | %s | %.1fx | %s -> %s -> %s | %s | %s -> %s | %s (%s) |\n",
              std::to_string(put_s.size()).c_str(), Ms(p(put, "median")).c_str(), Ms(put["ci95"][0]).c_str(),
              Ms(put["ci95"][1]).c_str(), Ms(p(put, "p99")).c_str(), Ms(p(nft, "median")).c_str(),
              Ms(nft["ci95"][0]).c_str(), Ms(nft["ci95"][1]).c_str(), Ms(p(nft, "p99")).c_str(),
              p(put, "median") > 0 ? p(nft, "median") / p(put, "median") : 0.0, Mib(rss0).c_str(), Mib(rss1).c_str(),
              Mib(rss2).c_str(),
              Kib(done > 0 ? (rss1 - rss0) / done : 0).c_str(), Mib(maps0).c_str(), Mib(maps1).c_str(),
              Ms(p(j["delete_s"], "median")).c_str(), Ms(p(j["delete_s"], "p99")).c_str());
  std::printf("\nload average at start / end: %s / %s\n", j["loadavg_start"].get<std::string>().c_str(),
              j["loadavg_end"].get<std::string>().c_str());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace egressd::bench

int main(int argc, char** argv) {
  bool quick = false;
  int n = 0;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--sandboxes" && i + 1 < argc) {
      char* end = nullptr;
      const long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 1 || v > 100000) {
        std::fprintf(stderr, "daemon_apply_bench: --sandboxes takes 1-100000 (got \"%s\")\n", argv[i]);
        return 2;
      }
      n = static_cast<int>(v);
    } else if (a == "--out" && i + 1 < argc) {
      out = argv[++i];
    } else {
      std::fprintf(stderr, "usage: daemon_apply_bench [--quick] [--sandboxes N] [--out FILE.json] (got \"%s\")\n",
                   a.c_str());
      return 2;
    }
  }
  if (n == 0) n = quick ? 20 : 1000;
  return egressd::bench::Main(n, quick, out);
}
