// userspace/audit without a kernel: records as JSON lines, the numbering that
// continues across restarts, gaps reported (never hidden, never invented for
// records that were only late), the filters and the rotating file.
#include <stdlib.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "userspace/audit/exporter.h"
#include "userspace/audit/line_file.h"
#include "userspace/audit/record.h"

namespace egressd::audit {
namespace {

class AuditExport : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/egr-audit-unit-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    paths_.runtime_dir = dir_;
  }
  void TearDown() override { (void)system(("rm -rf " + dir_).c_str()); }

  std::unique_ptr<Exporter> Make() {
    ExporterOptions o;
    o.state_path = dir_ + "/state.json";
    auto x = Exporter::Create(paths_, o, [this](const nlohmann::json& r, const std::string& line) {
      records_.push_back(r);
      lines_.push_back(line);
    });
    EXPECT_TRUE(x.ok()) << x.status();
    return x.ok() ? *std::move(x) : nullptr;
  }
  static egr_event Event(uint32_t cpu, uint64_t seq, uint8_t action = 1) {
    egr_event e{};
    e.key.sandbox_id = 42;
    e.key.kind = EGR_EVENT_CONNECT;
    e.key.action = action;
    e.key.reason = action ? EGR_REASON_DEFAULT : EGR_REASON_ALLOWED;
    e.key.family = 2;
    e.key.protocol = 6;
    e.key.dport = 443;
    e.key.daddr[10] = e.key.daddr[11] = 0xff;
    e.key.daddr[12] = 192, e.key.daddr[13] = 0, e.key.daddr[14] = 2, e.key.daddr[15] = 10;
    e.task.tgid = 77;
    std::strcpy(e.task.comm, "curl");
    e.flags = EGR_EVENT_HAS_TASK | EGR_EVENT_HAS_UID;
    e.cpu = cpu;
    e.seq = seq;
    return e;
  }
  std::vector<nlohmann::json> Gaps() const {
    std::vector<nlohmann::json> g;
    for (const auto& r : records_) {
      if (r["type"] == "gap") g.push_back(r);
    }
    return g;
  }

  std::string dir_;
  Paths paths_;
  std::vector<nlohmann::json> records_;
  std::vector<std::string> lines_;
};

TEST_F(AuditExport, ARecordCarriesHubbleAndTetragonNames) {
  auto x = Make();
  ASSERT_TRUE(x->OnEvent(Event(0, 1)).ok());
  ASSERT_EQ(records_.size(), 1u);
  const auto& r = records_[0];
  EXPECT_EQ(r["schema"], "egressd.audit/v1");
  EXPECT_EQ(r["seq"], 1);
  EXPECT_EQ(r["verdict"], "deny");
  EXPECT_EQ(r["reason"], "default-deny");
  EXPECT_EQ(r["IP"]["destination"], "192.0.2.10");
  EXPECT_EQ(r["l4"]["TCP"]["destination_port"], 443);
  EXPECT_EQ(r["process"]["pid"], 77);
  EXPECT_EQ(r["process"]["binary"], "curl");
  EXPECT_EQ(lines_[0].find('\n'), std::string::npos);
  EXPECT_EQ(ReasonName(EGR_EVENT_BACKSTOP, 1, EGR_REASON_PROTECTED), "backstop:protected");
  EXPECT_EQ(ReasonName(EGR_EVENT_CONNECT, 0, EGR_REASON_DEFAULT), "default-allow");
  EXPECT_EQ(ReasonName(EGR_EVENT_CONNECT, 0, EGR_REASON_RESOLVED), "resolved-name");
}

TEST_F(AuditExport, ACommWithANewlineStaysOneLine) {
  auto x = Make();
  egr_event e = Event(0, 1);
  std::strcpy(e.task.comm, "a\nb");
  ASSERT_TRUE(x->OnEvent(e).ok());
  EXPECT_EQ(lines_[0].find('\n'), std::string::npos) << lines_[0];
}

TEST_F(AuditExport, LateRecordsAreNoGapButMissingOnesAre) {
  auto x = Make();
  ASSERT_TRUE(x->OnEvent(Event(0, 1)).ok());
  ASSERT_TRUE(x->OnEvent(Event(0, 3)).ok());  // 2 is late (another CPU reserved first)
  ASSERT_TRUE(x->OnWindow({}, 0).ok());
  ASSERT_TRUE(x->OnEvent(Event(0, 2)).ok());
  ASSERT_TRUE(x->OnEvent(Event(0, 6)).ok());  // 4 and 5 never come
  ASSERT_TRUE(x->OnWindow({}, 0).ok());
  EXPECT_TRUE(Gaps().empty());
  ASSERT_TRUE(x->OnWindow({}, 0).ok());
  auto g = Gaps();
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0]["kernel"]["first_seq"], 4);
  EXPECT_EQ(g[0]["kernel"]["last_seq"], 5);
  EXPECT_EQ(g[0]["lost"], 2);
}

