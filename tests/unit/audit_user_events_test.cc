// The user-space sources' channel (userspace/audit/user_events.h) without a
// kernel: their lines numbered in the exporter's one sequence, read exactly
// once across holders (persisted offsets), a full queue and a dead writer's
// half line reported as losses that add up, and the DNS record's fields.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <mutex>
#include <memory>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "userspace/audit/dns_events.h"
#include "userspace/audit/exporter.h"
#include "userspace/audit/lifecycle.h"
#include "userspace/audit/user_events.h"
#include "userspace/control/sandbox_record.h"

namespace egressd::audit {
namespace {

class UserEvents : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/egr-audit-user-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    paths_.runtime_dir = dir_;
  }
  void TearDown() override { (void)system(("rm -rf " + dir_).c_str()); }

  std::unique_ptr<Exporter> Make() {
    ExporterOptions o;
    o.state_path = dir_ + "/state.json";
    auto x = Exporter::Create(paths_, o, [this](const nlohmann::json& r, const std::string&) { records_.push_back(r); });
    EXPECT_TRUE(x.ok()) << x.status();
    return x.ok() ? *std::move(x) : nullptr;
  }
  // What a holder does at the end of a window: ingest, then save the state.
  void Window(Exporter& x) {
    ASSERT_TRUE(IngestPending(paths_, x).ok());
    ASSERT_TRUE(x.OnWindow({}, 0).ok());
  }
  static nlohmann::json Rec(uint64_t sandbox, int n) {
    return {{"type", "dns"}, {"sandbox", {{"id", sandbox}}}, {"n", n}};
  }
  size_t PendingFiles() const {
    size_t n = 0;
    if (DIR* d = opendir(PendingDir(paths_).c_str())) {
      while (dirent* e = readdir(d)) n += std::string(e->d_name).find(".jsonl") != std::string::npos;
      closedir(d);
    }
    return n;
  }

  std::string dir_;
  Paths paths_;
  std::vector<nlohmann::json> records_;
};

TEST_F(UserEvents, LinesJoinTheOneSequenceExactlyOnceAcrossHolders) {
  auto w = UserEventWriter::Open(paths_, "test");
  ASSERT_TRUE(w.ok()) << w.status();
  for (int i = 0; i < 3; ++i) (*w)->Submit(Rec(5, i), 5);
  (*w)->Flush();
  {
    auto x = Make();
    Window(*x);
  }
  ASSERT_EQ(records_.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(records_[i]["n"], i);
    EXPECT_EQ(records_[i]["seq"], i + 1);
    EXPECT_EQ(records_[i]["schema"], kSchema);
  }
  // The writer lives on; a new holder reads only what came since.
  for (int i = 3; i < 5; ++i) (*w)->Submit(Rec(5, i), 5);
  (*w)->Flush();
  {
    auto x = Make();
    Window(*x);
  }
  ASSERT_EQ(records_.size(), 5u);
  EXPECT_EQ(records_[3]["n"], 3);
  EXPECT_EQ(records_[3]["seq"], 4);
  EXPECT_EQ(records_[4]["seq"], 5);
  // The writer gone: its file is read to the end and removed.
  w->reset();
  EXPECT_EQ(PendingFiles(), 1u);
  {
    auto x = Make();
    Window(*x);
  }
  EXPECT_EQ(records_.size(), 5u);
  EXPECT_EQ(PendingFiles(), 0u);
}

