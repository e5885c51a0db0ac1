// The audit trail (issue 13) on the lab: a hostile sandbox's connects and
// sends as records with the right fields, floods folded in the kernel with
// the counts adding up exactly to the kernel's counters, one sandbox's flood
// costing another nothing, one reader per ring serving several `egressctl run
// --audit` side by side, a reader that was not running losing nothing, and a
// lone record readable within the reader's drain period though nothing wakes
// the reader for it.
#include <bpf/bpf.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "egressd_env.h"
#include "lab_dns.h"
#include "maps/egressd_abi.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;  // addresses

// 1M denied datagrams in a burst (the figure), fewer where programs
// run slower (EGR_TIME_SCALE).
long long Scaled(long long n) { return std::max<long long>(1000, static_cast<long long>(n / TimeScale())); }

std::vector<nlohmann::json> ReadLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << path << ": not JSON: " << line;
    if (!j.is_discarded()) out.push_back(j);
  }
  return out;
}

// Occurrences a stream stands for: the records' counts and the losses.
struct Tally {
  long long counted = 0, lost = 0, records = 0, summaries = 0;
  std::set<uint64_t> sandboxes;
};
Tally Sum(const std::vector<nlohmann::json>& lines, const std::string& type) {
  Tally t;
  for (const auto& j : lines) {
    if (j.contains("sandbox")) t.sandboxes.insert(j["sandbox"]["id"].get<uint64_t>());
    if (j["type"] == "loss") t.lost += j["lost"].get<long long>();
    if (j["type"] != type) continue;
    t.counted += j["count"].get<long long>();
    if (j.value("summary", false))
      ++t.summaries;
    else
      ++t.records;
  }
  return t;
}

std::map<std::string, long long> Counters() {
  RunResult r = Shared().Ctl({"status", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  std::map<std::string, long long> c;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (j.is_discarded() || !j.contains("counters")) return c;
  for (auto& [k, v] : j["counters"].items()) c[k] = v.get<long long>();
  return c;
}

class Audit : public testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    char tmpl[] = "/tmp/egr-audit-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) (void)system(("rm -rf " + dir_).c_str());
  }
  std::string File(const std::string& name) const { return dir_ + "/" + name; }
  // `egressctl run --audit FILE POLICY... -- probe...`
  RunResult Run(const std::string& audit, std::vector<std::string> policy,
                const std::vector<std::string>& probe) {
    policy.insert(policy.begin(), {"--audit", audit});
    RunResult r = Shared().RunSandboxed(policy, probe);
    last_ = r.Describe();
    return r;
  }
  std::string dir_, last_;
};

TEST_F(Audit, ConnectsAllowedAndDeniedAreRecordedWithTheirFields) {
  const std::string f = File("fields.jsonl");
  RunResult r = Run(f, {"--egress", kPublicA4, "--label", "pod=web-1", "--label",
                        "namespace=ci"},
                    {"tcp", kPublicA4, "80", "--then", "tcp", kPublicB4, "80"});
  ASSERT_EQ(r.exit_code, 0) << last_;
  auto probe = Lines(r);
  ASSERT_EQ(probe.size(), 2u) << last_;
  EXPECT_EQ(probe[0]["result"], "ok") << last_;
  EXPECT_EQ(probe[1]["errno"], "EPERM") << last_;

  auto lines = ReadLines(f);
  std::vector<nlohmann::json> connects;
  for (auto& j : lines) {
    if (j["type"] == "connect") connects.push_back(j);
  }
  ASSERT_EQ(connects.size(), 2u) << r.out;
  const auto& allow = connects[0];
  const auto& deny = connects[1];
  EXPECT_EQ(allow["schema"], "egressd.audit/v1");
  EXPECT_EQ(allow["verdict"], "allow");
  EXPECT_EQ(allow["reason"], "allowed-cidr");
  EXPECT_EQ(allow["IP"]["destination"], kPublicA4);
  EXPECT_EQ(allow["l4"]["TCP"]["destination_port"], 80);
  EXPECT_EQ(allow["process"]["binary"], "egressd-probe");
  EXPECT_EQ(allow["process"]["uid"], 0);
  EXPECT_GT(allow["process"]["pid"].get<int>(), 1);
  EXPECT_EQ(allow["pod"]["name"], "web-1");
  EXPECT_EQ(allow["pod"]["namespace"], "ci");
  EXPECT_EQ(allow["count"], 1);
  EXPECT_EQ(allow["cgroup_id"], allow["sandbox"]["id"]);
  EXPECT_EQ(deny["verdict"], "deny");
  EXPECT_EQ(deny["action"], "reject");
  EXPECT_EQ(deny["reason"], "default-deny");
  EXPECT_EQ(deny["IP"]["destination"], kPublicB4);
  EXPECT_EQ(deny["process"]["pid"], allow["process"]["pid"]);
  EXPECT_EQ(deny["sandbox"]["id"], allow["sandbox"]["id"]);
  EXPECT_LT(allow["seq"].get<uint64_t>(), deny["seq"].get<uint64_t>());
  EXPECT_LT(allow["time"].get<std::string>(), deny["time"].get<std::string>());
  // A protected range reads as such, whatever the policy allows.
  const std::string g = File("protected.jsonl");
  r = Run(g, {}, {"tcp", kImds4, "80"});
  ASSERT_EQ(r.exit_code, 0) << last_;
  auto t = Sum(ReadLines(g), "connect");
  ASSERT_EQ(t.records, 1) << r.out;
  for (auto& j : ReadLines(g)) {
    if (j["type"] == "connect") {
      EXPECT_EQ(j["reason"], "protected");
    }
  }
}

