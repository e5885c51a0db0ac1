// control::DnsPortLedger: the DNS ports the records hold, kept beside them so
// a one-shot register picks a port without reading every record.  It is
// trusted only while current: any record change it did not follow (another
// writer, a counter file started again) makes it stale, never wrong.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "userspace/control/dns_port_ledger.h"
#include "userspace/control/registry.h"
#include "userspace/control/sandbox_record.h"

namespace egressd::control {
namespace {

class DnsPortLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/egr-portledger-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    paths_.runtime_dir = tmpl;
    records_.emplace(paths_);
  }
  void TearDown() override { std::filesystem::remove_all(paths_.runtime_dir); }
  SandboxRecord Record(uint64_t cg, std::optional<uint16_t> port) {
    SandboxRecord r;
    r.cgroup_id = cg;
    if (port) r.dns = maps::DnsEndpoint{net::IpAddr::Parse("10.0.0.1").value(), std::nullopt, *port};
    policy::CompiledPolicy p;
    p.allowed.push_back(policy::AllowedCidr{net::Cidr::Parse("192.0.2.0/24").value(), {}, "192.0.2.0/24"});
    r.current = {0x11, p};
    return r;
  }
  Paths paths_;
  std::optional<SandboxRecords> records_;
};

TEST_F(DnsPortLedgerTest, RebuiltFromTheRecordsThenCurrentOnlyUntilAnotherWrite) {
  // No ledger yet: never current.
  EXPECT_FALSE(DnsPortLedger::LoadIfCurrent(*records_).has_value());
  ASSERT_TRUE(records_->Write(Record(1, kDnsPortFirst)).ok());
  ASSERT_TRUE(records_->Write(Record(2, kDnsPortFirst + 2)).ok());
  ASSERT_TRUE(records_->Write(Record(3, std::nullopt)).ok());
  auto built = DnsPortLedger::Rebuild(*records_);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->LowestFree(), std::optional<uint16_t>(kDnsPortFirst + 1));
  ASSERT_TRUE(built->Save(*records_).ok());

  auto loaded = DnsPortLedger::LoadIfCurrent(*records_);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->claims(kDnsPortFirst), 1u);
  EXPECT_EQ(loaded->claims(kDnsPortFirst + 1), 0u);
  EXPECT_EQ(loaded->claims(kDnsPortFirst + 2), 1u);
  EXPECT_EQ(loaded->LowestFree(), std::optional<uint16_t>(kDnsPortFirst + 1));

  // A writer that did not update it (the daemon, a reconcile): stale.
  ASSERT_TRUE(records_->Write(Record(4, kDnsPortFirst + 1)).ok());
  EXPECT_FALSE(DnsPortLedger::LoadIfCurrent(*records_).has_value());
  auto again = DnsPortLedger::Rebuild(*records_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->LowestFree(), std::optional<uint16_t>(kDnsPortFirst + 3));
  ASSERT_TRUE(again->Save(*records_).ok());
  EXPECT_TRUE(DnsPortLedger::LoadIfCurrent(*records_).has_value());
  ASSERT_TRUE(records_->Remove(4).ok());
  EXPECT_FALSE(DnsPortLedger::LoadIfCurrent(*records_).has_value());
}

TEST_F(DnsPortLedgerTest, ACounterStartedAgainNeverMatchesAnOldLedger) {
  ASSERT_TRUE(records_->Write(Record(1, kDnsPortFirst)).ok());
  auto built = DnsPortLedger::Rebuild(*records_);
  ASSERT_TRUE(built.ok());
  ASSERT_TRUE(built->Save(*records_).ok());
  ASSERT_TRUE(DnsPortLedger::LoadIfCurrent(*records_).has_value());
  // The counter removed (records edited by hand) and made again by the next
  // change: it starts at a random value, so it does not count up to the
  // value the ledger was stamped with (and the file may even get the old
  // inode number back: the stamp's inode alone would not tell them apart).
  const uint64_t g = RecordsGeneration(*records_).value();
  for (int round = 0; round < 20; ++round) {
    ASSERT_EQ(unlink((records_->dir() + "/generation").c_str()), 0);
    ASSERT_TRUE(records_->Remove(1).ok());
    EXPECT_NE(RecordsGeneration(*records_).value(), g);
    EXPECT_NE(RecordsGeneration(*records_).value(), 1u) << "a counter made anew does not start from 0";
    EXPECT_FALSE(DnsPortLedger::LoadIfCurrent(*records_).has_value());
    ASSERT_TRUE(records_->Write(Record(1, kDnsPortFirst)).ok());
  }
}

TEST_F(DnsPortLedgerTest, ClaimsCountSoASharedPortStaysTakenAndTheRangeEnds) {
  auto l = DnsPortLedger::Rebuild(*records_);
  ASSERT_TRUE(l.ok());
  // Two records naming one port (edited by hand): one release leaves it taken.
  l->Claim(kDnsPortFirst);
  l->Claim(kDnsPortFirst);
  l->Release(kDnsPortFirst);
  EXPECT_EQ(l->LowestFree(), std::optional<uint16_t>(kDnsPortFirst + 1));
  l->Release(kDnsPortFirst);
  EXPECT_EQ(l->LowestFree(), std::optional<uint16_t>(kDnsPortFirst));
  // Ports outside the range hold nothing of it.
  l->Claim(53);
  l->Release(kDnsPortLast + 1);
  EXPECT_EQ(l->claims(53), 0u);
  for (uint32_t p = kDnsPortFirst; p <= kDnsPortLast; ++p) l->Claim(static_cast<uint16_t>(p));
  EXPECT_FALSE(l->LowestFree().has_value());
}

TEST_F(DnsPortLedgerTest, AFileOfAnotherLayoutIsNotTrusted) {
  ASSERT_TRUE(records_->Write(Record(1, kDnsPortFirst)).ok());
  auto built = DnsPortLedger::Rebuild(*records_);
  ASSERT_TRUE(built.ok());
  ASSERT_TRUE(built->Save(*records_).ok());
  ASSERT_EQ(truncate(DnsPortLedger::PathIn(*records_).c_str(), 100), 0);
  EXPECT_FALSE(DnsPortLedger::LoadIfCurrent(*records_).has_value());
}

}  // namespace
}  // namespace egressd::control
