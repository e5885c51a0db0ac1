// Issue 13's kernel-side additions on the lab: the CIDR that matched in each
// record (`match.cidr`, v4, v6, v4-mapped and embedded), a redirected DNS
// query recorded as asked (its resolver, not the endpoint), audit-only
// sandboxes (only where the deployment config allows it; would-deny let
// through, protected ranges still refused, `enforced: false` in the status),
// and strict sandboxes refused once their events cannot be recorded while a
// non-strict one beside them carries on.
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "egressd_env.h"
#include "userspace/common/node.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;  // addresses

std::vector<nlohmann::json> ParseLines(std::istream& in) {
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << line;
    if (!j.is_discarded()) out.push_back(j);
  }
  return out;
}

std::vector<nlohmann::json> ReadLines(const std::string& path) {
  std::ifstream in(path);
  return ParseLines(in);
}

// The records of one type, in order.
std::vector<nlohmann::json> OfType(const std::vector<nlohmann::json>& lines, const std::string& type) {
  std::vector<nlohmann::json> out;
  for (const auto& j : lines) {
    if (j.value("type", "") == type) out.push_back(j);
  }
  return out;
}

nlohmann::json Status() {
  RunResult r = Shared().Ctl({"status", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  return j.is_discarded() ? nlohmann::json::object() : j;
}

std::map<std::string, long long> Counters() {
  std::map<std::string, long long> c;
  auto j = Status();
  if (!j.contains("counters")) return c;
  for (auto& [k, v] : j["counters"].items()) c[k] = v.get<long long>();
  return c;
}

class AuditModes : public testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    char tmpl[] = "/tmp/egr-auditmodes-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    allowing_ = File("allowing.yaml");
    plain_ = File("plain.yaml");
    std::ofstream(allowing_) << "audit:\n  allowAuditOnly: true\n";
    std::ofstream(plain_) << "airgapped: false\n";
  }
  void TearDown() override {
    // EGR_KEEP_AUDIT_FILES=1 keeps the records (docs/audit.md's examples).
    const char* keep = getenv("EGR_KEEP_AUDIT_FILES");
    if (keep != nullptr && std::string(keep) == "1") {
      std::fprintf(stderr, "kept %s\n", dir_.c_str());
      return;
    }
    if (!dir_.empty()) (void)system(("rm -rf " + dir_).c_str());
  }
  std::string File(const std::string& name) const { return dir_ + "/" + name; }
  RunResult Run(const std::vector<std::string>& policy, const std::vector<std::string>& probe) {
    RunResult r = Shared().RunSandboxed(policy, probe);
    last_ = r.Describe();
    return r;
  }
  Lab& lab() { return Shared().lab(); }
  std::string dir_, allowing_, plain_, last_;
};

TEST_F(AuditModes, RecordsNameTheCidrThatMatched) {
  const std::string f = File("match.jsonl");
  RunResult r = Run({"--audit", f, "--floor", "hosted", "--egress", "192.0.2.0/24", "--egress", "2001:db8::/32"},
                    {"tcp", kPublicA4, "80", "--then", "tcp", kPublicA6, "80", "--then", "tcp", kPrivate10, "80",
                     "--then", "tcp", kUla6, "80", "--then", "mapped6", kImds4, "80", "--then", "tcp", kNat64Imds,
                     "80", "--then", "tcp", kImds6, "80", "--then", "tcp", kPublicD4, "80"});
  ASSERT_EQ(r.exit_code, 0) << last_;
  auto probe = Lines(r);
  ASSERT_EQ(probe.size(), 8u) << last_;
  EXPECT_TRUE(Ok(probe[0])) << last_;
  EXPECT_TRUE(Ok(probe[1])) << last_;
  for (size_t i = 2; i < probe.size(); ++i) EXPECT_EQ(Errno(probe[i]), "EPERM") << i << ": " << last_;
  auto connects = OfType(ReadLines(f), "connect");
  ASSERT_EQ(connects.size(), 8u) << r.out;
  struct Want {
    const char* dst;
    const char* reason;
    const char* cidr;  // nullptr: no match
  };
  const Want want[] = {
      {kPublicA4, "allowed-cidr", "192.0.2.0/24"},
      {kPublicA6, "allowed-cidr", "2001:db8::/32"},
      {kPrivate10, "protected", "10.0.0.0/8"},  // the hosted floor's private range
      {kUla6, "protected", "fc00::/7"},
      // A dual-stack socket naming ::ffff:169.254.169.254: judged (and named)
      // as IPv4; the longest protected entry wins over 169.254.0.0/16.
      {kImds4, "protected", "169.254.169.254/32"},
      // NAT64 of the IMDS: the IPv4 CIDR its embedded address matched.
      {kNat64Imds, "protected", "169.254.169.254/32"},
      {kImds6, "protected", "fd00:ec2::254/128"},
      {kPublicD4, "default-deny", nullptr},
  };
  for (size_t i = 0; i < connects.size(); ++i) {
    const auto& j = connects[i];
    EXPECT_EQ(j["IP"]["destination"], want[i].dst) << j.dump();
    EXPECT_EQ(j["reason"], want[i].reason) << j.dump();
    if (want[i].cidr) {
      EXPECT_EQ(j["match"]["cidr"], want[i].cidr) << j.dump();
    } else {
      EXPECT_FALSE(j.contains("match")) << j.dump();
    }
  }
  EXPECT_EQ(connects[4]["IP"]["v4_mapped"], true) << connects[4].dump();
}