// `run` records the PID namespace it makes its sandbox in, and a record of a
// process that is still there names its ids in it (`process.ns_pid`,
// `ns_tid`) beside the node's.  The probe connects, then blocks opening a
// FIFO for writing until the test has read the record.
TEST_F(Audit, RecordsNameThePidInTheSandboxsOwnNamespace) {
  const std::string f = File("nspid.jsonl"), fifo = File("go");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0666), 0);
  auto bg = Shared().StartSandboxed({"--audit", f, "--egress", kPublicA4, "--readable", dir_},
                                    {"info", "--then", "tcp", kPublicA4, "80", "--then", "open-write", fifo});
  ASSERT_TRUE(bg.ok()) << bg.status();
  auto info_line = bg->ReadOutLine(std::chrono::seconds(20));
  ASSERT_TRUE(info_line) << bg->err();
  auto info = nlohmann::json::parse(*info_line);
  const int own_pid = info["pid"].get<int>();
  nlohmann::json connect;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(static_cast<int>(20 * TimeScale()));
  while (connect.is_null() && std::chrono::steady_clock::now() < deadline) {
    for (auto& j : ReadLines(f)) {
      if (j["type"] == "connect") connect = j;
    }
    if (connect.is_null()) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the file grows
  }
  // What the reader went by, for a failure's message: the record's
  // namespace, the task's.
  std::string context;
  if (!connect.is_null()) {
    std::ifstream rec(Shared().runtime_dir() + "/sandboxes/" + connect["sandbox"]["id"].dump() + ".json");
    auto j = nlohmann::json::parse(rec, nullptr, false);
    struct stat st {};
    const std::string task = "/proc/" + connect["process"]["pid"].dump();
    stat((task + "/ns/pid").c_str(), &st);
    std::ifstream cg(task + "/cgroup");
    std::stringstream cgs;
    cgs << cg.rdbuf();
    context = "record pidns " + (j.is_discarded() ? std::string("?") : j.value("pidns_inode", nlohmann::json()).dump()) +
              ", task pidns " + std::to_string(st.st_ino) + ", task cgroup " + cgs.str();
  }
  int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // lets the probe go
  RunResult r = bg->Wait();
  if (reader >= 0) close(reader);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  ASSERT_FALSE(connect.is_null()) << "no connect record in " << f;
  EXPECT_EQ(connect["process"]["ns_pid"], own_pid) << connect.dump() << "\n" << context << "\n" << r.err;
  EXPECT_EQ(connect["process"]["ns_tid"], own_pid) << connect.dump();
  EXPECT_NE(connect["process"]["pid"], own_pid) << "the node's pid is another";
  EXPECT_GT(own_pid, 1);  // not the sandbox's init
}

// What only the backstop sees (a raw socket passes no connect or sendmsg
// hook) is a record of the packet it dropped, without a process: the
// backstop may run in softirq, where "current" is not the sender.
TEST_F(Audit, BackstopDropsAreRecordedWithoutAProcess) {
  const std::string f = File("raw.jsonl");
  RunResult r = Run(f, {}, {"raw-udp", kImds4, "7000"});
  ASSERT_EQ(r.exit_code, 0) << last_;
  EXPECT_ATTEMPTED(Only(r), last_);
  std::vector<nlohmann::json> drops;
  for (auto& j : ReadLines(f)) {
    if (j["type"] == "backstop") drops.push_back(j);
  }
  ASSERT_EQ(drops.size(), 1u) << r.out;
  EXPECT_EQ(drops[0]["verdict"], "deny");
  EXPECT_EQ(drops[0]["reason"], "backstop:protected");
  EXPECT_EQ(drops[0]["IP"]["destination"], kImds4);
  EXPECT_EQ(drops[0]["l4"]["UDP"]["destination_port"], 7000);
  EXPECT_FALSE(drops[0]["process"].contains("pid"));
  EXPECT_EQ(drops[0]["process"]["uid"], 0);

  const std::string g = File("icmp.jsonl");
  r = Run(g, {}, {"raw-icmp", kImds4});
  ASSERT_EQ(r.exit_code, 0) << last_;
  drops.clear();
  for (auto& j : ReadLines(g)) {
    if (j["type"] == "backstop") drops.push_back(j);
  }
  ASSERT_EQ(drops.size(), 1u) << r.out;
  EXPECT_EQ(drops[0]["reason"], "backstop:protected");
  EXPECT_TRUE(drops[0]["l4"].contains("ICMPv4")) << drops[0].dump();
}