TEST_F(UserEvents, AFullQueueIsCountedPerSandboxAndReported) {
  auto w = UserEventWriter::Open(paths_, "test", {.max_queued_per_sandbox = 4, .max_queued = 1000});
  ASSERT_TRUE(w.ok()) << w.status();
  // Submitted faster than one writer thread can drain: at least some are
  // turned away.  Whatever the split, lines + lost = submitted for each.
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    (*w)->Submit(Rec(1, i), 1);
    (*w)->Submit(Rec(2, i), 2);
  }
  (*w)->Flush();
  auto x = Make();
  Window(*x);
  std::map<uint64_t, uint64_t> lines, lost;
  for (const auto& r : records_) {
    const uint64_t id = r["sandbox"]["id"];
    if (r["type"] == "loss") {
      lost[id] += r["lost"].get<uint64_t>();
      EXPECT_EQ(r["source"], "test");
    } else {
      ++lines[id];
    }
  }
  EXPECT_EQ(lines[1] + lost[1], static_cast<uint64_t>(n));
  EXPECT_EQ(lines[2] + lost[2], static_cast<uint64_t>(n));
  EXPECT_GT(lost[1] + lost[2], 0u) << "a queue of 4 per sandbox never overflowed";
  EXPECT_EQ((*w)->lost(), lost[1] + lost[2]);
}

size_t DirBytes(const std::string& dir) {
  size_t sum = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      struct stat st;
      if (std::string(e->d_name).find(".jsonl") != std::string::npos &&
          stat((dir + "/" + e->d_name).c_str(), &st) == 0) {
        sum += st.st_size;
      }
    }
    closedir(d);
  }
  return sum;
}

// No reader comes: the pending files stay within their bound (one writer:
// max_pending_bytes plus one recount), what did not fit is counted, and the
// next holder reports it as loss records; lines + lost = what was submitted.
TEST_F(UserEvents, PendingFilesAreBoundedAndWhatDidNotFitIsReported) {
  UserEventOptions o;
  o.max_pending_bytes = 8192;
  o.recount_bytes = 512;
  o.max_file_bytes = 2048;
  constexpr int kSubmitted = 2000;
  {
    auto w = UserEventWriter::Open(paths_, "test", o);
    ASSERT_TRUE(w.ok()) << w.status();
    for (int i = 0; i < kSubmitted; ++i) {
      (*w)->Submit(Rec(5 + i % 2, i), 5 + i % 2);
      if (i % 100 == 99) (*w)->Flush();  // the queue never fills: only the bound refuses
    }
    (*w)->Flush();
    EXPECT_GT((*w)->lost(), 0u);
    EXPECT_EQ((*w)->written() + (*w)->lost(), static_cast<uint64_t>(kSubmitted));
    EXPECT_LE(DirBytes(PendingDir(paths_)), o.max_pending_bytes + o.recount_bytes);
    EXPECT_GT(PendingFiles(), 1u) << "the writer went on in new files at max_file_bytes";
  }
  EXPECT_LE(DirBytes(PendingDir(paths_)), o.max_pending_bytes + o.recount_bytes);
  auto x = Make();
  Window(*x);
  uint64_t lines = 0, lost = 0;
  std::map<uint64_t, uint64_t> lost_by;
  for (const auto& r : records_) {
    if (r["type"] == "loss") {
      lost += r["lost"].get<uint64_t>();
      lost_by[r["sandbox"]["id"].get<uint64_t>()] += r["lost"].get<uint64_t>();
      EXPECT_EQ(r["source"], "test");
    } else {
      ++lines;
    }
  }
  EXPECT_EQ(lines + lost, static_cast<uint64_t>(kSubmitted));
  EXPECT_GT(lost_by[5], 0u);
  EXPECT_GT(lost_by[6], 0u);
  EXPECT_EQ(PendingFiles(), 0u) << "read and removed";
  // Reported once: the next window reports nothing again, and there is
  // room again for a new writer.
  records_.clear();
  auto w = UserEventWriter::Open(paths_, "test", o);
  ASSERT_TRUE(w.ok());
  (*w)->Submit(Rec(5, 0), 5);
  (*w)->Flush();
  EXPECT_EQ((*w)->lost(), 0u);
  w->reset();
  Window(*x);
  ASSERT_EQ(records_.size(), 1u);
  EXPECT_NE(records_[0]["type"], "loss");
}