// The record of a redirected query names what the sandbox asked: the
// resolver and port 53 (the socket's dns_orig), not its DNS endpoint.
TEST_F(AuditModes, ARedirectedQueryIsRecordedAsAskedOfItsResolver) {
  const std::string f = File("dns.jsonl");
  // The upstream is named (a lab host): without it `run` serves DNS only when
  // the node's resolv.conf names a resolver, and the 6.1 guest's names none,
  // so the queries would be refused (EPERM) instead of redirected.
  RunResult r = Run({"--audit", f, "--egress", kPublicA4, "--upstream-dns", lab::kPublicE4},
                    {"udp-sendto", kDns4, "53", "--then", "tcp", kDns4, "53"});
  ASSERT_EQ(r.exit_code, 0) << last_;
  auto lines = ReadLines(f);
  std::vector<nlohmann::json> dns;
  for (const auto& j : lines) {
    if (j.value("reason", "") == "dns-redirect") dns.push_back(j);
  }
  ASSERT_EQ(dns.size(), 2u) << r.out << "\n" << last_;
  EXPECT_EQ(dns[0]["type"], "send");
  EXPECT_EQ(dns[0]["IP"]["destination"], kDns4);
  EXPECT_EQ(dns[0]["l4"]["UDP"]["destination_port"], 53);
  EXPECT_EQ(dns[1]["type"], "connect");
  EXPECT_EQ(dns[1]["IP"]["destination"], kDns4);
  EXPECT_EQ(dns[1]["l4"]["TCP"]["destination_port"], 53);
  for (const auto& j : dns) EXPECT_EQ(j["verdict"], "allow") << j.dump();
}

TEST_F(AuditModes, AuditOnlyIsRefusedUnlessTheDeploymentAllowsIt) {
  const uint64_t accepts = lab().TcpAccepts(kPublicB4, 80);
  for (const std::vector<std::string>& config :
       {std::vector<std::string>{}, std::vector<std::string>{"--config", plain_}}) {
    std::vector<std::string> policy = config;
    policy.insert(policy.end(), {"--audit-only", "--egress", kPublicA4});
    RunResult r = Run(policy, {"tcp", kPublicB4, "80"});
    EXPECT_EQ(r.exit_code, 2) << last_;
    EXPECT_NE(r.err.find("--audit-only"), std::string::npos) << last_;
    EXPECT_TRUE(Lines(r).empty()) << "the command ran: " << last_;
  }
  // sandbox add: refused the same way, and nothing was registered.
  auto cg = lab().MakeCgroup("auditonly-refused");
  ASSERT_TRUE(cg.ok()) << cg.status();
  auto id = CgroupIdOf(*cg);
  ASSERT_TRUE(id.ok());
  const auto records_before = Status()["records"].size();
  RunResult add = Shared().Ctl({"sandbox", "add", "--cgroup", *cg, "--config", plain_, "--audit-only", "--egress",
                                kPublicA4});
  EXPECT_EQ(add.exit_code, 2) << add.Describe();
  EXPECT_NE(add.err.find("--audit-only"), std::string::npos) << add.Describe();
  auto status = Status();
  EXPECT_EQ(status["records"].size(), records_before);
  for (const auto& c : status["cgroups"]) EXPECT_NE(c["cgroup_id"].get<uint64_t>(), *id) << c.dump();
  EXPECT_EQ(lab().TcpAccepts(kPublicB4, 80), accepts) << "a refused audit-only run reached the host";
}