TEST_F(Audit, DeniedUdpBurstAddsUpExactly) {
  const long long n = Scaled(1000000);
  const std::string f = File("burst.jsonl");
  auto before = Counters();
  RunResult r = Run(f, {"--egress", kPublicA4},
                    {"udp-burst", kPublicB4, "7000", std::to_string(n)});
  ASSERT_EQ(r.exit_code, 0) << last_;
  ProbeLine p = Only(r);
  ASSERT_EQ(p["refused"], std::to_string(n)) << last_;
  auto after = Counters();
  auto lines = ReadLines(f);
  Tally t = Sum(lines, "send");
  EXPECT_EQ(t.counted + t.lost, n) << "records " << t.records << " summaries " << t.summaries;
  EXPECT_EQ(after["sendmsg_deny"] - before["sendmsg_deny"], n);
  EXPECT_EQ((after["event_submitted"] - before["event_submitted"]) +
                (after["event_folded"] - before["event_folded"]) + (after["event_lost"] - before["event_lost"]),
            n);
  EXPECT_EQ(after["event_lost"] - before["event_lost"], t.lost);
  // One socket, one destination: the first send is a record, the rest folded.
  EXPECT_GE(t.records, 1);
  EXPECT_GE(t.summaries, 1);
  EXPECT_LT(t.records + t.summaries, 100) << "a flood must be summarised, not recorded one by one";
  EXPECT_EQ(t.sandboxes.size(), 1u);
}

// A --audit FILE with its rotated predecessors (spdlog's names: a.jsonl,
// a.1.jsonl ... a.4.jsonl), oldest first.
std::vector<nlohmann::json> ReadRotated(const std::string& path) {
  std::vector<nlohmann::json> all;
  const size_t dot = path.rfind('.');
  const bool ext = dot != std::string::npos && dot > path.rfind('/');
  for (int i = 4; i >= 0; --i) {
    const std::string n = std::to_string(i);
    const std::string f = !i ? path : ext ? path.substr(0, dot) + "." + n + path.substr(dot) : path + "." + n;
    if (access(f.c_str(), F_OK) != 0) continue;
    auto part = ReadLines(f);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

uint64_t BootNs() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Follows a file as it is written (every 2 ms) and keeps, for each line, the
// CLOCK_BOOTTIME at which it was first readable: the export time of a
// record, as a reader of the file sees it (an upper bound: our own polling
// counts against it).
class ArrivalTail {
 public:
  explicit ArrivalTail(std::string path) : path_(std::move(path)), thread_([this] { Loop(); }) {}
  ~ArrivalTail() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // (line, boot time it was readable), in file order; call after Stop().
  // Parsed here, after the tail stopped: the tail itself only reads and
  // stamps, so its timestamps are the bytes' arrival, not the end of a
  // parse of the lines before (test bodies build at -O0, where parsing a
  // record costs tens of microseconds: parsing in the loop made the tail
  // itself fall behind by half a second and stole a core from the reader
  // under test).
  std::vector<std::pair<nlohmann::json, uint64_t>> lines() const {
    std::vector<std::pair<nlohmann::json, uint64_t>> out;
    out.reserve(raw_.size());
    for (const auto& [line, seen] : raw_) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded()) out.emplace_back(std::move(j), seen);
    }
    return out;
  }

 private:
  void Loop() {
    std::string pending;
    int fd = -1;
    for (;;) {
      const bool last = stop_;  // one more read after the stop, then out
      if (fd < 0) fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        char buf[1 << 16];
        ssize_t n;
        while ((n = read(fd, buf, sizeof(buf))) > 0) {
          const uint64_t now = BootNs();
          pending.append(buf, static_cast<size_t>(n));
          size_t start = 0, nl;
          while ((nl = pending.find('\n', start)) != std::string::npos) {
            raw_.emplace_back(pending.substr(start, nl - start), now);
            start = nl + 1;
          }
          pending.erase(0, start);
        }
      }
      if (last) break;
      usleep(2000);
    }
    if (fd >= 0) close(fd);
  }
  std::string path_;
  std::atomic<bool> stop_{false};
  std::vector<std::pair<std::string, uint64_t>> raw_;
  std::thread thread_;
};