// The writer wakes on the first line after a quiet batch period, not on each
// (user_events.h kBatchLines): lines submitted with no Flush() still reach
// the file, soon, whole and in order, however they fall into batches: one
// alone, a burst of several batches, and one more after the writer went back
// to sleep (waiting for lines, untimed: that line's wake-up is the only way
// it gets written).
TEST_F(UserEvents, LinesReachTheFileWithoutAFlushWholeAndInOrder) {
  auto w = UserEventWriter::Open(paths_, "test");
  ASSERT_TRUE(w.ok()) << w.status();
  // The lines of the writer's file once it holds `want` (or 5 s passed).
  auto lines_when = [&](size_t want) {
    std::vector<nlohmann::json> got;
    for (int waited_ms = 0; waited_ms < 5000; ++waited_ms) {
      got.clear();
      std::ifstream in((*w)->path());
      std::string line;
      while (std::getline(in, line)) got.push_back(nlohmann::json::parse(line, nullptr, false));
      if (got.size() >= want) break;
      usleep(1000);
    }
    return got;
  };
  (*w)->Submit(Rec(5, 0), 5);
  ASSERT_EQ(lines_when(1).size(), 1u) << "a lone line is written without a Flush()";
  const int burst = 3 * static_cast<int>(UserEventWriter::kBatchLines) + 7;
  for (int i = 1; i <= burst; ++i) (*w)->Submit(Rec(5 + i % 2, i), 5 + i % 2);
  std::vector<nlohmann::json> got = lines_when(burst + 1);
  ASSERT_EQ(got.size(), static_cast<size_t>(burst + 1));
  for (int i = 0; i <= burst; ++i) {
    ASSERT_FALSE(got[i].is_discarded()) << "line " << i << " is not whole";
    EXPECT_EQ(got[i]["n"], i);
  }
  for (int waited_ms = 0; waited_ms < 5000 && !(*w)->waiting_for_lines(); ++waited_ms) usleep(1000);
  ASSERT_TRUE((*w)->waiting_for_lines()) << "the writer went back to sleep once the lines stopped";
  const uint64_t wakeups = (*w)->wakeups();
  (*w)->Submit(Rec(6, burst + 1), 6);
  EXPECT_EQ((*w)->wakeups(), wakeups + 1);
  EXPECT_EQ(lines_when(burst + 2).size(), static_cast<size_t>(burst + 2)) << "a line after the writer slept again";
  EXPECT_EQ((*w)->lost(), 0u);
}

// A steady submitter (the DNS proxy's loop at a steady rate) never wakes the
// writer: the writer gathers each next batch on its own timer while lines
// keep coming, and only the first line after a quiet batch period wakes it.
// Before, every batch's first line did (a futex call in the proxy's loop 200
// times a second at 5k queries/s): here about 8.
TEST_F(UserEvents, ASteadySubmitterDoesNotWakeTheWriter) {
  auto w = UserEventWriter::Open(paths_, "test");
  ASSERT_TRUE(w.ok()) << w.status();
  (*w)->Submit(Rec(5, 0), 5);
  (*w)->Flush();
  EXPECT_EQ((*w)->wakeups(), 1u) << "the first line wakes the idle writer";
  const uint64_t before = (*w)->wakeups();
  // A line every 0.5 ms (a pace, not a wait for anything) for 8 batch
  // periods.  The writer can only fall idle where a whole batch
  // period passed without a line: such gaps (a loaded machine holding this
  // thread off its CPU) are counted and allowed for, and so is a full batch
  // (256 lines) queued while the writer was held off.
  int gaps = 0;
  auto last = std::chrono::steady_clock::now();
  const int lines = 8 * static_cast<int>(UserEventWriter::kBatchGather / std::chrono::microseconds(500));
  for (int i = 1; i <= lines; ++i) {
    (*w)->Submit(Rec(5, i), 5);
    const auto now = std::chrono::steady_clock::now();
    if (now - last >= UserEventWriter::kBatchGather * 9 / 10) ++gaps;
    last = now;
    usleep(500);
  }
  const uint64_t during = (*w)->wakeups() - before;
  (*w)->Flush();
  EXPECT_LE(during, static_cast<uint64_t>(gaps) + 2) << gaps << " gaps of a batch period";
  EXPECT_EQ((*w)->written(), static_cast<uint64_t>(lines) + 1);
  EXPECT_EQ((*w)->lost(), 0u);
}