TEST_F(AuditModes, AuditOnlyRecordsWouldDenyAndLetsItThroughButNotProtected) {
  const std::string f = File("auditonly.jsonl");
  const uint64_t accepts = lab().TcpAccepts(kPublicB4, 80);
  auto before = Counters();
  RunResult r = Run({"--audit", f, "--config", allowing_, "--audit-only", "--egress", kPublicA4},
                    {"tcp", kPublicB4, "80", "--then", "tcp", kImds4, "80", "--then", "tcp", kPublicA4, "80"});
  ASSERT_EQ(r.exit_code, 0) << last_;
  auto probe = Lines(r);
  ASSERT_EQ(probe.size(), 3u) << last_;
  EXPECT_TRUE(Ok(probe[0])) << "a would-deny is let through: " << last_;
  EXPECT_EQ(Errno(probe[1]), "EPERM") << "protected stays denied: " << last_;
  EXPECT_TRUE(Ok(probe[2])) << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kPublicB4, 80) == accepts + 1; }));
  auto after = Counters();
  EXPECT_EQ(after["would_deny"] - before["would_deny"], 1);
  auto connects = OfType(ReadLines(f), "connect");
  ASSERT_EQ(connects.size(), 3u) << r.out;
  EXPECT_EQ(connects[0]["verdict"], "would-deny");
  EXPECT_EQ(connects[0]["action"], "pass");
  EXPECT_EQ(connects[0]["reason"], "default-deny");
  EXPECT_EQ(connects[0]["IP"]["destination"], kPublicB4);
  EXPECT_EQ(connects[1]["verdict"], "deny");
  EXPECT_EQ(connects[1]["reason"], "protected");
  EXPECT_EQ(connects[1]["match"]["cidr"], "169.254.169.254/32");
  EXPECT_EQ(connects[2]["verdict"], "allow");
  EXPECT_EQ(connects[2]["match"]["cidr"], "192.0.2.10/32");
  // The packets of the would-deny connection are the connection's: the
  // backstop records nothing for them.
  EXPECT_TRUE(OfType(ReadLines(f), "backstop").empty()) << r.out;

  // The same policy enforced refuses what audit-only let through.
  r = Run({"--config", allowing_, "--egress", kPublicA4}, {"tcp", kPublicB4, "80"});
  ASSERT_EQ(r.exit_code, 0) << last_;
  EXPECT_EQ(Errno(Only(r)), "EPERM") << last_;
}

// Wherever a sandbox's status is shown, an audit-only one says it is not
// enforced (and a strict one that it is strict); an enforced one beside it
// says it is.
TEST_F(AuditModes, AnAuditOnlySandboxIsShownNotEnforced) {
  auto audit_cg = lab().MakeCgroup("auditonly-shown");
  auto enforced_cg = lab().MakeCgroup("enforced-shown");
  ASSERT_TRUE(audit_cg.ok() && enforced_cg.ok());
  auto audit_id = CgroupIdOf(*audit_cg), enforced_id = CgroupIdOf(*enforced_cg);
  ASSERT_TRUE(audit_id.ok() && enforced_id.ok());
  RunResult add = Shared().Ctl({"sandbox", "add", "--cgroup", *audit_cg, "--config", allowing_, "--audit-only",
                                "--strict-audit", "--egress", kPublicA4});
  ASSERT_EQ(add.exit_code, 0) << add.Describe();
  add = Shared().Ctl({"sandbox", "add", "--cgroup", *enforced_cg, "--config", allowing_, "--egress", kPublicA4});
  ASSERT_EQ(add.exit_code, 0) << add.Describe();

  auto status = Status();
  int seen = 0;
  for (const auto& c : status["cgroups"]) {
    const uint64_t id = c["cgroup_id"].get<uint64_t>();
    if (id == *audit_id) {
      EXPECT_EQ(c["enforced"], false) << c.dump();
      EXPECT_EQ(c["audit_only"], true) << c.dump();
      EXPECT_EQ(c["strict_audit"], true) << c.dump();
      ++seen;
    } else if (id == *enforced_id) {
      EXPECT_EQ(c["enforced"], true) << c.dump();
      EXPECT_EQ(c["audit_only"], false) << c.dump();
      ++seen;
    }
  }
  for (const auto& rec : status["records"]) {
    const uint64_t id = rec["cgroup_id"].get<uint64_t>();
    if (id == *audit_id) {
      EXPECT_EQ(rec["enforced"], false) << rec.dump();
      EXPECT_EQ(rec["current"]["policy"]["audit_only"], true) << rec.dump();
      ++seen;
    } else if (id == *enforced_id) {
      EXPECT_EQ(rec["enforced"], true) << rec.dump();
      ++seen;
    }
  }
  EXPECT_EQ(seen, 4) << status.dump();
  RunResult text = Shared().Ctl({"status"});
  EXPECT_NE(text.out.find(std::to_string(*audit_id) + " "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("NOT ENFORCED (audit-only"), std::string::npos) << text.out;
  // Never shared: the two sandboxes' policies differ only in the mode.
  uint32_t audit_policy = 0, enforced_policy = 0;
  for (const auto& c : status["cgroups"]) {
    if (c["cgroup_id"] == *audit_id) audit_policy = c["policy_id"].get<uint32_t>();
    if (c["cgroup_id"] == *enforced_id) enforced_policy = c["policy_id"].get<uint32_t>();
  }
  EXPECT_NE(audit_policy, enforced_policy);

  // The registered cgroup behaves as shown.
  const uint64_t accepts = lab().TcpAccepts(kPublicB4, 80);
  RunResult in_audit = lab().Probe({"tcp", kPublicB4, "80"}, *audit_cg, /*hostile=*/true);
  EXPECT_TRUE(Ok(Only(in_audit))) << in_audit.Describe();
  RunResult in_enforced = lab().Probe({"tcp", kPublicB4, "80"}, *enforced_cg, /*hostile=*/true);
  EXPECT_EQ(Errno(Only(in_enforced)), "EPERM") << in_enforced.Describe();
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kPublicB4, 80) == accepts + 1; }));
  EXPECT_EQ(Shared().Ctl({"sandbox", "remove", "--cgroup", *audit_cg}).exit_code, 0);
  EXPECT_EQ(Shared().Ctl({"sandbox", "remove", "--cgroup", *enforced_cg}).exit_code, 0);
}