// The A/B test: sandbox A sends 1M denied datagrams and asks 100k
// unique names outside its scope (through its DNS redirect to its run's
// proxy, which answers NXDOMAIN itself), both at once, while sandbox B makes
// 10k allowed connections.  Every one of B's connects is a record of its own
// in B's file, none later than one fold window (1 s) after it happened, and
// A's counts add up: its kernel records' counts plus the kernel's losses are
// every send it made, its DNS records plus the proxy's reported losses are
// every query the proxy answered, and none of its names reached the lab's
// resolver (which saw A's one allowed name: the positive control).
// "Later" is the time a line became readable in B's --audit file (polled
// every 2 ms by this test, on CLOCK_BOOTTIME) minus the connect's
// kernel.boot_ns (the kernel's bpf_ktime_get_boot_ns() when the hook ran).
// Counts scale down under EGR_TIME_SCALE, the 1 s bound does not: the TCG
// guests leave this case to the host (vmtests/host-only).
TEST_F(Audit, OneSandboxsFloodCostsAnotherNothing) {
  const long long n = Scaled(1000000), names = Scaled(100000), m = Scaled(10000);
  constexpr uint64_t kWindowNs = 1000000000ull;  // the holder's fold window (trail.h)
  const std::string fa = File("a.jsonl"), fb = File("b.jsonl");
  const std::string suffix = "flood-" + std::to_string(getpid()) + ".denied.example";
  const std::string control = "okflood.example";
  auto upstream = lab::DnsServer::Start(lab::DnsServerSpec{
      .netns = Shared().lab().world_netns(),
      .listen = {kPublicE4},
      .extra_args = {"--address=/" + control + "/" + std::string(kPublicC4)}});
  ASSERT_TRUE(upstream.ok()) << upstream.status();
  auto before = Counters();

  // A: both floods at once in one sandbox, then one allowed name.
  const std::string probe = lab::BinaryPath("egressd-probe");
  const std::string script =
      probe + " udp-burst " + kPublicB4 + " 7000 " + std::to_string(n) + " & " + probe + " dns-names 8.8.8.8 53 " +
      suffix + " " + std::to_string(names) + " --window 64; wait; " + probe + " dns-names 8.8.8.8 53 " + control + " 1";
  lab::RunSpec sa;
  sa.argv = {lab::BinaryPath("egressctl"), "run", "--host-root", "--audit", fa, "--egress", kPublicA4,
             "--egress", "*." + control, "--upstream-dns", kPublicE4, "--", "setpriv", "--bounding-set",
             "-all,+net_raw", "--inh-caps", "-all", "--", "sh", "-c", script};
  sa.netns = Shared().lab().client_netns();
  sa.env = Shared().CtlEnv();
  sa.timeout = std::chrono::milliseconds(static_cast<long long>(180000 * TimeScale()));
  auto flood = lab::Start(sa);
  ASSERT_TRUE(flood.ok()) << flood.status();
  // B starts once both of A's floods are under way: the first kernel record
  // of each is in A's file.
  // Read on from where the last look stopped (A's file grows by the
  // thousand lines a second: parsing all of it at every look competed with
  // the reader under test for the CPU).
  bool datagrams = false, queries = false;
  std::ifstream fa_in;
  std::string fa_partial;
  const bool flooding = Lab::WaitFor(
      [&] {
        if (!fa_in.is_open()) fa_in.open(fa);
        if (!fa_in.is_open()) return false;
        fa_in.clear();  // past the end last time: read what was written since
        std::string chunk;
        while (std::getline(fa_in, chunk)) {
          if (fa_in.eof()) {  // the writer may be half way through its last line
            fa_partial += chunk;
            break;
          }
          const std::string line = std::exchange(fa_partial, "") + chunk;
          auto j = nlohmann::json::parse(line, nullptr, false);
          if (j.is_discarded() || j["type"] != "send") continue;
          datagrams |= j["IP"]["destination"] == kPublicB4;
          queries |= j["reason"] == "dns-redirect";
        }
        return datagrams && queries;
      },
      std::chrono::milliseconds(static_cast<long long>(20000 * TimeScale())));
  ASSERT_TRUE(flooding) << "A's floods never showed in its file: " << flood->err();

  ArrivalTail tail(fb);
  lab::RunSpec sb;
  sb.argv = Shared().SandboxedArgv({"--audit", fb, "--egress", kPublicA4},
                                   {"tcp-burst", kPublicA4, "80", std::to_string(m)});
  sb.netns = Shared().lab().client_netns();
  sb.env = Shared().CtlEnv();
  sb.timeout = std::chrono::milliseconds(static_cast<long long>(120000 * TimeScale()));
  RunResult b = lab::Run(sb);
  tail.Stop();
  RunResult a = flood->Wait(std::chrono::milliseconds(static_cast<long long>(180000 * TimeScale())));
  ASSERT_EQ(a.exit_code, 0) << a.Describe();
  ASSERT_EQ(b.exit_code, 0) << b.Describe();
  ASSERT_EQ(Only(b)["connected"], std::to_string(m)) << b.Describe();
  auto after = Counters();

  // B: every connect a record of its own, on time.
  auto lb = ReadLines(fb);
  Tally tb = Sum(lb, "connect");
  EXPECT_EQ(tb.records, m);
  EXPECT_EQ(tb.summaries, 0);
  EXPECT_EQ(tb.lost, 0);
  EXPECT_EQ(tb.sandboxes.size(), 1u);
  std::set<std::pair<int, uint64_t>> kernel_ids;
  uint64_t worst = 0, on_time = 0;
  std::vector<uint64_t> lateness;
  std::string first_b_connect;
  for (const auto& [j, seen] : tail.lines()) {
    if (j["type"] != "connect") continue;
    if (first_b_connect.empty()) first_b_connect = j["time"];
    kernel_ids.insert({j["kernel"]["cpu"].get<int>(), j["kernel"]["seq"].get<uint64_t>()});
    const uint64_t at = j["kernel"]["boot_ns"].get<uint64_t>();
    const uint64_t late = seen > at ? seen - at : 0;
    worst = std::max(worst, late);
    on_time += late <= kWindowNs;
    lateness.push_back(late);
  }
  EXPECT_EQ(kernel_ids.size(), static_cast<size_t>(m)) << "each connect once, by its kernel (cpu, seq)";
  EXPECT_EQ(on_time, static_cast<uint64_t>(m)) << "the latest of B's records came " << worst / 1000000
                                               << " ms after its connect";
  std::sort(lateness.begin(), lateness.end());
  if (!lateness.empty()) {
    std::printf("[ info ] B: %lld connects, readable after their connect: median %.1f ms, p99 %.1f ms, max %.1f ms\n",
                m, lateness[lateness.size() / 2] / 1e6, lateness[lateness.size() * 99 / 100] / 1e6, worst / 1e6);
  }

  // A's probes: every datagram refused, every query answered NXDOMAIN by the
  // proxy (the window keeps its socket from overflowing), the control answered.
  auto pa = Lines(a);
  ASSERT_EQ(pa.size(), 3u) << a.Describe();
  long long dns_sent = 0;
  for (auto& l : pa) {
    if (l["op"] == "udp-burst") {
      EXPECT_EQ(l["refused"], std::to_string(n)) << a.Describe();
    } else if (l["dst"] == "8.8.8.8" && l["nxdomain"] != "0") {
      EXPECT_EQ(l["answered"], std::to_string(names)) << a.Describe();
      EXPECT_EQ(l["nxdomain"], std::to_string(names)) << a.Describe();
      EXPECT_EQ(l["unanswered"], "0") << a.Describe();
      dns_sent += std::stoll(l["sent"]);
    } else {
      EXPECT_EQ(l["noerror"], "1") << "the allowed name through the proxy: " << a.Describe();
      dns_sent += std::stoll(l["sent"]);
    }
  }
  EXPECT_EQ(dns_sent, names + 1);

  // A's file: kernel records' counts + kernel losses = every send; DNS
  // records + the proxy's losses = every query answered, each name once.
  auto la = ReadRotated(fa);
  long long a_sends = 0, a_kernel_lost = 0, a_dns_lost = 0, a_dns_records = 0;
  std::set<std::string> a_names;
  std::set<uint64_t> a_ids;
  for (const auto& j : la) {
    if (j.contains("sandbox")) a_ids.insert(j["sandbox"]["id"].get<uint64_t>());
    if (j["type"] == "send") a_sends += j["count"].get<long long>();
    if (j["type"] == "loss") (j.contains("source") ? a_dns_lost : a_kernel_lost) += j["lost"].get<long long>();
    if (j["type"] == "dns" && j["verdict"] == "deny") {
      const std::string q = j["dns"]["query"];
      EXPECT_EQ(j["reason"], "name-not-in-scope") << j.dump();
      EXPECT_EQ(j["dns"]["rcode_name"], "NXDOMAIN") << j.dump();
      EXPECT_TRUE(absl::EndsWith(q, suffix + ".")) << q;
      a_names.insert(q);
      ++a_dns_records;
    }
  }
  EXPECT_EQ(a_sends + a_kernel_lost, n + dns_sent) << "A's kernel records and losses";
  EXPECT_EQ(a_dns_records + a_dns_lost, names) << "A's DNS records " << a_dns_records << " + lost " << a_dns_lost;
  EXPECT_EQ(a_names.size(), static_cast<size_t>(a_dns_records)) << "a name recorded twice";
  ASSERT_EQ(a_ids.size(), 1u);
  EXPECT_NE(*a_ids.begin(), *tb.sandboxes.begin());
  std::printf("[ info ] A: %lld datagrams, %lld names: %lld DNS records, %lld reported lost; kernel lost %lld\n", n,
              names, a_dns_records, a_dns_lost, a_kernel_lost);
  // B ran during A's flood: its first connect came before A's last query.
  std::string last_a_query;
  for (const auto& j : la) {
    if (j["type"] == "dns" && j["verdict"] == "deny") last_a_query = std::max(last_a_query, j["time"].get<std::string>());
  }
  EXPECT_LT(first_b_connect, last_a_query) << "B did not overlap A's flood";

  // The kernel's counters: exactly what both did, every occurrence's fate.
  EXPECT_EQ(after["sendmsg_deny"] - before["sendmsg_deny"], n);
  EXPECT_EQ((after["event_submitted"] - before["event_submitted"]) +
                (after["event_folded"] - before["event_folded"]) + (after["event_lost"] - before["event_lost"]),
            n + dns_sent + m);

  // Nothing of A's names reached the lab's resolver; its allowed name did.
  ASSERT_TRUE((*upstream)->WaitForQuery("q0." + control, std::chrono::seconds(5))) << (*upstream)->Log();
  const std::string log = (*upstream)->Log();
  EXPECT_EQ(log.find(suffix), std::string::npos) << "a denied name reached the upstream";
}

