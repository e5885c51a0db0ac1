// egressd-demo: the README's first command.  Builds the lab (a pod netns
// behind a veth to a node netns, routed to a world netns whose hosts carry
// TEST-NET and metadata addresses; nothing leaves the machine), loads egressd
// in the node netns under a pin root of its own, runs sandboxed commands
// under several policies as a hostile sandbox would (root, only CAP_NET_RAW),
// and shows what each attempt got and what the lab host saw; then registers
// a pod's cgroup as an orchestrator does (with labels) and shows its record.
// Names: a dnsmasq in the world is the upstream egressctl run's own DNS proxy
// asks; the demo shows an allowed name resolving then connecting, its
// address refused before the query, and a denied name getting NXDOMAIN with
// the upstream's query count for it.  Then the node daemon: a pod registered
// through its API, its policy narrowed from a wildcard to one name (that
// name's learned address kept, the other's gone), an upgrade (a second egressd takes over), and a pod whose
// runtime has its own network stack (gVisor, a VM) registered by interface
// and judged at its veth, with the tc program's counters.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "lab.h"
#include "lab_dns.h"

namespace {

using namespace egressd::lab;

struct Scenario {
  std::string what;
  std::vector<std::string> policy;
  std::vector<std::string> probe;
  const char* dst;
  // Set: the sandbox runs `sh -c shell` instead of the probe alone, and the
  // demo shows how many queries the upstream received for `asked`.
  std::string shell;
  std::string asked;
};

constexpr const char* kUpstreamDns = kPublicE4;  // the world's resolver egressd asks

std::string Field(const ProbeLine& l, const char* k) {
  auto it = l.find(k);
  return it == l.end() ? "" : it->second;
}

}  // namespace

