// What the exporter adds to kernel records in user space, and the spools it
// removes: destination_names from the DNS records it ingested (a record of a
// wildcard rule waits for its DNS record until the window's end; an exact
// rule names itself), the ids in the sandbox's own pid namespace (NsPids,
// asked of /proc and believed only for the same task in the same cgroup and
// namespace), and the spool of a sandbox that is gone, removed once no reader
// holds it.
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "userspace/audit/exporter.h"
#include "userspace/audit/ns_pids.h"
#include "userspace/audit/reader_lock.h"
#include "userspace/audit/spool.h"
#include "userspace/control/sandbox_record.h"
#include "userspace/dns/scope.h"

namespace egressd::audit {
namespace {

constexpr uint64_t kSandbox = 42;

class AuditEnrich : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/egr-audit-enrich-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    paths_.runtime_dir = dir_;
  }
  void TearDown() override { (void)system(("rm -rf " + dir_).c_str()); }

  std::unique_ptr<Exporter> Make(bool spools = false) {
    ExporterOptions o;
    o.state_path = dir_ + "/state.json";
    if (spools) {
      o.spool_dir = SpoolDir(paths_);
      EXPECT_TRUE(MakeDirs(o.spool_dir, 0700).ok());
    }
    auto x = Exporter::Create(paths_, o, [this](const nlohmann::json& r, const std::string&) { records_.push_back(r); });
    EXPECT_TRUE(x.ok()) << x.status();
    return x.ok() ? *std::move(x) : nullptr;
  }
  void Register(uint64_t id) {
    policy::CompiledPolicy p;
    p.names.push_back("api.example.com");
    p.wildcard_suffixes.push_back("sib.example");
    control::SandboxRecord r{.cgroup_id = id, .labels = {{"pod", "web-1"}}, .current = {1, p}};
    ASSERT_TRUE(control::SandboxRecords(paths_).Write(r).ok());
  }
  static egr_event Resolved(const std::string& rule, uint8_t last_octet, uint64_t seq) {
    egr_event e{};
    e.key.sandbox_id = kSandbox;
    e.key.kind = EGR_EVENT_CONNECT;
    e.key.reason = EGR_REASON_RESOLVED;
    e.key.family = 2;
    e.key.protocol = 6;
    e.key.dport = 443;
    e.key.daddr[10] = e.key.daddr[11] = 0xff;
    e.key.daddr[12] = 192, e.key.daddr[13] = 0, e.key.daddr[14] = 2, e.key.daddr[15] = last_octet;
    e.match_id = dns::NameId(rule);
    e.flags = EGR_EVENT_HAS_TASK;
    e.task.tgid = 77;
    e.cpu = 0;
    e.seq = seq;
    return e;
  }
  // The DNS proxy's record of a query answered with `ip`, learned under `rule`.
  static nlohmann::json Dns(const std::string& query, const std::string& rule, const std::string& ip) {
    return {{"type", "dns"},
            {"time", "2026-12-01T00:00:00.000000000Z"},
            {"sandbox", {{"id", kSandbox}}},
            {"dns", {{"query", query + "."}, {"rule", rule}, {"learned", {{{"ip", ip}, {"ttl", 0}}}}}}};
  }
  std::vector<nlohmann::json> Of(const std::string& type) const {
    std::vector<nlohmann::json> out;
    for (const auto& r : records_) {
      if (r["type"] == type) out.push_back(r);
    }
    return out;
  }

  std::string dir_;
  Paths paths_;
  std::vector<nlohmann::json> records_;
};

TEST_F(AuditEnrich, AnExactRuleNamesItselfAtOnce) {
  Register(kSandbox);
  auto x = Make();
  ASSERT_TRUE(x->OnEvent(Resolved("api.example.com", 10, 1)).ok());
  auto c = Of("connect");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]["destination_names"], nlohmann::json::array({"api.example.com"}));
  EXPECT_EQ(c[0]["match"]["name"], "api.example.com");
}

TEST_F(AuditEnrich, AWildcardRuleNamesTheQueriesThatLearnedTheAddress) {
  Register(kSandbox);
  auto x = Make();
  // Two names of the rule answered with the address, one with another
  // address, and one of another rule (same address): only the first two.
  ASSERT_TRUE(x->OnUserRecord(Dns("b.sib.example", "*.sib.example", "192.0.2.11")).ok());
  ASSERT_TRUE(x->OnUserRecord(Dns("a.sib.example", "*.sib.example", "192.0.2.11")).ok());
  ASSERT_TRUE(x->OnUserRecord(Dns("c.sib.example", "*.sib.example", "192.0.2.12")).ok());
  ASSERT_TRUE(x->OnUserRecord(Dns("api.example.com", "api.example.com", "192.0.2.11")).ok());
  ASSERT_TRUE(x->OnEvent(Resolved("*.sib.example", 11, 1)).ok());
  auto c = Of("connect");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]["destination_names"], nlohmann::json::array({"a.sib.example", "b.sib.example"}));
  // A record of another reason names none.
  egr_event denied = Resolved("*.sib.example", 11, 2);
  denied.key.reason = EGR_REASON_DEFAULT;
  denied.key.action = 1;
  ASSERT_TRUE(x->OnEvent(denied).ok());
  EXPECT_FALSE(Of("connect").back().contains("destination_names"));
}

