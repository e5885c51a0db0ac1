// The incumbent's forwarder (egr-nft-forwarder) behaves as the benchmark
// claims: in a lab pod behind its nft redirect, a denied name is NXDOMAIN and
// never reaches the upstream (a dnsmasq in the world that logs every query);
// an allowed answer's address is in the pod's timeout set once the answer is
// out, and the pod's connect to it then arrives; when the transaction fails
// the answer is SERVFAIL and carries no address (the answer waits for the
// transaction's outcome); its own upstream queries pass the pod's redirect
// and filter by their mark.
#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "egressd_env.h"
#include "lab_dns.h"
#include "nft_resolved_set.h"

namespace egressd::bench {
namespace {

using namespace std::chrono_literals;

constexpr const char* kUpstream = lab::kPublicE4;
constexpr const char* kScope = "*.fwd.test";
constexpr const char* kAllowed = "allowed.fwd.test";
constexpr const char* kDenied = "denied.example";
constexpr const char* kMark = "4e46";
constexpr uint16_t kPort = 5353;

class NftForwarder : public ::testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    lab::Lab& lab = test::Shared().lab();
    netns_ = lab.pod().netns;
    auto up = lab::DnsServer::Start({.netns = lab.world_netns(), .listen = {kUpstream},
                                     .records = {{kAllowed, {lab::kPublicA4}}, {kDenied, {lab::kPublicB4}}}});
    ASSERT_TRUE(up.ok()) << up.status();
    upstream_ = std::move(*up);
    lab::RunResult rules = test::Shared().Ctl({"policy", "compile", "-o", "nft", "--egress", kScope});
    ASSERT_EQ(rules.exit_code, 0) << rules.Describe();
    ASSERT_TRUE(Nft(WithDnsRedirect(rules.out, kMark, kPort)));
    auto fwd = lab::Start({.argv = {lab::BinaryPath("egr-nft-forwarder"), "--port", std::to_string(kPort),
                                    "--upstream", kUpstream, "--mark", kMark, "--egress", kScope},
                           .netns = netns_, .cgroup = "", .hostile = false, .timeout = 10min, .env = {},
                           .stdin_data = ""});
    ASSERT_TRUE(fwd.ok()) << fwd.status();
    fwd_ = std::move(*fwd);
    for (;;) {  // spdlog's lines come first
      auto line = fwd_->ReadOutLine(20s);
      ASSERT_TRUE(line) << "the forwarder never said ready: " << fwd_->err();
      if (*line == "ready") break;
    }
  }
  void TearDown() override {
    if (fwd_) fwd_->Stop();
    upstream_.reset();
    for (const char* t : {kNftRedirectTable, "egressd_sandbox"}) InPod({"nft", "delete", "table", "inet", t});
  }

  lab::RunResult InPod(std::vector<std::string> argv, const std::string& stdin_data = "") {
    return lab::Run({.argv = std::move(argv), .netns = netns_, .cgroup = "", .hostile = false, .timeout = 20s,
                     .env = {}, .stdin_data = stdin_data});
  }
  bool Nft(const std::string& commands) {
    lab::RunResult r = InPod({"nft", "-f", "-"}, commands);
    EXPECT_EQ(r.exit_code, 0) << r.Describe() << "\n" << commands;
    return r.exit_code == 0;
  }
  // dig from the pod at the upstream's address (the redirect takes it to
  // the forwarder): "status answer-addresses".
  std::string Dig(const std::string& name) {
    lab::RunResult r = InPod({"dig", "+time=3", "+tries=1", "+noall", "+comments", "+answer", "@" + std::string(kUpstream),
                              name, "A"});
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    std::string status = "none", addrs;
    const size_t at = r.out.find("status: ");
    if (at != std::string::npos) status = r.out.substr(at + 8, r.out.find(',', at) - at - 8);
    for (size_t p = 0; (p = r.out.find("\tA\t", p)) != std::string::npos; p += 3) {
      addrs += " " + r.out.substr(p + 3, r.out.find('\n', p) - p - 3);
    }
    return status + addrs;
  }
  bool InSet(const char* addr) {
    return InPod({"nft", "get", "element", "inet", "egressd_sandbox", "resolved4", absl::StrCat("{ ", addr, " }")})
               .exit_code == 0;
  }

  std::string netns_;
  std::unique_ptr<lab::DnsServer> upstream_;
  std::optional<lab::Background> fwd_;
};

TEST_F(NftForwarder, DeniedNameIsNxdomainAndNeverAsked) {
  EXPECT_EQ(Dig(kDenied), "NXDOMAIN");
  EXPECT_EQ(Dig(kAllowed), "NOERROR " + std::string(lab::kPublicA4)) << "positive control";
  EXPECT_EQ(upstream_->QueriesFor(kDenied), 0u) << upstream_->Log();
  EXPECT_EQ(upstream_->QueriesFor(kAllowed), 1u) << upstream_->Log();
}

TEST_F(NftForwarder, AnAllowedAnswerIsInTheSetAndItsConnectArrives) {
  lab::Lab& lab = test::Shared().lab();
  lab.ResetCounters();
  EXPECT_FALSE(InSet(lab::kPublicA4)) << "nothing learned before the query";
  EXPECT_EQ(Dig(kAllowed), "NOERROR " + std::string(lab::kPublicA4));
  EXPECT_TRUE(InSet(lab::kPublicA4));
  lab::RunResult c = InPod({lab::BinaryPath("egressd-probe"), "batch", absl::StrCat("tcp ", lab::kPublicA4, " 80")});
  auto lines = test::Lines(c);
  ASSERT_EQ(lines.size(), 1u) << c.Describe();
  EXPECT_TRUE(test::Ok(lines[0])) << c.Describe();
  EXPECT_EQ(lab.TcpAccepts(lab::kPublicA4, 80), 1u) << lab.CountersSummary();
}

// The answer waits for the transaction's outcome: with the set gone the
// transaction fails, and the client gets SERVFAIL, never the address.
TEST_F(NftForwarder, AFailedTransactionIsServfailWithoutTheAddress) {
  ASSERT_TRUE(Nft("delete table inet egressd_sandbox\n"));
  EXPECT_EQ(Dig(kAllowed), "SERVFAIL");
  EXPECT_EQ(upstream_->QueriesFor(kAllowed), 1u) << "the upstream answered; only the transaction failed";
}

}  // namespace
}  // namespace egressd::bench