// The programs wake the ring's reader only once a quarter of the ring is
// unread (bpf/lib/audit.h): one allowed connect with nothing else going on
// wakes no one, and its record is readable only because the reader takes the
// ring on its own clock (maps::kRingDrainMs, 50 ms), not at the next fold
// window (1 s) and not never.  The probe connects only once the reader is up
// (its first window wrote the run's lifecycle lines to the file), then holds
// still on a FIFO until the record was seen.  "Later" as in the A/B test
// above: readable in the file (polled every 2 ms) minus the kernel's boot_ns.
// The bound, a quarter of the window, is five drain periods; a reader that
// took the ring only at window closes would miss it 3 times in 4 and one
// that never did, always (the bound scales with EGR_TIME_SCALE).
TEST_F(Audit, ALoneConnectIsReadableWithinTheReadersDrainPeriod) {
  const uint64_t bound_ns = static_cast<uint64_t>(250e6 * TimeScale());
  const std::string f = File("alone.jsonl"), go = File("go"), hold = File("hold");
  ASSERT_EQ(mkfifo(go.c_str(), 0666), 0);
  ASSERT_EQ(mkfifo(hold.c_str(), 0666), 0);
  ArrivalTail tail(f);
  auto bg = Shared().StartSandboxed({"--audit", f, "--egress", kPublicA4, "--readable", dir_},
                                    {"open-write", go, "--then", "tcp", kPublicA4, "80", "--then", "open-write", hold});
  ASSERT_TRUE(bg.ok()) << bg.status();
  // The reader is up once anything is in the file (only it writes there).
  const bool reading = Lab::WaitFor([&] { return ReadLines(f).size() > 0; },
                                    std::chrono::milliseconds(static_cast<long long>(20000 * TimeScale())));
  int go_fd = reading ? open(go.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC) : -1;  // lets the probe connect
  nlohmann::json connect;
  Lab::WaitFor(
      [&] {
        for (auto& j : ReadLines(f)) {
          if (j["type"] == "connect") connect = j;
        }
        return !connect.is_null();
      },
      std::chrono::milliseconds(static_cast<long long>(5000 * TimeScale())));
  int hold_fd = open(hold.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // lets the probe finish
  RunResult r = bg->Wait();
  tail.Stop();
  if (go_fd >= 0) close(go_fd);
  if (hold_fd >= 0) close(hold_fd);
  ASSERT_TRUE(reading) << "the reader never wrote to " << f << ": " << r.Describe();
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  ASSERT_FALSE(connect.is_null()) << "no connect record in " << f << " within 5 s while the probe held still";
  EXPECT_EQ(connect["verdict"], "allow") << connect.dump();
  EXPECT_EQ(connect["IP"]["destination"], kPublicA4) << connect.dump();
  uint64_t seen = 0;
  for (const auto& [j, at] : tail.lines()) {
    if (j["type"] == "connect") seen = at;
  }
  ASSERT_NE(seen, 0u) << "the tail missed the record";
  const uint64_t at = connect["kernel"]["boot_ns"].get<uint64_t>();
  const uint64_t late = seen > at ? seen - at : 0;
  std::printf("[ info ] a lone connect's record readable %.1f ms after its connect (bound %.0f ms)\n", late / 1e6,
              bound_ns / 1e6);
  EXPECT_LE(late, bound_ns) << "the record came " << late / 1000000 << " ms after its connect";
}

// The other half of the wake-up rule: past a quarter of the ring unread the
// programs do wake a reader waiting in epoll, so a flood never fills the ring
// for want of a wake-up.  Nobody reads in this test: it waits on the ring's
// map fd itself, edge-triggered (woken only by a wake-up the programs ask
// for), and reads the ring's positions from its mapped pages without
// consuming anything (the next holder exports what is left).  Sandboxes one
// after another each make 7,500 denied connects, within one sandbox's burst
// budget so each is a record of its own (denied: no port is used up), until
// the ring holds 2 MiB past the threshold.  Woken at or past the threshold
// (so not once per record, as before), and within 1 MiB of it (so not only
// by something after the flood).
TEST_F(Audit, AFillingRingWakesAWaitingReaderPastAQuarterOfItsSize) {
  constexpr unsigned long kWake = EGR_EVENT_RING_BYTES / 4;
  constexpr unsigned long kRecord = (sizeof(egr_event) + 8 + 7) & ~7ul;  // header + body, 8-aligned
  constexpr long long kPerRun = 7500;  // < EGR_AUDIT_BURST
  const int fd = bpf_obj_get((Shared().pin_root() + "/" EGR_MAP_EVENTS).c_str());
  ASSERT_GE(fd, 0) << EGR_MAP_EVENTS << ": " << strerror(errno);
  const long page = sysconf(_SC_PAGESIZE);
  void* cons = mmap(nullptr, page, PROT_READ, MAP_SHARED, fd, 0);
  void* prod = mmap(nullptr, page, PROT_READ, MAP_SHARED, fd, page);
  ASSERT_NE(cons, MAP_FAILED) << strerror(errno);
  ASSERT_NE(prod, MAP_FAILED) << strerror(errno);
  auto unread = [&] {
    return __atomic_load_n(static_cast<unsigned long*>(prod), __ATOMIC_ACQUIRE) -
           __atomic_load_n(static_cast<unsigned long*>(cons), __ATOMIC_ACQUIRE);
  };
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(ep, 0);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0) << strerror(errno);
  epoll_event got{};
  (void)epoll_wait(ep, &got, 1, 0);  // a ring holding anything reads ready once at the start
  const unsigned long start = unread();
  ASSERT_LT(start, kWake / 2) << "the ring was already filling: " << start << " bytes unread";

  int woke = -1;
  unsigned long at_wake = 0;
  std::thread waiter([&] {
    woke = epoll_wait(ep, &got, 1, static_cast<int>(60000 * TimeScale()));
    at_wake = unread();
  });
  auto before = Counters();
  long long connects = 0;
  std::string failed;
  for (int i = 0; i < 10 && unread() < kWake + (2ul << 20) && failed.empty(); ++i) {
    RunResult r = Shared().RunSandboxed({"--egress", kPublicA4}, {"tcp-burst", kPublicB4, "80", std::to_string(kPerRun)});
    if (r.exit_code != 0 || Only(r)["refused"] != std::to_string(kPerRun)) failed = r.Describe();
    connects += kPerRun;
  }
  auto after = Counters();
  const unsigned long at_end = unread();
  waiter.join();
  close(ep);
  munmap(cons, page);
  munmap(prod, page);
  close(fd);
  ASSERT_TRUE(failed.empty()) << failed;
  EXPECT_EQ(after["event_lost"] - before["event_lost"], 0);
  EXPECT_EQ(after["event_submitted"] - before["event_submitted"], connects) << "each connect a record of its own";
  std::printf("[ info ] %lld denied connects: %.2f MiB on the ring at the end (from %.2f), a waiting reader woken "
              "at %.2f MiB (threshold %.2f)\n",
              connects, at_end / 1048576.0, start / 1048576.0, at_wake / 1048576.0, kWake / 1048576.0);
  ASSERT_GE(at_end, kWake + (2ul << 20)) << "the ring never filled past the threshold";
  ASSERT_EQ(woke, 1) << "the programs never woke a waiting reader while " << (at_end - start) / kRecord
                     << " records went on the ring (" << at_end << " bytes unread)";
  EXPECT_GE(at_wake, kWake) << "woken before the threshold";
  EXPECT_LT(at_wake, kWake + (1ul << 20)) << "woken only well past the threshold";
}