TEST_F(AuditExport, NumberingAndKernelPositionContinueAcrossRestarts) {
  {
    auto x = Make();
    for (uint64_t s = 1; s <= 3; ++s) ASSERT_TRUE(x->OnEvent(Event(1, s)).ok());
    ASSERT_TRUE(x->OnWindow({}, 0).ok());
  }
  // A reader that died after taking 4 off the ring but before writing it.
  auto y = Make();
  ASSERT_TRUE(y->OnEvent(Event(1, 5)).ok());
  EXPECT_EQ(records_.back()["seq"], 4);  // the line numbering goes on
  ASSERT_TRUE(y->OnWindow({}, 0).ok());
  ASSERT_TRUE(y->OnWindow({}, 0).ok());
  auto g = Gaps();
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0]["kernel"]["first_seq"], 4);
  EXPECT_EQ(g[0]["kernel"]["last_seq"], 4);
}

TEST_F(AuditExport, WindowCountsBecomeSummariesAndLosses) {
  auto x = Make();
  maps::WindowCounts w;
  egr_event e = Event(0, 1);
  egr_fold_val v{};
  v.count = 999;
  v.task = e.task;
  v.flags = e.flags;
  w.folds.emplace_back(e.key, v);
  egr_loss_key lk{};
  lk.sandbox_id = 42;
  w.loss_keys.push_back(lk);
  w.lost.push_back(7);
  ASSERT_TRUE(x->OnWindow(w, 0).ok());
  ASSERT_EQ(records_.size(), 2u);
  EXPECT_EQ(records_[0]["summary"], true);
  EXPECT_EQ(records_[0]["count"], 999);
  EXPECT_EQ(records_[1]["type"], "loss");
  EXPECT_EQ(records_[1]["lost"], 7);
  EXPECT_EQ(x->counted().at(42), 999u);
  EXPECT_EQ(x->lost().at(42), 7u);
}

TEST_F(AuditExport, FiltersAndCompactForm) {
  auto x = Make();
  ASSERT_TRUE(x->OnEvent(Event(0, 1, 0)).ok());
  ASSERT_TRUE(x->OnEvent(Event(0, 2, 1)).ok());
  Filter deny{.sandbox = std::nullopt, .verdict = "deny"};
  Filter other{.sandbox = 43, .verdict = std::nullopt};
  EXPECT_FALSE(Matches(records_[0], deny));
  EXPECT_TRUE(Matches(records_[1], deny));
  EXPECT_FALSE(Matches(records_[1], other));
  const std::string c = Compact(records_[1]);
  EXPECT_NE(c.find("deny (default-deny) TCP 192.0.2.10:443"), std::string::npos) << c;
}

// GET /v1/audit and egressctl audit parse and match their filters with the
// same two functions.
TEST_F(AuditExport, ParsedFiltersMatchTypeAndSinceAndNameTheBadValue) {
  auto x = Make();
  ASSERT_TRUE(x->OnEvent(Event(0, 2, 1)).ok());
  ASSERT_EQ(records_.size(), 1u);
  const std::string time = records_[0]["time"];
  auto f = ParseFilter("", "deny", "connect", "");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(Matches(records_[0], *f));
  EXPECT_FALSE(Matches(records_[0], *ParseFilter("", "", "dns", "")));
  EXPECT_TRUE(Matches(records_[0], *ParseFilter("", "", "", time)));
  EXPECT_TRUE(Matches(records_[0], *ParseFilter("", "", "", "2000-01-01T00:00:00+02:00")));
  EXPECT_FALSE(Matches(records_[0], *ParseFilter("", "", "", "2999-01-01T00:00:00Z")));
  EXPECT_TRUE(ParseFilter("", "", "", "").value().empty());
  for (auto [s, v, t, since, named] : std::vector<std::tuple<const char*, const char*, const char*, const char*, const char*>>{
           {"x1", "", "", "", "x1"}, {"0", "", "", "", "\"0\""}, {"", "maybe", "", "", "maybe"},
           {"", "", "conect", "", "conect"}, {"", "", "", "yesterday", "yesterday"}}) {
    auto bad = ParseFilter(s, v, t, since);
    ASSERT_FALSE(bad.ok()) << named;
    EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
    EXPECT_NE(bad.status().message().find(named), std::string::npos) << bad.status();
  }
}

TEST_F(AuditExport, RotatingFileIsPrivateAndNeverSplitsALine) {
  const std::string path = dir_ + "/audit.jsonl";
  auto f = LineFile::Open(path, 4096, 3);
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string line(1000, 'x');
  for (int i = 0; i < 20; ++i) f->Write(line);
  for (const std::string& p : {path, path.substr(0, path.size() - 6) + ".1.jsonl"}) {
    struct stat st;
    ASSERT_EQ(stat(p.c_str(), &st), 0) << p;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << p;
    EXPECT_LE(st.st_size, 4096) << p;
    EXPECT_EQ(st.st_size % 1001, 0) << p << ": a partial line";
  }
}

}  // namespace
}  // namespace egressd::audit