TEST_F(AuditEnrich, ARecordWaitsForItsDnsRecordUntilTheWindowsEnd) {
  Register(kSandbox);
  auto x = Make();
  // The connect came off the ring before the proxy's record was ingested.
  ASSERT_TRUE(x->OnEvent(Resolved("*.sib.example", 13, 1)).ok());
  ASSERT_TRUE(x->OnEvent(Resolved("*.sib.example", 14, 2)).ok());
  EXPECT_TRUE(Of("connect").empty());
  ASSERT_TRUE(x->OnUserRecord(Dns("d.sib.example", "*.sib.example", "192.0.2.13")).ok());
  ASSERT_TRUE(x->OnWindow({}, 0).ok());
  auto c = Of("connect");
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0]["destination_names"], nlohmann::json::array({"d.sib.example"}));
  // No DNS record ever named .14: written at the window's end without names,
  // never later, and counted like any record.
  EXPECT_EQ(c[1]["IP"]["destination"], "192.0.2.14");
  EXPECT_FALSE(c[1].contains("destination_names"));
  EXPECT_EQ(x->counted().at(kSandbox), 2u);
  EXPECT_GT(c[0]["seq"].get<uint64_t>(), Of("dns")[0]["seq"].get<uint64_t>());
}

TEST_F(AuditEnrich, ARewrittenRecordIsReadAgainInTheNextWindow) {
  auto allowed = [](uint64_t seq) {
    egr_event e = Resolved("-", 10, seq);
    e.key.reason = EGR_REASON_ALLOWED;
    e.match_id = 0;
    return e;
  };
  auto x = Make();
  ASSERT_TRUE(x->OnEvent(allowed(1)).ok());
  ASSERT_EQ(Of("connect").size(), 1u);
  EXPECT_FALSE(Of("connect")[0]["sandbox"].contains("labels"));  // no record yet
  Register(kSandbox);
  ASSERT_TRUE(x->OnWindow({}, 0).ok());
  ASSERT_TRUE(x->OnEvent(allowed(2)).ok());
  ASSERT_EQ(Of("connect").size(), 2u);
  EXPECT_EQ(Of("connect")[1]["sandbox"]["labels"]["pod"], "web-1");
  // A new policy (a flip) in the record: its names are the record's now.
  policy::CompiledPolicy p;
  p.names.push_back("other.example.com");
  control::SandboxRecord r{.cgroup_id = kSandbox, .labels = {{"pod", "web-2"}}, .current = {2, p}};
  ASSERT_TRUE(control::SandboxRecords(paths_).Write(r).ok());
  ASSERT_TRUE(x->OnWindow({}, 0).ok());
  ASSERT_TRUE(x->OnEvent(Resolved("other.example.com", 10, 3)).ok());
  ASSERT_EQ(Of("connect").size(), 3u);
  EXPECT_EQ(Of("connect")[2]["match"]["name"], "other.example.com");
  EXPECT_EQ(Of("connect")[2]["sandbox"]["labels"]["pod"], "web-2");
  // Removed: its last lines keep the labels it had.
  ASSERT_TRUE(control::SandboxRecords(paths_).Remove(kSandbox).ok());
  ASSERT_TRUE(x->OnWindow({}, 0).ok());
  ASSERT_TRUE(x->OnEvent(allowed(4)).ok());
  ASSERT_EQ(Of("connect").size(), 4u);
  EXPECT_EQ(Of("connect")[3]["sandbox"]["labels"]["pod"], "web-2");
}