TEST_F(Audit, ThreeRunsSideBySideEachGetExactlyTheirOwn) {
  const long long counts[] = {3000, 5000, 7000};
  std::vector<Background> runs;
  std::vector<std::string> files;
  for (int i = 0; i < 3; ++i) {
    files.push_back(File("run" + std::to_string(i) + ".jsonl"));
    auto bg = Shared().StartSandboxed({"--audit", files.back(), "--egress", kPublicA4},
                                      {"tcp-burst", kPublicB4, "80", std::to_string(counts[i])});
    ASSERT_TRUE(bg.ok()) << bg.status();
    runs.push_back(*std::move(bg));
  }
  std::set<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    RunResult r = runs[i].Wait(std::chrono::milliseconds(static_cast<long long>(60000 * TimeScale())));
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    EXPECT_EQ(Only(r)["refused"], std::to_string(counts[i])) << r.Describe();
    Tally t = Sum(ReadLines(files[i]), "connect");
    EXPECT_EQ(t.counted + t.lost, counts[i]) << files[i];
    ASSERT_EQ(t.sandboxes.size(), 1u) << files[i] << " holds another sandbox's lines";
    ids.insert(*t.sandboxes.begin());
  }
  EXPECT_EQ(ids.size(), 3u);
}

TEST_F(Audit, AReaderThatWasNotRunningLosesNothingItCouldKeep) {
  // No reader while the sandbox runs: its records wait on the ring, its
  // folded counts in the kernel's maps, until one comes.
  const long long n = 20000;
  RunResult r = Shared().RunSandboxed({"--egress", kPublicA4},
                                      {"tcp-burst", kPublicB4, "80", std::to_string(n)});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  ASSERT_EQ(Only(r)["refused"], std::to_string(n)) << r.Describe();
  RunResult first = Shared().Ctl({"audit", "--verdict", "deny"});
  ASSERT_EQ(first.exit_code, 0) << first.Describe();
  std::vector<nlohmann::json> lines;
  {
    std::istringstream in(first.out);
    std::string line;
    while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  }
  // Only this sandbox's (the instance's self-test at load is a sandbox too).
  std::vector<nlohmann::json> ours;
  for (const auto& j : lines) {
    if (j["type"] == "loss" || (j.contains("IP") && j["IP"]["destination"] == kPublicB4)) ours.push_back(j);
  }
  Tally t = Sum(ours, "connect");
  EXPECT_EQ(t.counted + t.lost, n);
  ASSERT_FALSE(lines.empty());
  // The numbering continues in the next reader.
  const uint64_t last = lines.back()["seq"].get<uint64_t>();
  r = Shared().RunSandboxed({"--egress", kPublicA4}, {"tcp", kPublicB4, "80"});
  RunResult second = Shared().Ctl({"audit"});
  ASSERT_EQ(second.exit_code, 0) << second.Describe();
  auto j = nlohmann::json::parse(second.out.substr(0, second.out.find('\n')));
  EXPECT_GT(j["seq"].get<uint64_t>(), last);
  EXPECT_EQ(j["type"], "connect");
}

