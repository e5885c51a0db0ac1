// egressd-demo: the README's first command.  Builds the lab (network
// namespaces with hosts on TEST-NET and metadata addresses; nothing leaves the
// machine), loads egressd under a pin root of its own, runs sandboxed
// commands under several policies as a hostile sandbox would (root, only
// CAP_NET_RAW), and shows what each attempt got and what the lab host saw.
#include <cstdio>
#include <string>
#include <vector>

#include "lab.h"

namespace {

using namespace egressd::lab;

struct Scenario {
  std::string what;
  std::vector<std::string> policy;
  std::vector<std::string> probe;
  const char* dst;
};

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
  const std::string ctl = BinaryPath("egressctl");
  auto ctl_run = [&](std::vector<std::string> args, bool in_client) {
    RunSpec s;
    s.argv = {ctl, "--pin-root", pins};
    s.argv.insert(s.argv.end(), args.begin(), args.end());
    if (in_client) s.netns = (*lab)->client_netns();
    s.timeout = std::chrono::milliseconds(20000);
    return Run(s);
  };
  RunResult load = ctl_run({"load"}, false);
  std::printf("$ egressctl load\n%s%s\n", load.out.c_str(), load.err.c_str());
  if (load.exit_code != 0) return 1;

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
  };

  std::printf("%-40s %-34s %-22s %s\n", "scenario", "policy", "sandbox saw", "lab host received");
  std::printf("%s\n", std::string(120, '-').c_str());
  for (const auto& sc : scenarios) {
    (*lab)->ResetCounters();
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), sc.policy.begin(), sc.policy.end());
    args.insert(args.end(), {"--", "setpriv", "--bounding-set", "-all,+net_raw", "--inh-caps", "-all", "--",
                             BinaryPath("egressd-probe")});
    args.insert(args.end(), sc.probe.begin(), sc.probe.end());
    RunResult r = ctl_run(args, true);
    auto lines = ParseProbeLines(r.out);
    std::string saw = lines.empty() ? "exit " + std::to_string(r.exit_code)
                                    : (Field(lines[0], "result") == "ok" ? "ok" : Field(lines[0], "errno"));
    if (!lines.empty() && Field(lines[0], "op") == "raw-icmp") saw = Field(lines[0], "echo") == "true" ? "echo reply" : "no reply";
    Lab::Settle(std::chrono::milliseconds(200));
    std::string policy;
    for (const auto& p : sc.policy) policy += p + " ";
    if (policy.empty()) policy = "(none)";
    std::printf("%-40s %-34s %-22s %llu packet(s) at %s\n", sc.what.c_str(), policy.c_str(), saw.c_str(),
                static_cast<unsigned long long>((*lab)->PacketsTo(sc.dst)), sc.dst);
  }
  RunResult bad = ctl_run({"run", "--egress", "169.254.0.0/16", "--", "true"}, true);
  std::printf("\n$ egressctl run --egress 169.254.0.0/16 -- true   (exit %d)\n%s", bad.exit_code, bad.err.c_str());
  RunResult status = ctl_run({"status"}, false);
  std::printf("\n$ egressctl status\n%s", status.out.c_str());
  RunResult unload = ctl_run({"unload"}, false);
  std::printf("\n$ egressctl unload\n%s%s", unload.out.c_str(), unload.err.c_str());
  return unload.exit_code;
}