// Strict: once the ring is full (no reader) and a sandbox's connect can be
// neither recorded nor folded, a strict sandbox's connect and send are
// refused; a non-strict one beside it still connects.  Draining the ring
// gives the strict sandbox its connections back.
TEST_F(AuditModes, StrictRefusesWhatCannotBeRecordedOthersCarryOn) {
  // Whatever earlier tests left on the ring is read first, so the fill
  // below starts from an empty ring.
  RunResult drain = Shared().Ctl({"audit"});
  ASSERT_EQ(drain.exit_code, 0) << drain.Describe();
  // Fill it: each filler is a sandbox of its own, with a budget of its own,
  // making denied connects; they go on the ring until it is full, then are
  // lost (counted).  Until event_lost moves, the ring still had room.
  const long long lost_before = Counters()["event_lost"];
  bool full = false;
  for (int i = 0; i < 12 && !full; ++i) {
    RunResult fill = Run({"--egress", kPublicA4}, {"tcp-burst", kPublicB4, "80", "20000"});
    ASSERT_EQ(fill.exit_code, 0) << last_;
    full = Counters()["event_lost"] > lost_before;
  }
  ASSERT_TRUE(full) << "the ring never filled";

  auto before = Counters();
  const uint64_t accepts = lab().TcpAccepts(kPublicA4, 80);
  RunResult strict = Run({"--strict-audit", "--egress", kPublicA4},
                         {"tcp", kPublicA4, "80", "--then", "udp-sendto", kPublicA4, "7000"});
  ASSERT_EQ(strict.exit_code, 0) << last_;
  auto lines = Lines(strict);
  ASSERT_EQ(lines.size(), 2u) << last_;
  EXPECT_EQ(Errno(lines[0]), "EPERM") << "strict connect with a full ring: " << last_;
  EXPECT_EQ(Errno(lines[1]), "EPERM") << "strict send with a full ring: " << last_;
  auto after = Counters();
  EXPECT_EQ(after["strict_deny"] - before["strict_deny"], 2);
  EXPECT_GE(after["event_lost"] - before["event_lost"], 2);

  RunResult relaxed = Run({"--egress", kPublicA4}, {"tcp", kPublicA4, "80"});
  ASSERT_EQ(relaxed.exit_code, 0) << last_;
  EXPECT_TRUE(Ok(Only(relaxed))) << "a non-strict sandbox beside it: " << last_;
  EXPECT_TRUE(Lab::WaitFor([&] { return lab().TcpAccepts(kPublicA4, 80) == accepts + 1; }))
      << "only the non-strict connect arrived";
  EXPECT_EQ(Counters()["strict_deny"], after["strict_deny"]);

  // Read the ring: the loss records count what was refused, and a strict
  // sandbox records, and so connects, again.
  drain = Shared().Ctl({"audit"});
  ASSERT_EQ(drain.exit_code, 0) << drain.Describe();
  std::istringstream in(drain.out);
  long long lost = 0;
  for (const auto& j : ParseLines(in)) {
    if (j.value("type", "") == "loss") lost += j["lost"].get<long long>();
  }
  EXPECT_GE(lost, 2) << "the refused occurrences are in the loss records";
  const std::string f = File("strict.jsonl");
  strict = Run({"--audit", f, "--strict-audit", "--egress", kPublicA4}, {"tcp", kPublicA4, "80"});
  ASSERT_EQ(strict.exit_code, 0) << last_;
  EXPECT_TRUE(Ok(Only(strict))) << last_;
  auto connects = OfType(ReadLines(f), "connect");
  ASSERT_EQ(connects.size(), 1u);
  EXPECT_EQ(connects[0]["verdict"], "allow");
}

}  // namespace
}  // namespace egressd::test