// Deferred lines (SubmitDeferred: the DNS proxy's records) are encoded by the
// writer's thread, never the submitter's, go out in submission order among
// plain lines, and their objects are let go once written.
struct Deferred {
  int n;
  static inline std::mutex mu;
  static inline std::set<std::thread::id> encoders;
};
std::string EncodeDeferred(const Deferred& d) {
  {
    std::lock_guard<std::mutex> l(Deferred::mu);
    Deferred::encoders.insert(std::this_thread::get_id());
  }
  return nlohmann::json{{"type", "dns"}, {"n", d.n}}.dump();
}

TEST_F(UserEvents, DeferredLinesAreEncodedByTheWriterInOrder) {
  {
    std::lock_guard<std::mutex> l(Deferred::mu);
    Deferred::encoders.clear();  // --gtest_repeat: the last run's writer
  }
  auto w = UserEventWriter::Open(paths_, "test");
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<std::shared_ptr<const Deferred>> kept;
  for (int i = 0; i < 600; ++i) {
    if (i % 3 == 0) {
      (*w)->Submit(Rec(5, i), 5);
    } else {
      auto d = std::make_shared<const Deferred>(Deferred{i});
      kept.push_back(d);
      (*w)->SubmitDeferred<&EncodeDeferred>(std::move(d), 5);
    }
  }
  (*w)->Flush();
  {
    std::lock_guard<std::mutex> l(Deferred::mu);
    ASSERT_EQ(Deferred::encoders.size(), 1u);
    EXPECT_EQ(Deferred::encoders.count(std::this_thread::get_id()), 0u) << "encoded in the submitter's thread";
  }
  for (const auto& d : kept) EXPECT_EQ(d.use_count(), 1) << "the writer still holds record " << d->n;
  std::ifstream in((*w)->path());
  std::string line;
  int i = 0;
  for (; std::getline(in, line); ++i) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    EXPECT_EQ(j["n"], i);
  }
  EXPECT_EQ(i, 600);
}

// Over the bound the writer counts the pending bytes again only once the
// directory changed (not for each line it turns away): once a holder has
// read and removed files, the same writer writes again.
TEST_F(UserEvents, AWriterOverTheBoundWritesAgainOnceAHolderMadeRoom) {
  UserEventOptions o;
  o.max_pending_bytes = 8192;
  o.recount_bytes = 512;
  o.max_file_bytes = 2048;
  auto w = UserEventWriter::Open(paths_, "test", o);
  ASSERT_TRUE(w.ok()) << w.status();
  int n = 0;
  for (; n < 400; ++n) (*w)->Submit(Rec(5, n), 5);
  (*w)->Flush();
  const uint64_t lost = (*w)->lost();
  ASSERT_GT(lost, 0u) << "the bound turned lines away";
  // More turned away while nothing changed: still counted, still no room.
  for (int i = 0; i < 50; ++i, ++n) (*w)->Submit(Rec(5, n), 5);
  (*w)->Flush();
  EXPECT_EQ((*w)->lost(), lost + 50);
  auto x = Make();
  Window(*x);  // reads every file and removes those whose writer moved on
  const uint64_t written = (*w)->written();
  for (int i = 0; i < 5; ++i, ++n) (*w)->Submit(Rec(5, n), 5);
  (*w)->Flush();
  EXPECT_EQ((*w)->written(), written + 5) << "room again after the holder removed files";
  EXPECT_EQ((*w)->lost(), lost + 50);
}

TEST_F(UserEvents, ADeadWritersHalfLineIsALoss) {
  ASSERT_EQ(mkdir((dir_ + "/audit").c_str(), 0700), 0);
  ASSERT_EQ(mkdir(PendingDir(paths_).c_str(), 0700), 0);
  // Unlocked (its writer is gone), one whole line and half of another.
  std::ofstream(PendingDir(paths_) + "/1-2.jsonl") << Rec(3, 0).dump() << "\n{\"type\":\"dn";
  auto x = Make();
  Window(*x);
  ASSERT_EQ(records_.size(), 2u);
  EXPECT_EQ(records_[0]["n"], 0);
  EXPECT_EQ(records_[1]["type"], "loss");
  EXPECT_EQ(records_[1]["lost"], 1);
  EXPECT_EQ(PendingFiles(), 0u);
}

