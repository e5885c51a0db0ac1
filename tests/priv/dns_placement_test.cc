// Placement 2 of docs/dns.md: several `egressctl run` sandboxes side by side
// in the node's network namespace, each with its proxy in its own egressctl
// process on 127.0.0.1/::1 and a port the registry gave it alone.  Three at
// once: each resolves its own name and gets NXDOMAIN for the others' (which
// never reach the upstream), none connects to an address only another
// learned, none reaches another's endpoint (refused at the hook, a raw packet
// dropped by the backstop, nothing arriving at the endpoint, every refusal
// counted), and every proxy process sits outside every sandbox cgroup.
// Clients: dig, sh and egressd-probe (the 6.1 guest has no python3).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "dns_sandboxes.h"
#include "egressd_env.h"
#include "lab_dns.h"

namespace egressd::test {
namespace {

using namespace std::chrono_literals;
using lab::DnsServer;
using lab::DnsServerSpec;
using lab::Lab;
using lab::ProbeLine;
using lab::RunResult;
using lab::RunSpec;

constexpr const char* kUpstream = lab::kPublicE4;  // the lab's resolver
constexpr const char* kWorld8 = lab::kDns4;        // 8.8.8.8: must see nothing

struct Tenant {
  const char* name;
  const char* addr;
};
constexpr std::array<Tenant, 3> kTenants = {{
    {"one.example", lab::kPublicA4},
    {"two.example", lab::kPublicB4},
    {"three.example", lab::kPublicC4},
}};

// A text section of a run's output: from the line `marker` to the next line
// starting with "ask " or "resolved".
std::string Section(const std::string& out, const std::string& marker) {
  size_t at = out.find(marker + "\n");
  if (at == std::string::npos) return "";
  at += marker.size() + 1;
  size_t end = std::min(out.find("\nask ", at), out.find("\nresolved", at));
  return out.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

uint64_t Counter(const std::string& name) {
  RunResult st = Shared().Ctl({"status", "--json"});
  auto j = nlohmann::json::parse(st.out, nullptr, false);
  const bool found = j.is_object() && j.contains("counters") && j["counters"].contains(name) &&
                     j["counters"][name].is_number_unsigned();
  EXPECT_TRUE(found) << "no counter " << name << ": " << st.Describe();
  return found ? j["counters"][name].get<uint64_t>() : 0;
}

// The cgroup2 directory process `pid` runs in.
std::string CgroupOf(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/cgroup"));
  std::string line, path;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "0::")) path = line.substr(3);
  }
  return path.empty() ? "" : absl::StrCat(Lab::cgroup2_root(), path == "/" ? "" : path);
}

bool Inside(const std::string& dir, const std::string& ancestor) {
  return dir == ancestor || absl::StartsWith(dir, ancestor + "/");
}

class DnsPlacement : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lab::RunningAsRootWithSysAdmin()) return;
    Lab& lab = Shared().lab();
    DnsServerSpec up{.netns = lab.world_netns(), .listen = {kUpstream}};
    for (const auto& t : kTenants) up.records[t.name] = {t.addr};
    auto u = DnsServer::Start(up);
    ASSERT_TRUE(u.ok()) << u.status();
    upstream_ = std::move(*u).release();
    DnsServerSpec w{.netns = lab.world_netns(), .listen = {kWorld8}};
    for (const auto& t : kTenants) w.records[t.name] = {lab::kPublicD4};
    auto w8 = DnsServer::Start(w);
    ASSERT_TRUE(w8.ok()) << w8.status();
    world8_ = std::move(*w8).release();
  }
  static void TearDownTestSuite() {
    delete upstream_;
    delete world8_;
    upstream_ = world8_ = nullptr;
  }
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    ASSERT_NE(upstream_, nullptr);
    Shared().lab().ResetCounters();
  }
  Lab& lab() { return Shared().lab(); }

  static inline DnsServer* upstream_ = nullptr;
  static inline DnsServer* world8_ = nullptr;
};

// The records of the sandboxes `egressctl run` process `pid` registered.
std::optional<nlohmann::json> RunRecord(pid_t pid) {
  const std::string dir = absl::StrCat(Shared().runtime_dir(), "/sandboxes");
  const std::string mark = absl::StrCat("/run-", pid, "-");
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    auto j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (j.is_object() && absl::StrContains(j.value("cgroup_path", ""), mark)) return j;
  }
  return std::nullopt;
}

