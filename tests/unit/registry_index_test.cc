// control::RegistryIndex: the daemon's in-memory view of the records that
// lets a register pick a DNS port and find a sharable policy without reading
// every record.  It must follow its owner's changes, and be rebuilt when
// another process changed a record (RecordsGeneration).
#include <stdlib.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "userspace/control/registry.h"
#include "userspace/control/sandbox_record.h"

namespace egressd::control {
namespace {

class RegistryIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/egr-regindex-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    paths_.runtime_dir = tmpl;
    records_.emplace(paths_);
  }
  void TearDown() override { std::filesystem::remove_all(paths_.runtime_dir); }
  SandboxRecord Record(uint64_t cg, uint16_t port, maps::PolicyId id, const std::string& cidr) {
    SandboxRecord r;
    r.cgroup_id = cg;
    r.dns = maps::DnsEndpoint{net::IpAddr::Parse("10.0.0.1").value(), std::nullopt, port};
    policy::CompiledPolicy p;
    p.allowed.push_back(policy::AllowedCidr{net::Cidr::Parse(cidr).value(), {}, cidr});
    r.current = {id, p};
    return r;
  }
  Paths paths_;
  std::optional<SandboxRecords> records_;
};

TEST_F(RegistryIndexTest, FollowsItsOwnerAndRebuildsAfterAnotherWriter) {
  RegistryIndex index;
  ASSERT_TRUE(index.Sync(*records_).ok());
  EXPECT_EQ(index.LowestFreePort().value_or(0), kDnsPortFirst);
  EXPECT_EQ(RecordsGeneration(*records_).value(), 0u);

  // The owner's own writes: Put after each, then Seen.  (A counter made
  // anew starts at a random value: only its changes are compared.)
  const SandboxRecord a = Record(1, kDnsPortFirst, 0x11, "192.0.2.0/24");
  ASSERT_TRUE(records_->Write(a).ok());
  const uint64_t after_a = RecordsGeneration(*records_).value();
  EXPECT_NE(after_a, 0u);
  index.Put(a);
  index.Seen(*records_);
  EXPECT_EQ(index.LowestFreePort().value_or(0), kDnsPortFirst + 1);
  const uint64_t hash = a.current.policy->ContentHash();
  auto knowers = index.Knowers(hash);
  ASSERT_EQ(knowers.size(), 1u);
  EXPECT_EQ(knowers[0].first, 0x11u);
  EXPECT_EQ(knowers[0].second, std::vector<uint64_t>{1});

  // Another process writes a record taking the next port: the generation
  // moved, so Sync rebuilds and the port is taken.
  const SandboxRecord b = Record(2, kDnsPortFirst + 1, 0x11, "192.0.2.0/24");
  SandboxRecords other(paths_);
  ASSERT_TRUE(other.Write(b).ok());
  EXPECT_EQ(RecordsGeneration(*records_).value(), after_a + 1);
  ASSERT_TRUE(index.Sync(*records_).ok());
  EXPECT_EQ(index.LowestFreePort().value_or(0), kDnsPortFirst + 2);
  EXPECT_EQ(index.Knowers(hash).at(0).second, (std::vector<uint64_t>{1, 2}));

  // Removing frees the lowest port again, and the policy loses a knower.
  ASSERT_TRUE(records_->Remove(1).ok());
  index.Erase(1);
  index.Seen(*records_);
  EXPECT_EQ(index.LowestFreePort().value_or(0), kDnsPortFirst);
  EXPECT_EQ(index.Knowers(hash).at(0).second, std::vector<uint64_t>{2});
  ASSERT_TRUE(other.Remove(2).ok());
  ASSERT_TRUE(index.Sync(*records_).ok());
  EXPECT_TRUE(index.Knowers(hash).empty());
  EXPECT_EQ(index.size(), 0u);
}

}  // namespace
}  // namespace egressd::control