// Short-lived writers (each `egressctl sandbox add`, each `run`) with no
// reader: each takes over the file the one before it left (its writer gone,
// room left), so 200 of them leave one file, not 200 that every later
// writer would stat; two alive at once write two files; a holder then reads
// every line exactly once and removes them.
TEST_F(UserEvents, GoneWritersFilesAreTakenOverSoShortLivedWritersLeaveOneFile) {
  constexpr int kWriters = 200;
  for (int i = 0; i < kWriters; ++i) {
    auto w = UserEventWriter::Open(paths_, "test");
    ASSERT_TRUE(w.ok()) << w.status();
    (*w)->Submit(Rec(5, i), 5);
    (*w)->Flush();
  }
  EXPECT_EQ(PendingFiles(), 1u);
  {
    auto a = UserEventWriter::Open(paths_, "test");
    auto b = UserEventWriter::Open(paths_, "test");
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NE((*a)->path(), (*b)->path()) << "a live writer's file is its own";
    (*a)->Submit(Rec(5, kWriters), 5);
    (*b)->Submit(Rec(5, kWriters + 1), 5);
    (*a)->Flush();
    (*b)->Flush();
    EXPECT_EQ(PendingFiles(), 2u);
  }
  auto x = Make();
  Window(*x);
  std::vector<int> seen;
  for (const auto& r : records_) {
    EXPECT_NE(r["type"], "loss") << r.dump();
    seen.push_back(r["n"].get<int>());
  }
  std::sort(seen.begin(), seen.end());
  ASSERT_EQ(seen.size(), static_cast<size_t>(kWriters + 2));
  for (int i = 0; i < kWriters + 2; ++i) EXPECT_EQ(seen[i], i) << "each line once";
  EXPECT_EQ(PendingFiles(), 0u) << "read and removed";
}

// A file a dead writer left mid-line is not taken over (the next line would
// join the half one): the holder still counts that line as lost, and the new
// writer's line, in a file of its own, arrives whole.
TEST_F(UserEvents, AFileEndingInAHalfLineIsNotTakenOver) {
  ASSERT_EQ(mkdir((dir_ + "/audit").c_str(), 0700), 0);
  ASSERT_EQ(mkdir(PendingDir(paths_).c_str(), 0700), 0);
  const std::string dead = PendingDir(paths_) + "/1-2.jsonl";
  std::ofstream(dead) << Rec(3, 0).dump() << "\n{\"type\":\"dn";
  {
    auto w = UserEventWriter::Open(paths_, "test");
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_NE((*w)->path(), dead);
    (*w)->Submit(Rec(3, 1), 3);
    (*w)->Flush();
  }
  EXPECT_EQ(PendingFiles(), 2u);
  auto x = Make();
  Window(*x);
  int losses = 0;
  std::set<int> ns;
  for (const auto& r : records_) {
    if (r["type"] == "loss") {
      ++losses;
    } else {
      ns.insert(r["n"].get<int>());
    }
  }
  EXPECT_EQ(losses, 1);
  EXPECT_EQ(ns, (std::set<int>{0, 1}));
  EXPECT_EQ(PendingFiles(), 0u);
}

