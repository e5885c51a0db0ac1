// The spools the reader-lock holder writes and the other readers tail,
// rotated by size (userspace/audit/spool.h): a tail reads every line exactly
// once, in order, across any number of rotations, whether it keeps up, lags
// by several files, or races the writer; one that falls further behind than
// the files kept says so and still never reads a line twice.
#include <stdlib.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "userspace/audit/exporter.h"
#include "userspace/audit/reader_lock.h"
#include "userspace/audit/spool.h"
#include "userspace/common/errors.h"

namespace egressd::audit {
namespace {

class AuditSpool : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/egr-audit-spool-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    paths_.runtime_dir = dir_;
    ASSERT_TRUE(MakeDirs(SpoolDir(paths_), 0700).ok());
  }
  void TearDown() override { (void)system(("rm -rf " + dir_).c_str()); }

  std::unique_ptr<Exporter> Make(SpoolLimits limits) {
    ExporterOptions o;
    o.state_path = dir_ + "/state.json";
    o.spool_dir = SpoolDir(paths_);
    o.spool_limits = limits;
    auto x = Exporter::Create(paths_, o, Exporter::LineSink());
    EXPECT_TRUE(x.ok()) << x.status();
    return x.ok() ? *std::move(x) : nullptr;
  }
  static egr_event Event(uint64_t seq) {
    egr_event e{};
    e.key.sandbox_id = 42;
    e.key.kind = EGR_EVENT_CONNECT;
    e.key.action = 1;
    e.key.reason = EGR_REASON_DEFAULT;
    e.key.family = 2;
    e.key.protocol = 6;
    e.key.dport = 443;
    e.key.daddr[10] = e.key.daddr[11] = 0xff;
    e.key.daddr[12] = 192, e.key.daddr[15] = 1;
    std::strcpy(e.task.comm, "curl");
    e.flags = EGR_EVENT_HAS_TASK | EGR_EVENT_HAS_UID;
    e.seq = seq;
    return e;
  }
  // The seq of every line a tail hands over, in order.
  static SpoolTail::LineFn Collect(std::vector<uint64_t>& seqs) {
    return [&seqs](const std::string& line) {
      seqs.push_back(nlohmann::json::parse(line)["seq"].get<uint64_t>());
    };
  }
  static void ExpectEachOnceInOrder(const std::vector<uint64_t>& seqs, uint64_t n) {
    ASSERT_EQ(seqs.size(), n);
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(seqs[i], i + 1) << "line " << i;
  }
  size_t Rotated(const std::string& path) const {
    size_t n = 0;
    struct stat st;
    while (stat((path + "." + std::to_string(n + 1)).c_str(), &st) == 0) ++n;
    return n;
  }

  std::string dir_;
  Paths paths_;
};

TEST_F(AuditSpool, ATailThatLagsSeveralRotationsReadsEveryLineOnce) {
  const SpoolLimits limits{.max_bytes = 8192, .files = 6};
  auto x = Make(limits);
  SpoolTail tail(SpoolPath(paths_, 42));
  std::vector<uint64_t> seqs;
  // Opened at the first line, then four rotations' worth written unread.
  ASSERT_TRUE(x->OnEvent(Event(1)).ok());
  ASSERT_TRUE(x->Flush().ok());
  ASSERT_TRUE(tail.Open(false).ok());
  uint64_t n = 1;
  while (Rotated(SpoolPath(paths_, 42)) < 4) {
    ASSERT_TRUE(x->OnEvent(Event(++n)).ok());
    if (n % 3 == 0) {
      ASSERT_TRUE(x->Flush().ok());
    }
  }
  ASSERT_TRUE(x->Flush().ok());
  ASSERT_TRUE(tail.Read(Collect(seqs)).ok());
  ExpectEachOnceInOrder(seqs, n);
  EXPECT_EQ(tail.overrun(), 0u);
  // And goes on in the newest file.
  ASSERT_TRUE(x->OnEvent(Event(++n)).ok());
  ASSERT_TRUE(x->Flush().ok());
  ASSERT_TRUE(tail.Read(Collect(seqs)).ok());
  ExpectEachOnceInOrder(seqs, n);
  // Every file stays within its size (a batch is never split).
  struct stat st;
  ASSERT_EQ(stat((SpoolPath(paths_, 42) + ".2").c_str(), &st), 0);
  EXPECT_LE(st.st_size, 8192);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(AuditSpool, ATailRacingTheWriterReadsEveryLineOnce) {
  // all.jsonl, 4 files of 4 KiB (a line is ~400 bytes): hundreds of
  // rotations while the tail reads.  The writer keeps at most two files
  // ahead of the tail, so nothing may be lost: what is checked is the
  // hand-over between files in every interleaving the threads produce.
  const SpoolLimits limits{.max_bytes = 4096, .files = 4};
  auto x = Make(limits);
  const uint64_t n = 20000;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t read_count = 0;
  std::atomic<bool> failed{false};
  std::vector<uint64_t> seqs;
  // The tail is at the spool's first byte before anything is written.
  const std::string path = SpoolPath(paths_, 0);
  ASSERT_EQ(close(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600)), 0);
  SpoolTail tail(path);
  ASSERT_TRUE(tail.Open(false).ok());
  std::thread reader([&] {
    auto collect = Collect(seqs);
    while (seqs.size() < n && !failed) {
      if (!tail.Read(collect).ok()) failed = true;
      std::lock_guard<std::mutex> l(mu);
      read_count = seqs.size();
      cv.notify_all();
    }
    EXPECT_EQ(tail.overrun(), 0u);
  });
  for (uint64_t s = 1; s <= n; ++s) {
    ASSERT_TRUE(x->OnEvent(Event(s)).ok());
    if (s % 4 == 0 || s == n) {
      ASSERT_TRUE(x->Flush().ok());
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return s - read_count <= 16 || failed; });
    }
  }
  reader.join();
  ASSERT_FALSE(failed);
  ExpectEachOnceInOrder(seqs, n);
}

TEST_F(AuditSpool, ATailLeftTooFarBehindSaysSoAndNeverRepeats) {
  const SpoolLimits limits{.max_bytes = 4096, .files = 2};
  auto x = Make(limits);
  ASSERT_TRUE(x->OnEvent(Event(1)).ok());
  ASSERT_TRUE(x->Flush().ok());
  SpoolTail tail(SpoolPath(paths_, 42));
  ASSERT_TRUE(tail.Open(false).ok());
  std::vector<uint64_t> seqs;
  ASSERT_TRUE(tail.Read(Collect(seqs)).ok());
  for (uint64_t s = 2; s <= 200; ++s) {
    ASSERT_TRUE(x->OnEvent(Event(s)).ok());
    ASSERT_TRUE(x->Flush().ok());
  }
  ASSERT_TRUE(tail.Read(Collect(seqs)).ok());
  EXPECT_GE(tail.overrun(), 1u);
  EXPECT_EQ(seqs.back(), 200u);
  for (size_t i = 1; i < seqs.size(); ++i) EXPECT_LT(seqs[i - 1], seqs[i]);
  EXPECT_LT(seqs.size(), 200u);
}

}  // namespace
}  // namespace egressd::audit
