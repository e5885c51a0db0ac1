#include "dns_sandboxes.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "egressd_env.h"

namespace egressd::test {

DnsSandbox DnsSandboxes::Add(const std::vector<std::string>& args, bool pod_endpoint) {
  static std::atomic<int> counter{0};
  DnsSandbox s;
  auto cg = Shared().lab().MakeCgroup(absl::StrCat(prefix_, counter++));
  EXPECT_TRUE(cg.ok()) << cg.status();
  if (!cg.ok()) return s;
  s.cgroup = *cg;
  struct stat st {};
  EXPECT_EQ(stat(cg->c_str(), &st), 0) << *cg;
  s.id = st.st_ino;
  std::vector<std::string> argv = {"sandbox", "add", "--cgroup", *cg};
  argv.insert(argv.end(), args.begin(), args.end());
  if (pod_endpoint)
    argv.insert(argv.end(), {"--dns-endpoint4", lab::kPodGatewayV4, "--dns-endpoint6", lab::kPodGatewayV6});
  lab::RunResult r = Shared().Ctl(argv);
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  // Removed at the end even when the add failed half way.
  added_.push_back(s);
  if (r.exit_code != 0) return s;
  nlohmann::json rec = Record(s);
  if (rec.is_object() && rec.contains("dns")) s.port = rec["dns"].value("port", 0);
  added_.back() = s;
  return s;
}

nlohmann::json DnsSandboxes::Record(const DnsSandbox& s) {
  std::ifstream in(absl::StrCat(Shared().runtime_dir(), "/sandboxes/", s.id, ".json"));
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str(), nullptr, false);
}

void DnsSandboxes::RemoveAll() {
  for (const auto& s : added_) Shared().Ctl({"sandbox", "remove", "--cgroup", s.cgroup});
  added_.clear();
}

absl::StatusOr<lab::Background> ServeDns(const std::vector<std::string>& args) {
  lab::RunSpec s;
  s.netns = Shared().lab().node_netns();
  s.env = Shared().CtlEnv();
  s.argv = {lab::BinaryPath("egressctl"), "dns", "serve"};
  s.argv.insert(s.argv.end(), args.begin(), args.end());
  s.timeout = std::chrono::minutes(10);
  auto bg = lab::Start(s);
  if (!bg.ok()) return bg.status();
  for (;;) {
    auto line = bg->ReadOutLine(std::chrono::seconds(10));
    if (!line) return absl::InternalError("dns serve never said ready: " + bg->err());
    if (absl::StartsWith(*line, "ready:")) return std::move(*bg);
  }
}

absl::StatusOr<std::unique_ptr<NodeUdpCounter>> NodeUdpCounter::Add(const std::string& addr, uint16_t port) {
  static std::atomic<int> counter{0};
  const std::string table = absl::StrCat("egrdns", getpid(), "x", counter++);
  const bool v6 = addr.find(':') != std::string::npos;
  lab::RunSpec spec;
  spec.argv = {"nft", "-f", "-"};
  spec.netns = Shared().lab().node_netns();
  spec.stdin_data = absl::StrCat("add table inet ", table, "\n", "add chain inet ", table,
                                 " in { type filter hook input priority -300; }\n", "add rule inet ", table, " in ",
                                 v6 ? "ip6" : "ip", " daddr ", addr, " udp dport ", port, " counter\n");
  lab::RunResult r = lab::Run(spec);
  if (r.exit_code != 0) return absl::InternalError("nft: " + r.Describe());
  return std::unique_ptr<NodeUdpCounter>(new NodeUdpCounter(table));
}

NodeUdpCounter::~NodeUdpCounter() {
  lab::RunSpec spec;
  spec.argv = {"nft", "delete", "table", "inet", table_};
  spec.netns = Shared().lab().node_netns();
  lab::Run(spec);
}

uint64_t NodeUdpCounter::Packets() const {
  lab::RunSpec spec;
  spec.argv = {"nft", "-j", "list", "table", "inet", table_};
  spec.netns = Shared().lab().node_netns();
  lab::RunResult r = lab::Run(spec);
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (!j.is_object() || !j.contains("nftables")) return ~0ull;
  for (const auto& item : j["nftables"]) {
    if (!item.contains("rule")) continue;
    for (const auto& e : item["rule"]["expr"]) {
      if (e.contains("counter")) return e["counter"]["packets"].get<uint64_t>();
    }
  }
  return ~0ull;
}

}  // namespace egressd::test