// A file a writer took over that the holder had read in part: the holder
// reads on from its offset, never a line twice.
TEST_F(UserEvents, AHolderReadsATakenOverFileOnFromItsOffset) {
  {
    auto w = UserEventWriter::Open(paths_, "test");
    ASSERT_TRUE(w.ok());
    (*w)->Submit(Rec(5, 0), 5);
    (*w)->Flush();
    auto x = Make();
    Window(*x);  // reads line 0 while its writer lives: the file stays, its offset saved
    ASSERT_EQ(records_.size(), 1u);
  }
  EXPECT_EQ(PendingFiles(), 1u);
  {
    auto w = UserEventWriter::Open(paths_, "test");
    ASSERT_TRUE(w.ok());
    (*w)->Submit(Rec(5, 1), 5);
    (*w)->Flush();
  }
  EXPECT_EQ(PendingFiles(), 1u) << "taken over";
  records_.clear();
  auto x = Make();
  Window(*x);
  ASSERT_EQ(records_.size(), 1u);
  EXPECT_EQ(records_[0]["n"], 1);
  EXPECT_EQ(PendingFiles(), 0u);
}

TEST_F(UserEvents, TheSandboxsLabelsAreAdded) {
  control::SandboxRecords records(paths_);
  ASSERT_EQ(mkdir(records.dir().c_str(), 0700), 0);
  control::SandboxRecord rec;
  rec.cgroup_id = 77;
  rec.labels = {{"pod", "web-1"}, {"namespace", "ci"}, {"task", "T-1"}};
  ASSERT_TRUE(records.Write(rec).ok());
  auto w = UserEventWriter::Open(paths_, "test");
  ASSERT_TRUE(w.ok());
  (*w)->Submit(Rec(77, 0), 77);
  (*w)->Flush();
  auto x = Make();
  Window(*x);
  ASSERT_EQ(records_.size(), 1u);
  EXPECT_EQ(records_[0]["pod"]["name"], "web-1") << records_[0].dump();
  EXPECT_EQ(records_[0]["pod"]["namespace"], "ci");
  EXPECT_EQ(records_[0]["task"], "T-1");
  EXPECT_EQ(records_[0]["sandbox"]["labels"]["pod"], "web-1");
}

TEST_F(UserEvents, NothingIsWrittenWhereEgressdNeverRan) {
  paths_.runtime_dir = dir_ + "/never";
  WriteOneUserEvent(paths_, EngineJson("stopped", nullptr), 0);
  EXPECT_NE(access(paths_.runtime_dir.c_str(), F_OK), 0);
}

TEST(DnsRecord, CarriesHubblesNamesAndWhatWasLearnedAndRefused) {
  dns::QueryEvent e;
  e.sandbox_id = 9;
  e.realtime_ns = 1'700'000'000'000'000'000ull;
  e.parsed = true;
  e.qname = "www.example.com";
  e.qtype = 1;
  e.allowed = true;
  e.reason = "name-in-scope";
  e.rule = "*.example.com";
  e.rcode = 0;
  e.answers = {{"www.example.com", 5, 300, "edge.example.net"}, {"edge.example.net", 1, 60, "192.0.2.10"}};
  e.learned = {{*net::IpAddr::Parse("192.0.2.10"), 60}};
  e.refused = {{*net::IpAddr::Parse("169.254.169.254"), "protected"}};
  e.upstream_ns = 1234567;
  e.learn_ns = 23456;
  nlohmann::json j = DnsJson(e);
  EXPECT_EQ(j["type"], "dns");
  EXPECT_EQ(j["verdict"], "allow");
  EXPECT_EQ(j["sandbox"]["id"], 9);
  EXPECT_EQ(j["dns"]["query"], "www.example.com.");
  EXPECT_EQ(j["dns"]["qtypes"], nlohmann::json::array({"A"}));
  EXPECT_EQ(j["dns"]["rcode"], 0);
  EXPECT_EQ(j["dns"]["rcode_name"], "NOERROR");
  EXPECT_EQ(j["dns"]["ips"], nlohmann::json::array({"192.0.2.10"}));
  EXPECT_EQ(j["dns"]["cnames"], nlohmann::json::array({"edge.example.net."}));
  EXPECT_EQ(j["dns"]["ttl"], 60);
  EXPECT_EQ(j["dns"]["transport"], "udp");
  EXPECT_EQ(j["dns"]["rule"], "*.example.com");
  EXPECT_EQ(j["dns"]["learned"][0]["ip"], "192.0.2.10");
  EXPECT_EQ(j["dns"]["refused"][0]["ip"], "169.254.169.254");
  EXPECT_EQ(j["dns"]["refused"][0]["why"], "protected");
  EXPECT_EQ(j["dns"]["upstream_latency_ns"], 1234567);
  EXPECT_EQ(j["dns"]["learn_latency_ns"], 23456);

  dns::QueryEvent d;
  d.parsed = true;
  d.qname = "denied.example";
  d.qtype = 28;
  d.reason = "name-not-in-scope";
  d.rcode = 3;
  d.over_tcp = true;
  nlohmann::json k = DnsJson(d);
  EXPECT_EQ(k["verdict"], "deny");
  EXPECT_EQ(k["dns"]["rcode_name"], "NXDOMAIN");
  EXPECT_EQ(k["dns"]["qtypes"], nlohmann::json::array({"AAAA"}));
  EXPECT_EQ(k["dns"]["transport"], "tcp");
  EXPECT_FALSE(k["dns"].contains("upstream_latency_ns"));
  EXPECT_FALSE(k["dns"].contains("learn_latency_ns"));
}

