// The sandbox record's "dns" endpoint, the shape the proxy reads: written
// and read back the same by both writers and both readers.
#include <gtest/gtest.h>

#include "userspace/control/sandbox_record.h"

namespace egressd::control {
namespace {

SandboxRecord WithEndpoint() {
  SandboxRecord r;
  r.cgroup_id = 4242;
  r.current.policy_id = 3;
  r.current.policy = policy::CompiledPolicy{};
  r.current.policy->names = {"api.example.com"};
  r.dns = DnsEndpoint{*net::IpAddr::Parse("169.254.53.1"), *net::IpAddr::Parse("fd00:53::1"), 10053};
  return r;
}

TEST(DnsRecord, EndpointRoundTripsThroughTextAndJson) {
  SandboxRecord r = WithEndpoint();
  auto from_text = ParseRecordText(ToJsonText(r));
  ASSERT_TRUE(from_text.ok()) << from_text.status();
  ASSERT_TRUE(from_text->dns);
  EXPECT_EQ(*from_text->dns, *r.dns);
  auto from_json = SandboxRecordFromJson(ToJson(r));
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  ASSERT_TRUE(from_json->dns);
  EXPECT_EQ(*from_json->dns, *r.dns);
  EXPECT_EQ(nlohmann::json::parse(ToJsonText(r)), ToJson(r));
}

TEST(DnsRecord, OneFamilyOnly) {
  SandboxRecord r = WithEndpoint();
  r.dns->addr6.reset();
  auto back = ParseRecordText(ToJsonText(r));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back->dns, *r.dns);
  EXPECT_FALSE(back->dns->addr6);
}

TEST(DnsRecord, AbsentMeansNoEndpoint) {
  SandboxRecord r = WithEndpoint();
  r.dns.reset();
  auto back = ParseRecordText(ToJsonText(r));
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->dns);
  EXPECT_FALSE(ToJson(r).contains("dns"));
}

TEST(DnsRecord, WrongFamilyIsRejected) {
  std::string text = ToJsonText(WithEndpoint());
  std::string swapped = text;
  swapped.replace(swapped.find("169.254.53.1"), 12, "fd00::9");
  EXPECT_FALSE(ParseRecordText(swapped).ok());
  EXPECT_FALSE(SandboxRecordFromJson(nlohmann::json::parse(swapped)).ok());
}

}  // namespace
}  // namespace egressd::control