TEST_F(DnsPlacement, ThreeRunsInTheNodeNetnsEachGetOnlyTheirOwnNamesAddressesAndEndpoint) {
  char dir[] = "/run/egr-dnsplace-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{dir};
  const std::string probe = lab::BinaryPath("egressd-probe");
  const size_t n = kTenants.size();

  std::vector<lab::Background> runs;
  std::vector<std::string> fifos, out(n);
  for (size_t i = 0; i < n; ++i) {
    fifos.push_back(absl::StrCat(dir, "/go", i));
    ASSERT_EQ(mkfifo(fifos[i].c_str(), 0600), 0);
    // Phase 1: its own name, then the others' (NXDOMAIN, whatever they
    // learned); phase 2 once the test says the others' endpoint ports: every
    // connect and every send to another's endpoint.
    std::string script = absl::StrCat("echo ask own; dig +short +time=2 +tries=1 @8.8.8.8 ", kTenants[i].name, "; ");
    std::vector<std::string> batch = {absl::StrCat("'tcp ", kTenants[i].addr, " 80'")};
    for (size_t k = 0; k < n; ++k) {
      if (k == i) continue;
      absl::StrAppend(&script, "echo ask ", kTenants[k].name, "; dig +time=2 +tries=1 @8.8.8.8 ", kTenants[k].name,
                      "; ");
      batch.push_back(absl::StrCat("'tcp ", kTenants[k].addr, " 80'"));
    }
    for (const char* p : {"$pa", "$pb"}) {
      for (const char* op : {"udp-sendto 127.0.0.1", "udp-connected 127.0.0.1", "tcp 127.0.0.1", "raw-udp 127.0.0.1",
                             "udp-sendto ::1"}) {
        batch.push_back(absl::StrCat("\"", op, " ", p, "\""));
      }
    }
    // Then it stays (its endpoint registered) until every run has attacked.
    absl::StrAppend(&script, "echo resolved; read pa pb < ", fifos[i], "; ", probe, " batch ",
                    absl::StrJoin(batch, " "), "; echo attacked; read done < ", fifos[i]);
    RunSpec spec;
    spec.argv = {lab::BinaryPath("egressctl"),
                 "-v",
                 "run",
                 "--host-root",
                 "--egress",
                 kTenants[i].name,
                 "--upstream-dns",
                 kUpstream,
                 "--readable",
                 dir,
                 "--",
                 "sh",
                 "-c",
                 script};
    spec.netns = lab().node_netns();
    spec.env = Shared().CtlEnv();
    spec.timeout = 60s;
    auto bg = lab::Start(spec);
    ASSERT_TRUE(bg.ok()) << bg.status();
    runs.push_back(std::move(*bg));
  }
  // All three registered, served and resolved at once.
  for (size_t i = 0; i < n; ++i) {
    for (;;) {
      auto line = runs[i].ReadOutLine(20s);
      ASSERT_TRUE(line) << "run " << i << " never resolved: " << out[i] << "\n" << runs[i].err();
      if (*line == "resolved") break;
      absl::StrAppend(&out[i], *line, "\n");
    }
  }

  std::vector<uint16_t> ports(n);
  std::vector<std::string> cgroups(n);
  for (size_t i = 0; i < n; ++i) {
    auto rec = RunRecord(runs[i].pid());
    ASSERT_TRUE(rec) << "no record of run " << runs[i].pid();
    ASSERT_TRUE(rec->contains("dns")) << rec->dump();
    EXPECT_EQ((*rec)["dns"].value("addr4", ""), "127.0.0.1") << rec->dump();
    EXPECT_EQ((*rec)["dns"].value("addr6", ""), "::1") << rec->dump();
    ports[i] = (*rec)["dns"].value("port", 0);
    cgroups[i] = rec->value("cgroup_path", "");
    EXPECT_NE(runs[i].err().find(
                  absl::StrCat("serving sandbox ", (*rec)["cgroup_id"].get<uint64_t>(), " at 127.0.0.1:", ports[i])),
              std::string::npos)
        << runs[i].err();
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = i + 1; k < n; ++k) EXPECT_NE(ports[i], ports[k]) << "two runs share an endpoint port";
  }
  // The proxy of each run is its egressctl process: in no sandbox's cgroup,
  // so its upstream sockets are exempt by cgroup, never by a mark.
  for (size_t i = 0; i < n; ++i) {
    const std::string proxy_cgroup = CgroupOf(runs[i].pid());
    ASSERT_FALSE(proxy_cgroup.empty());
    for (size_t k = 0; k < n; ++k) {
      EXPECT_FALSE(Inside(proxy_cgroup, cgroups[k]))
          << "run " << i << "'s proxy runs in " << proxy_cgroup << ", inside sandbox " << cgroups[k];
    }
  }

  // Phase 2, counted: what arrives at each endpoint from now on (no sandbox
  // asks a name any more) and what the kernel refused.
  std::vector<std::unique_ptr<NodeUdpCounter>> at4, at6;
  for (size_t i = 0; i < n; ++i) {
    auto c4 = NodeUdpCounter::Add("127.0.0.1", ports[i]);
    auto c6 = NodeUdpCounter::Add("::1", ports[i]);
    ASSERT_TRUE(c4.ok() && c6.ok()) << c4.status() << " " << c6.status();
    at4.push_back(std::move(*c4));
    at6.push_back(std::move(*c6));
  }
  const uint64_t dns_deny_before = Counter("dns_deny");
  // Held open until each run is done: its `read` takes the line whenever it
  // opens the fifo, never losing it to a close in between.
  struct Fds {
    std::vector<int> fds;
    ~Fds() {
      for (int fd : fds) close(fd);
    }
  } held;
  for (size_t i = 0; i < n; ++i) {
    std::vector<uint16_t> others;
    for (size_t k = 0; k < n; ++k) {
      if (k != i) others.push_back(ports[k]);
    }
    int fd = open(fifos[i].c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << fifos[i] << ": " << strerror(errno);
    const std::string line = absl::StrCat(others[0], " ", others[1], "\n");
    held.fds.push_back(fd);
    EXPECT_EQ(write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  }
  std::vector<std::vector<ProbeLine>> lines(n);
  for (size_t i = 0; i < n; ++i) {
    std::string attacks;
    for (;;) {
      auto line = runs[i].ReadOutLine(30s);
      ASSERT_TRUE(line) << "run " << i << " never finished its attempts: " << attacks << "\n" << runs[i].err();
      if (*line == "attacked") break;
      absl::StrAppend(&attacks, *line, "\n");
    }
    absl::StrAppend(&out[i], attacks);
    lines[i] = lab::ParseProbeLines(attacks);
  }
  // Read while every endpoint is still registered (a gone endpoint is no
  // endpoint: a send there would be judged, and refused, as plain loopback).
  const uint64_t refused = Counter("dns_deny") - dns_deny_before;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(write(held.fds[i], "done\n", 5), 5);
  }
  for (size_t i = 0; i < n; ++i) {
    RunResult r = runs[i].Wait(60s);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
  }

  for (size_t i = 0; i < n; ++i) {
    SCOPED_TRACE(absl::StrCat("run ", i, " (", kTenants[i].name, "):\n", out[i]));
    EXPECT_EQ(std::string(absl::StripAsciiWhitespace(Section(out[i], "ask own"))), kTenants[i].addr);
    for (size_t k = 0; k < n; ++k) {
      if (k == i) continue;
      const std::string ask = Section(out[i], absl::StrCat("ask ", kTenants[k].name));
      EXPECT_NE(ask.find("status: NXDOMAIN"), std::string::npos) << kTenants[k].name;
      EXPECT_NE(ask.find("EDE: 15 (Blocked)"), std::string::npos) << kTenants[k].name;
    }
    // Its own address, then the two only the others learned, then five
    // attempts on each other endpoint.
    ASSERT_EQ(lines[i].size(), 1u + (n - 1) + 5 * (n - 1));
    EXPECT_TRUE(Ok(lines[i][0])) << "its own learned address: " << lines[i][0]["errno"];
    for (size_t k = 1; k < n; ++k) {
      EXPECT_EQ(Errno(lines[i][k]), "EPERM") << "an address only another sandbox learned: " << lines[i][k]["dst"];
    }
    for (size_t k = n; k < lines[i].size(); ++k) {
      ProbeLine& l = lines[i][k];
      if (l["op"] == "raw-udp") {
        EXPECT_ATTEMPTED(l, out[i]);
      } else {
        EXPECT_EQ(Errno(l), "EPERM") << l["op"] << " " << l["dst"] << " " << l["port"];
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(at4[i]->Packets(), 0u) << "a datagram of another sandbox reached endpoint 127.0.0.1:" << ports[i];
    EXPECT_EQ(at6[i]->Packets(), 0u) << "a datagram of another sandbox reached endpoint [::1]:" << ports[i];
  }
  // Five refusals per other endpoint, each counted once: at connect4/6 and
  // sendmsg4/6 for the four socket calls, at the backstop for the raw packet.
  EXPECT_EQ(refused, n * (n - 1) * 5) << "dns_deny grew by " << refused;
  std::printf("placement 2: %zu runs side by side on ports %u %u %u; dns_deny +%llu for %zu direct sends\n", n,
              ports[0], ports[1], ports[2], static_cast<unsigned long long>(refused), n * (n - 1) * 5);

  // Each name was asked upstream once, by its own sandbox (the others'
  // NXDOMAINs asked nothing); each address was reached once, by its owner.
  for (const auto& t : kTenants) {
    EXPECT_TRUE(upstream_->WaitForQuery(t.name, 5s)) << t.name << ": " << upstream_->Log();
    EXPECT_EQ(upstream_->QueriesFor(t.name), 1u) << t.name << ": " << upstream_->Log();
    EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(t.addr, 80) == 1; })) << lab().CountersSummary();
  }
  ASSERT_TRUE(lab().Drain().ok());
  EXPECT_EQ(world8_->Queries(), 0u) << world8_->Log();
  EXPECT_EQ(lab().PacketsTo(kWorld8), 0u) << lab().CountersSummary();

  // Positive control: the same datagram from a process in no sandbox arrives
  // at the endpoint counter, so the zeros above are the kernel's refusals.
  RunSpec control;
  control.argv = {probe, "batch", absl::StrCat("udp-sendto 127.0.0.1 ", ports[0]),
                  absl::StrCat("raw-udp 127.0.0.1 ", ports[0])};
  control.netns = lab().node_netns();
  RunResult c = lab::Run(control);
  ASSERT_EQ(c.exit_code, 0) << c.Describe();
  EXPECT_TRUE(Lab::WaitFor([&] { return at4[0]->Packets() == 2; })) << "the counter saw " << at4[0]->Packets();
}

}  // namespace
}  // namespace egressd::test