// The proxy's encoder writes, byte for byte, what DnsJson dumps, for every
// shape of record: allowed with CNAMEs, learned and refused addresses,
// denied, unparsed, truncated, failed upstream, TCP, and text that needs
// escaping (quotes, backslashes, control bytes, non-ASCII).
TEST(DnsLine, IsDnsJsonDumped) {
  auto dump = [](const dns::QueryEvent& e) {
    return DnsJson(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  std::vector<dns::QueryEvent> events;
  dns::QueryEvent full;
  full.sandbox_id = 18446744073709551615ull;
  full.realtime_ns = 1764600000123456789ull;
  full.parsed = true;
  full.qname = "www.example.com";
  full.qtype = 1;
  full.allowed = true;
  full.reason = "name-in-scope";
  full.rule = "*.example.com";
  full.rcode = 0;
  full.answers = {{"www.example.com", 5, 300, "edge.example.net"},
                  {"edge.example.net", 1, 60, "192.0.2.10"},
                  {"edge.example.net", 28, 30, "2001:db8::1"},
                  {"edge.example.net", 16, 10, ""}};
  full.learned = {{*net::IpAddr::Parse("192.0.2.10"), 60}, {*net::IpAddr::Parse("2001:db8::1"), 30}};
  full.refused = {{*net::IpAddr::Parse("169.254.169.254"), "protected"},
                  {*net::IpAddr::Parse("192.0.2.11"), "map write failed: \"full\"\n"}};
  full.upstream_ns = 1234567;
  full.learn_ns = 8910;
  events.push_back(full);
  dns::QueryEvent denied;
  denied.parsed = true;
  denied.qname = "denied.example";
  denied.qtype = 28;
  denied.reason = "name-not-in-scope";
  denied.rcode = 3;
  denied.over_tcp = true;
  events.push_back(denied);
  dns::QueryEvent unparsed;
  unparsed.reason = "not-a-query";
  events.push_back(unparsed);
  dns::QueryEvent odd = denied;
  odd.qname = std::string("a\"b\\c\x01\td\x7f\xc3\xa9\xff", 13);
  odd.rule = "caf\xc3\xa9.example";
  odd.qtype = 4242;
  odd.rcode = 9;
  events.push_back(odd);
  dns::QueryEvent truncated = full;
  truncated.truncated = true;
  truncated.answers.clear();
  truncated.learned.clear();
  truncated.learn_ns.reset();
  events.push_back(truncated);
  dns::QueryEvent failed = full;
  failed.rcode = 2;
  failed.answers.clear();
  failed.learned.clear();
  failed.refused.clear();
  failed.upstream_ns.reset();
  failed.learn_ns.reset();
  failed.upstream_error = "UNAVAILABLE: upstream: Timeout while contacting DNS servers";
  events.push_back(failed);
  for (const auto& e : events) {
    const std::string line = DnsLine(e);
    EXPECT_EQ(line, dump(e));
    EXPECT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded()) << line;
  }
}

}  // namespace
}  // namespace egressd::audit