// The value of one sample (`name{labels}` exactly as written) in a
// Prometheus text file; -1 when absent.
long long Sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stoll(line.substr(series.size() + 1));
  }
  return -1;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_F(Audit, MetricsPassPromtoolAndCountKnownTraffic) {
  // Everything queued before is taken off the ring first: the exported
  // figures below move by this test's traffic alone.
  ASSERT_EQ(Shared().Ctl({"audit"}).exit_code, 0);
  const std::string before = File("before.prom"), after = File("after.prom");
  RunResult m = Shared().Ctl({"metrics", "-o", before});
  ASSERT_EQ(m.exit_code, 0) << m.Describe();
  const long long n = 500, allowed = 3;
  RunResult r = Run(File("m.jsonl"), {"--egress", kPublicA4},
                    {"tcp-burst", kPublicB4, "80", std::to_string(n), "--then", "tcp-burst", kPublicA4, "80",
                     std::to_string(allowed)});
  ASSERT_EQ(r.exit_code, 0) << last_;
  // `audit --metrics` rewrites the file once the trail is read.
  m = Shared().Ctl({"audit", "--metrics", after});
  ASSERT_EQ(m.exit_code, 0) << m.Describe();
  for (const std::string& f : {before, after}) {
    RunSpec check{.argv = {"sh", "-c", "promtool check metrics < " + f}};
    RunResult p = lab::Run(check);
    EXPECT_EQ(p.exit_code, 0) << f << ": " << p.Describe() << "\n" << Slurp(f);
  }
  const std::string a = Slurp(after), b = Slurp(before);
  auto delta = [&](const std::string& series) { return Sample(a, series) - Sample(b, series); };
  // Kernel counters are exact: this test's connects and nothing else ran.
  EXPECT_EQ(delta("egressd_connections_total{verdict=\"deny\"}"), n) << a;
  EXPECT_EQ(delta("egressd_connections_total{verdict=\"allow\"}"), allowed) << a;
  EXPECT_EQ(delta("egressd_events_total{fate=\"recorded\"}"), n + allowed) << a;
  EXPECT_EQ(delta("egressd_events_total{fate=\"lost\"}"), 0) << a;
  // What the reader exported, by reason (a burst this small is never folded).
  const std::string denied = "egressd_audit_exported_total{type=\"connect\",verdict=\"deny\",reason=\"default-deny\"}";
  EXPECT_EQ(Sample(a, denied) - std::max(0LL, Sample(b, denied)), n) << a;
  EXPECT_GE(Sample(a, "egressd_audit_lines_total"), Sample(b, "egressd_audit_lines_total") + n + allowed);
  // Every pinned map has a capacity; the ring's is its bytes.
  EXPECT_EQ(Sample(a, "egressd_map_capacity{map=\"egr_events_v1\",type=\"ringbuf\"}"), 8 << 20) << a;
  EXPECT_GE(Sample(a, "egressd_map_capacity{map=\"egr_allow4_v1\",type=\"lpm_trie\"}"), 1) << a;
  EXPECT_EQ(Sample(a, "egressd_map_entries{map=\"egr_events_v1\",type=\"ringbuf\"}"), -1) << "a ring has no entries to count";
  EXPECT_GE(Sample(a, "egressd_sandboxes"), 0);
  // Bad input: an output directory that is not there.
  m = Shared().Ctl({"metrics", "-o", File("no-such-dir/m.prom")});
  EXPECT_EQ(m.exit_code, 2) << m.Describe();
  EXPECT_NE(m.err.find("no-such-dir"), std::string::npos) << m.Describe();
}

TEST_F(Audit, BadFlagsAreNamedAndExitTwo) {
  RunResult r = Shared().Ctl({"audit", "--verdict", "maybe"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("maybe"), std::string::npos) << r.Describe();
  r = Shared().Ctl({"audit", "--sandbox", "web"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("web"), std::string::npos) << r.Describe();
  r = Shared().Ctl({"audit", "--input", File("missing.jsonl")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("missing.jsonl"), std::string::npos) << r.Describe();
}

}  // namespace
}  // namespace egressd::test