TEST_F(AuditEnrich, TheSpoolOfAGoneSandboxIsRemovedOnceNoReaderHoldsIt) {
  Register(kSandbox);
  Register(kSandbox + 1);
  auto x = Make(/*spools=*/true);
  const std::string gone = SpoolPath(paths_, kSandbox), kept = SpoolPath(paths_, kSandbox + 1);
  egr_event other = Resolved("api.example.com", 10, 2);
  other.key.sandbox_id = kSandbox + 1;
  ASSERT_TRUE(x->OnEvent(Resolved("api.example.com", 10, 1)).ok());
  ASSERT_TRUE(x->OnEvent(other).ok());
  ASSERT_TRUE(x->OnWindow({}, 0).ok());
  ASSERT_EQ(access(gone.c_str(), F_OK), 0);
  auto tail = std::make_unique<SpoolTail>(gone);
  ASSERT_TRUE(tail->Open(false).ok());
  ASSERT_TRUE(control::SandboxRecords(paths_).Remove(kSandbox).ok());
  // A whole window with nothing written, no record: but a reader holds it.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(x->OnWindow({}, 0).ok());
  EXPECT_EQ(access(gone.c_str(), F_OK), 0);
  std::vector<std::string> read;
  ASSERT_TRUE(tail->Read([&](const std::string& l) { read.push_back(l); }).ok());
  EXPECT_EQ(read.size(), 1u);
  tail.reset();
  ASSERT_TRUE(x->OnWindow({}, 0).ok());
  EXPECT_NE(access(gone.c_str(), F_OK), 0) << "the spool of a removed sandbox nobody reads";
  EXPECT_NE(access(ReadersLockPath(gone).c_str(), F_OK), 0);
  EXPECT_EQ(access(kept.c_str(), F_OK), 0) << "a registered sandbox's spool stays";
  EXPECT_EQ(access(SpoolPath(paths_, 0).c_str(), F_OK), 0) << "all.jsonl stays";
  // The id's lines again (a sandbox without a record still recording): a
  // new spool, written whole.
  ASSERT_TRUE(x->OnEvent(Resolved("api.example.com", 10, 3)).ok());
  ASSERT_TRUE(x->Flush().ok());
  std::ifstream in(gone);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(nlohmann::json::parse(line)["kernel"]["seq"], 3);
}

TEST_F(AuditEnrich, AnEarlierHoldersSpoolOfAGoneSandboxIsRemovedToo) {
  ASSERT_TRUE(MakeDirs(SpoolDir(paths_), 0700).ok());
  const std::string old = SpoolPath(paths_, 77);
  for (const std::string& f : {old, old + ".1"}) std::ofstream(f) << "{}\n";
  auto x = Make(/*spools=*/true);
  ASSERT_TRUE(x->OnWindow({}, 0).ok());
  EXPECT_EQ(access(old.c_str(), F_OK), 0) << "not before a whole window has passed";
  ASSERT_TRUE(x->OnWindow({}, 0).ok());
  EXPECT_NE(access(old.c_str(), F_OK), 0);
  EXPECT_NE(access((old + ".1").c_str(), F_OK), 0);
}

uint64_t OwnCgroupId() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  }
  auto mount = FindCgroup2Mount();
  struct stat st;
  if (!mount.ok() || stat((*mount + path).c_str(), &st) != 0) return 0;
  return st.st_ino;
}

uint64_t BootNs() {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

TEST(NsPids, ATaskIsNamedInItsNamespaceOnlyWhenEverythingMatches) {
  const uint64_t cg = OwnCgroupId();
  if (cg == 0) GTEST_SKIP() << "no cgroup2 here";
  struct stat ns;
  ASSERT_EQ(stat("/proc/self/ns/pid", &ns), 0);
  const PidNamespace own{ns.st_dev, ns.st_ino};
  const uint32_t pid = getpid(), tid = static_cast<uint32_t>(syscall(SYS_gettid));
  // Our procfs is our own namespace's: the ids there are the ones we have.
  NsPids p;
  NsIds ids = p.Lookup(pid, tid, cg, BootNs(), own);
  ASSERT_TRUE(ids.pid && ids.tid);
  EXPECT_EQ(*ids.pid, pid);
  EXPECT_EQ(*ids.tid, tid);
  // Another cgroup, another namespace, an event before the task started, a
  // task that is not there: none.
  NsPids q;
  EXPECT_FALSE(q.Lookup(pid, tid, cg + 1, BootNs(), own).pid);
  EXPECT_FALSE(q.Lookup(pid, tid, cg, BootNs(), PidNamespace{ns.st_dev, ns.st_ino + 1}).pid);
  EXPECT_FALSE(NsPids().Lookup(pid, tid, cg, 1, own).pid);
  EXPECT_FALSE(NsPids().Lookup(pid, tid + 1000000, cg, BootNs(), own).pid);
  // Remembered for the window, still checked against the event's time.
  EXPECT_TRUE(p.Lookup(pid, tid, cg, BootNs(), own).pid);
  EXPECT_FALSE(p.Lookup(pid, tid, cg, 1, own).pid);
}

}  // namespace
}  // namespace egressd::audit
