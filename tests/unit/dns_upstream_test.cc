// --upstream-dns values.
#include <gtest/gtest.h>

#include "userspace/dns/upstream.h"

namespace egressd::dns {
namespace {

TEST(DnsUpstreamServer, Parses) {
  auto a = ParseUpstreamServer("192.0.2.53");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->ToString(), "192.0.2.53:53");
  auto b = ParseUpstreamServer("192.0.2.53:5353");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->port, 5353);
  auto c = ParseUpstreamServer("[2001:db8::53]:54");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->ToString(), "[2001:db8::53]:54");
  auto d = ParseUpstreamServer("2001:db8::53");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->port, 53);
}

TEST(DnsUpstreamServer, RejectsNamingTheValue) {
  for (const char* bad : {"", "dns.google", "192.0.2.1:0", "192.0.2.1:65536", "192.0.2.1:", "[2001:db8::1",
                          "[2001:db8::1]x", "300.1.1.1"}) {
    auto r = ParseUpstreamServer(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("\"") + bad), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace egressd::dns