int main() {
  if (!RunningAsRootWithSysAdmin()) {
    std::fprintf(stderr, "egressd-demo: run as root (it creates namespaces and loads BPF)\n");
    return 2;
  }
  auto lab = Lab::Create();
  if (!lab.ok()) {
    std::fprintf(stderr, "egressd-demo: cannot build the lab: %s\n", lab.status().ToString().c_str());
    return 1;
  }
  const std::string pins = "/sys/fs/bpf/egr-demo-" + (*lab)->id();
  const std::string runtime = "/run/egressd-demo-" + (*lab)->id();
  const std::string ctl = BinaryPath("egressctl");
  // egressctl in the node's netns (where a DaemonSet's egressd runs), or in
  // the pod's for `egressctl run` beside the workload.
  auto ctl_run = [&](std::vector<std::string> args, bool in_pod) {
    RunSpec s;
    s.argv = {ctl, "--pin-root", pins, "--runtime-dir", runtime};
    s.argv.insert(s.argv.end(), args.begin(), args.end());
    s.netns = in_pod ? (*lab)->client_netns() : (*lab)->node_netns();
    s.env["EGRESSD_NODE_NETNS"] = (*lab)->node_netns();
    // The probe the sandboxes run lives in the build tree, which may lie
    // under /tmp (hidden by the sandbox's private /tmp): carried in read-only.
    const std::string probe = BinaryPath("egressd-probe");
    s.env["EGRESSD_RUN_READABLE"] = probe.substr(0, probe.rfind('/'));
    s.timeout = std::chrono::milliseconds(20000);
    return Run(s);
  };
  auto show = [](const std::string& cmd, const RunResult& r) {
    std::printf("\n$ %s   (exit %d)\n%s%s", cmd.c_str(), r.exit_code, r.out.c_str(), r.err.c_str());
  };
  RunResult load = ctl_run({"load"}, false);
  std::printf("$ egressctl load\n%s%s\n", load.out.c_str(), load.err.c_str());
  if (load.exit_code != 0) return 1;
  // The world's resolver: allowed.example is the lab host 192.0.2.10,
  // denied.example 192.0.2.11.  Every query it receives is logged.
  auto upstream = DnsServer::Start(DnsServerSpec{.netns = (*lab)->world_netns(),
                                                 .listen = {kUpstreamDns},
                                                 .records = {{"allowed.example", {kPublicA4}},
                                                             {"denied.example", {kPublicB4}},
                                                             {"api.agents.example", {kPublicA4}},
                                                             {"files.agents.example", {kPublicB4}}}});
  if (!upstream.ok()) {
    std::fprintf(stderr, "egressd-demo: %s\n", upstream.status().ToString().c_str());
    return 1;
  }
  const std::string probe_bin = BinaryPath("egressd-probe");
  const std::string hostile = "setpriv --bounding-set -all,+net_raw --inh-caps -all -- " + probe_bin;
  const std::vector<std::string> names = {"--egress", "allowed.example", "--upstream-dns", kUpstreamDns};

  const std::vector<Scenario> scenarios = {
      {"no declaration: the connected floor", {}, {"tcp", kPublicA4, "80"}, kPublicA4},
      {"cloud metadata is protected", {}, {"tcp", kImds4, "80"}, kImds4},
      {"...also as ::ffff:169.254.169.254", {}, {"mapped6", kImds4, "80"}, kImds4},
      {"...also from a raw ICMP socket", {}, {"raw-icmp", kImds4}, kImds4},
      {"...also with SO_MARK set", {}, {"so-mark", "1", kImds4, "80"}, kImds4},
      {"declared scope: the named host", {"--egress", kPublicA4}, {"tcp", kPublicA4, "80"}, kPublicA4},
      {"declared scope: anything else", {"--egress", kPublicA4}, {"tcp", kPublicD4, "80"}, kPublicD4},
      {"declared CIDR over IPv6", {"--egress", "2001:db8::/32"}, {"udp-sendto", kPublicA6, "7000"}, kPublicA6},
      {"on-deny drop: a silent hang", {"--egress", kPublicA4, "--on-deny", "drop"}, {"tcp", kPublicD4, "80", "--timeout-ms", "1000"}, kPublicD4},
      {"hosted floor: private ranges", {"--floor", "hosted"}, {"udp-sendto", kPrivate10, "7000"}, kPrivate10},
      {"airgapped floor: literal address", {"--floor", "airgapped"}, {"tcp", kDns4, "443"}, kDns4},
      {"a name: its address before any query", names, {"tcp", kPublicA4, "80"}, kPublicA4, "", "allowed.example"},
      {"an allowed name: resolve, then connect", names, {}, kPublicA4,
       "getent ahostsv4 allowed.example >&2 && " + hostile + " tcp " + kPublicA4 + " 80", "allowed.example"},
      {"a denied name: NXDOMAIN, nothing upstream", names, {}, kPublicB4,
       "dig +time=2 +tries=1 @8.8.8.8 denied.example | grep -o 'status: [A-Z]*'", "denied.example"},
  };

  // Each scenario's audit lines (docs/audit.md), shown after the table.
  const std::string audit_dir = "/run/egressd-demo-audit-" + (*lab)->id();
  (void)mkdir(audit_dir.c_str(), 0700);
  std::vector<std::pair<std::string, std::string>> audit_files;
  std::printf("%-40s %-34s %-22s %s\n", "scenario", "policy", "sandbox saw", "lab host received");
  std::printf("%s\n", std::string(120, '-').c_str());
  for (const auto& sc : scenarios) {
    (*lab)->ResetCounters();
    audit_files.emplace_back(sc.what, audit_dir + "/" + std::to_string(audit_files.size()) + ".jsonl");
    std::vector<std::string> args = {"run", "--audit", audit_files.back().second};
    args.insert(args.end(), sc.policy.begin(), sc.policy.end());
    const uint64_t asked_before = sc.asked.empty() ? 0 : (*upstream)->QueriesFor(sc.asked);
    if (sc.shell.empty()) {
      args.insert(args.end(), {"--", "setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all", "--",
                               probe_bin});
      args.insert(args.end(), sc.probe.begin(), sc.probe.end());
    } else {
      args.insert(args.end(), {"--", "sh", "-c", sc.shell});
    }
    RunResult r = ctl_run(args, true);
    auto lines = ParseProbeLines(r.out);
    std::string saw = lines.empty() ? "exit " + std::to_string(r.exit_code)
                                    : (Field(lines[0], "result") == "ok" ? "ok" : Field(lines[0], "errno"));
    if (const size_t st = r.out.find("status: "); lines.empty() && st != std::string::npos) {
      saw = r.out.substr(st + 8, r.out.find('\n', st) - st - 8);
    }
    if (!lines.empty() && Field(lines[0], "op") == "raw-icmp") saw = Field(lines[0], "echo") == "true" ? "echo reply" : "no reply";
    // Markers sent after the attempt on the same path: once they arrived,
    // anything the attempt sent has arrived too.
    if (auto s = (*lab)->Drain(); !s.ok()) std::fprintf(stderr, "egressd-demo: %s\n", s.ToString().c_str());
    std::string policy;
    for (const auto& p : sc.policy) policy += p + " ";
    if (policy.empty()) policy = "(none)";
    std::printf("%-40s %-34s %-22s %llu packet(s) at %s", sc.what.c_str(), policy.c_str(), saw.c_str(),
                static_cast<unsigned long long>((*lab)->PacketsTo(sc.dst)), sc.dst);
    if (!sc.asked.empty()) {
      std::printf("; upstream got %llu query(ies) for %s",
                  static_cast<unsigned long long>((*upstream)->QueriesFor(sc.asked) - asked_before), sc.asked.c_str());
    }
    std::printf("\n");
  }
  std::printf("\nThe audit trail of each scenario (egressctl audit --input FILE -o compact):\n");
  const std::string all_lines = audit_dir + "/all.jsonl";
  for (const auto& [what, file] : audit_files) {
    RunResult a = ctl_run({"audit", "--input", file, "-o", "compact"}, false);
    std::printf("# %s\n%s%s", what.c_str(), a.out.c_str(), a.err.c_str());
    std::ofstream(all_lines, std::ios::app) << std::ifstream(file).rdbuf();
    (void)unlink(file.c_str());
  }
  // What the denials above would need, as a task.yaml (docs/audit.md).
  RunResult suggest = ctl_run({"audit", "suggest", "--input", all_lines, "--floor", "connected"}, false);
  std::printf("\negressctl audit suggest --input <the lines above> --floor connected:\n%s%s", suggest.out.c_str(),
              suggest.err.c_str());
  (void)unlink(all_lines.c_str());
  (void)rmdir(audit_dir.c_str());
  RunResult bad = ctl_run({"run", "--egress", "169.254.0.0/16", "--", "true"}, true);
  show("egressctl run --egress 169.254.0.0/16 -- true", bad);

  // A pod, as an orchestrator registers it: its cgroup, a declaration and
  // labels; egressd keeps a record of each sandbox beside the maps.
  auto pod_cg = (*lab)->MakeCgroup("pod-agent-7");
  if (!pod_cg.ok()) return 1;
  std::vector<std::string> add = {"sandbox", "add", "--cgroup", *pod_cg, "--egress", kPublicA4, "--label",
                                  "pod=agent-7", "--label", "namespace=evals", "--netns", (*lab)->client_netns()};
  const std::string add_shown = "egressctl sandbox add --cgroup .../pod-agent-7 --egress " + std::string(kPublicA4) +
                                " --label pod=agent-7 --label namespace=evals";
  RunResult added = ctl_run(add, false);
  show(add_shown, added);
  if (added.exit_code == 3) {
    // A node without the bpf LSM cannot contain a pod's packet sockets: the
    // registration is refused unless the operator accepts that, explicitly.
    add.push_back("--accept-uncontained-packet-sockets");
    added = ctl_run(add, false);
    show(add_shown + " --accept-uncontained-packet-sockets", added);
  }
  for (const char* dst : {kPublicA4, kImds4}) {
    if (added.exit_code != 0) break;
    RunResult r = (*lab)->Probe({"tcp", dst, "80"}, *pod_cg, /*hostile=*/true);
    auto lines = ParseProbeLines(r.out);
    std::printf("pod-agent-7 connects to %-16s %s\n", dst,
                lines.empty() ? ("exit " + std::to_string(r.exit_code)).c_str()
                              : (Field(lines[0], "result") == "ok" ? "ok" : Field(lines[0], "errno").c_str()));
  }
  // The node daemon (docs/api.md): the same registration through its API,
  // with the DNS proxy in the daemon (the config names the upstream and the
  // pod gateway as every pod's DNS endpoint).
  const std::string daemon_conf = runtime + "-egressd.yaml";
  std::ofstream(daemon_conf) << "dns:\n  upstreams: [" << kUpstreamDns << "]\n  endpoint4: " << kPodGatewayV4 << "\n";
  const std::string sock = runtime + "/egressd.sock";
  RunSpec ds;
  ds.argv = {BinaryPath("egressd"), "--pin-root", pins, "--runtime-dir", runtime, "--config", daemon_conf,
             "--socket", sock, "-q"};
  if (added.exit_code == 0 && add.back() == "--accept-uncontained-packet-sockets") {
    ds.argv.push_back("--accept-uncontained-packet-sockets");
  }
  ds.netns = (*lab)->node_netns();
  ds.env["EGRESSD_NODE_NETNS"] = (*lab)->node_netns();
  ds.timeout = std::chrono::minutes(5);
  auto daemon = Start(ds);
  auto ready = daemon.ok() ? daemon->ReadOutLine(std::chrono::seconds(30)) : std::nullopt;
  if (ready) {
    std::printf("\n$ egressd --config egressd.yaml   (in the node's netns)\n%s\n", ready->c_str());
    auto pod8 = (*lab)->MakeCgroup("pod-agent-8");
    if (pod8.ok()) {
      show("egressctl sandbox apply agent-8 --cgroup .../pod-agent-8 --egress allowed.example --label pod=agent-8",
           ctl_run({"sandbox", "apply", "agent-8", "--cgroup", *pod8, "--egress", "allowed.example", "--label",
                    "pod=agent-8", "--socket", sock},
                   false));
      RunSpec dig;
      dig.argv = {"sh", "-c", "dig +time=2 +tries=1 +short @8.8.8.8 allowed.example && " + hostile + " tcp " +
                                  kPublicA4 + " 80"};
      dig.netns = (*lab)->client_netns();
      dig.cgroup = *pod8;
      show("(in pod-agent-8) dig @8.8.8.8 allowed.example && egressd-probe tcp 192.0.2.10 80", Run(dig));
      // A policy change keeps what the new policy still allows (docs/dns.md,
      // "Policy changes"): narrowed from a wildcard to one of its names, the
      // pod keeps that name's learned address (not asked again) and loses the
      // other name's at once.
      auto apply8 = [&](const char* egress) {
        return ctl_run({"sandbox", "apply", "agent-8", "--cgroup", *pod8, "--egress", egress, "--label", "pod=agent-8",
                        "--socket", sock},
                       false);
      };
      show("egressctl sandbox apply agent-8 --cgroup .../pod-agent-8 --egress '*.agents.example'",
           apply8("*.agents.example"));
      RunSpec both = dig;
      both.argv = {"sh", "-c", "dig +time=2 +tries=1 +short @8.8.8.8 api.agents.example files.agents.example"};
      show("(in pod-agent-8) dig @8.8.8.8 api.agents.example files.agents.example", Run(both));
      show("egressctl sandbox apply agent-8 --cgroup .../pod-agent-8 --egress api.agents.example   (narrowed)",
           apply8("api.agents.example"));
      const uint64_t api_asked = (*upstream)->QueriesFor("api.agents.example");
      RunSpec after = dig;
      after.argv = {"sh", "-c", hostile + " tcp " + kPublicA4 + " 80; " + hostile + " tcp " + kPublicB4 + " 80"};
      show("(in pod-agent-8) egressd-probe tcp 192.0.2.10 80; egressd-probe tcp 192.0.2.11 80", Run(after));
      std::printf("(the upstream got %llu query(ies) for api.agents.example since the change: its address was kept)\n",
                  static_cast<unsigned long long>((*upstream)->QueriesFor("api.agents.example") - api_asked));
      // An upgrade (docs/operations.md): a second egressd beside the first
      // takes over its sockets and audit reader; the first exits, touching
      // nothing; the pod's DNS and policy never pause.
      auto next = Start(ds);
      auto next_ready = next.ok() ? next->ReadOutLine(std::chrono::seconds(30)) : std::nullopt;
      if (next_ready) {
        std::printf("\n$ egressd --config egressd.yaml   (a second one, as a rolling update starts it)\n%s\n",
                    next_ready->c_str());
        RunResult old_exit = daemon->Wait(std::chrono::seconds(30));
        // Exit 0 is the superseded path (a failed hand-over keeps it serving).
        if (old_exit.exit_code == 0) {
          std::printf("(the first egressd handed over and exited 0, touching no pin or link)\n");
        } else {
          std::printf("(the first egressd exited %d: %s)\n", old_exit.exit_code, old_exit.err.c_str());
        }
        show("(in pod-agent-8) dig @8.8.8.8 allowed.example && egressd-probe tcp 192.0.2.10 80", Run(dig));
        daemon = std::move(next);
      } else {
        std::fprintf(stderr, "egressd-demo: the second egressd did not take over: %s\n",
                     next.ok() ? next->err().c_str() : next.status().ToString().c_str());
      }
      // A pod whose runtime sends from its own network stack (gVisor, a VM):
      // no cgroup hook sees it, so it is registered by its interface and
      // judged per frame at its veth on the node (docs/datapath.md).  Its
      // processes below are in no registered cgroup, as a guest's would be.
      auto vm_pod = (*lab)->AddPod();
      if (vm_pod.ok()) {
        show("egressctl sandbox apply agent-9 --interface-netns <pod netns> --sandbox-runtime gvisor "
             "--egress allowed.example",
             ctl_run({"sandbox", "apply", "agent-9", "--interface-netns", (*vm_pod)->netns, "--sandbox-runtime",
                      "gvisor", "--egress", "allowed.example", "--label", "pod=agent-9", "--socket", sock},
                     false));
        RunSpec vm;
        vm.argv = {"sh", "-c",
                   "dig +time=2 +tries=1 +short @8.8.8.8 allowed.example; " + hostile + " tcp " + kPublicA4 +
                       " 80; " + hostile + " tcp " + kImds4 + " 80; dig +time=2 +tries=1 @8.8.8.8 denied.example | "
                       "grep -o 'status: [A-Z]*'"};
        vm.netns = (*vm_pod)->netns;
        show("(in pod agent-9, judged at its veth) dig allowed.example; egressd-probe tcp 192.0.2.10 80; "
             "egressd-probe tcp 169.254.169.254 80; dig denied.example",
             Run(vm));
        RunSpec tc_metrics;
        tc_metrics.argv = {"sh", "-c", ctl + " --pin-root " + pins + " --runtime-dir " + runtime +
                                           " metrics | grep -E '^egressd_tc_frames_total[{]outcome=\"(pass|deny|reject-rst)\"'"};
        tc_metrics.netns = (*lab)->node_netns();
        show("egressctl metrics | grep egressd_tc_frames_total", Run(tc_metrics));
        show("egressctl sandbox delete agent-9", ctl_run({"sandbox", "delete", "agent-9", "--socket", sock}, false));
      }
      show("egressctl sandbox list", ctl_run({"sandbox", "list", "--socket", sock}, false));
      show("egressctl sandbox delete agent-8", ctl_run({"sandbox", "delete", "agent-8", "--socket", sock}, false));
    }
    kill(daemon->pid(), SIGTERM);
    daemon->Wait();
  } else {
    std::fprintf(stderr, "egressd-demo: egressd did not start: %s\n", daemon.ok() ? daemon->err().c_str() : "");
  }
  (void)unlink(daemon_conf.c_str());
  show("egressctl status", ctl_run({"status"}, false));
  show("egressctl sandbox remove --cgroup .../pod-agent-7",
       ctl_run({"sandbox", "remove", "--cgroup", *pod_cg}, false));
  RunResult unload = ctl_run({"unload"}, false);
  show("egressctl unload", unload);
  RunSpec rm;
  rm.argv = {"rm", "-rf", runtime};
  Run(rm);
  return unload.exit_code;
}
