// The sandbox record: labels validated, the whole compiled policy (names,
// wildcards, ports, v6) round-trips, contents compared without sources or
// order, files written atomically with mode 0600.  No root needed.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "userspace/control/sandbox_record.h"

namespace egressd::control {
namespace {

policy::CompiledPolicy Sample() {
  policy::CompiledPolicy p;
  p.default_verdict = policy::Verdict::kDeny;
  p.deny_action = policy::DenyAction::kDrop;
  p.protected_cidrs.push_back({*net::Cidr::Parse("169.254.169.254/32"), "floor connected"});
  p.protected_cidrs.push_back({*net::Cidr::Parse("fd00:ec2::254/128"), "floor connected"});
  p.allowed.push_back({*net::Cidr::Parse("192.0.2.0/24"), {{443, 443}, {8000, 8100}}, "task"});
  p.allowed.push_back({*net::Cidr::Parse("2001:db8::/32"), {}, "run --egress"});
  p.names = {{"api.example.com", "task"}, {"pypi.org", "deployment"}};
  p.wildcard_suffixes = {{"example.net", "task"}};
  return p;
}

TEST(Labels, AcceptsKeyValuePairs) {
  Labels l;
  ASSERT_TRUE(ParseLabel("pod=web-1", l).ok());
  ASSERT_TRUE(ParseLabel("namespace=ci", l).ok());
  ASSERT_TRUE(ParseLabel("task=", l).ok());
  ASSERT_TRUE(ParseLabel("run=2026-12-01T08:00:00Z/a+b@c", l).ok());
  EXPECT_EQ(l.size(), 4u);
  EXPECT_EQ(l["pod"], "web-1");
  EXPECT_EQ(l["task"], "");
}

TEST(Labels, RejectsBadInputNamingIt) {
  for (const char* bad : {"pod", "=x", "Pod=x", "1pod=x", "pod=a b", "pod=x\n", "pod=\"x\"", "pöd=x"}) {
    Labels l;
    absl::Status s = ParseLabel(bad, l);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(s.message(), bad)) << s.message();
    EXPECT_TRUE(l.empty());
  }
  Labels l;
  ASSERT_TRUE(ParseLabel("pod=a", l).ok());
  absl::Status twice = ParseLabel("pod=b", l);
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(twice.message(), "given twice")) << twice.message();
  EXPECT_EQ(l["pod"], "a");
  EXPECT_EQ(ParseLabel("pod=" + std::string(254, 'a'), l).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Record, PolicyRoundTripsWithNamesAndWildcards) {
  const policy::CompiledPolicy p = Sample();
  auto back = PolicyFromJson(policy::ToJson(p));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, p);
  EXPECT_EQ(back->ContentHash(), p.ContentHash());
}

TEST(Record, RecordRoundTrips) {
  SandboxRecord r{.cgroup_id = 4242,
                  .cgroup_path = "/sys/fs/cgroup/egressd/x",
                  .labels = {{"pod", "web-1"}, {"namespace", "ci"}},
                  .netns_cookie = 7,
                  .netns_inode = 4026531840,
                  .current = {0xdeadbeef, Sample()}};
  r.previous = PolicyRef{17, std::nullopt};
  r.previous_labels = {{"pod", "web-0"}};
  auto back = SandboxRecordFromJson(nlohmann::json::parse(ToJson(r).dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->cgroup_id, r.cgroup_id);
  EXPECT_EQ(back->cgroup_path, r.cgroup_path);
  EXPECT_EQ(back->labels, r.labels);
  EXPECT_EQ(back->netns_cookie, 7u);
  EXPECT_EQ(back->netns_inode, 4026531840u);
  EXPECT_EQ(back->current.policy_id, 0xdeadbeefu);
  ASSERT_TRUE(back->current.policy.has_value());
  EXPECT_EQ(*back->current.policy, Sample());
  ASSERT_TRUE(back->previous.has_value());
  EXPECT_EQ(back->previous->policy_id, 17u);
  EXPECT_FALSE(back->previous->policy.has_value());
  EXPECT_EQ(back->previous_labels, r.previous_labels);
}

// issue 17: the interface a sandbox is judged at, through both writers and
// both readers (the DOM one and the SAX one the daemon uses).
TEST(Record, TheInterfaceRoundTripsThroughBothReaders) {
  SandboxRecord r{.cgroup_id = 9, .current = {3, Sample()}, .interface = "egl-x-p0", .ifindex = 77};
  auto dom = SandboxRecordFromJson(nlohmann::json::parse(ToJson(r).dump()));
  ASSERT_TRUE(dom.ok()) << dom.status();
  EXPECT_EQ(dom->interface, "egl-x-p0");
  EXPECT_EQ(dom->ifindex, 77u);
  auto sax = ParseRecordText(ToJsonText(r));
  ASSERT_TRUE(sax.ok()) << sax.status();
  EXPECT_EQ(sax->interface, "egl-x-p0");
  EXPECT_EQ(sax->ifindex, 77u);
  r.ifindex = 0;  // none: no key written
  EXPECT_FALSE(ToJson(r).contains("ifindex"));
  EXPECT_EQ(ToJsonText(r).find("ifindex"), std::string::npos);
}

// The DNS endpoint in the shape the proxy reads: "dns": {"addr4", "addr6",
// "port"}, an absent family left out; both readers agree, and a broken one
// is refused.
TEST(Record, TheDnsEndpointRoundTripsInTheShapeTheProxyReads) {
  SandboxRecord r{.cgroup_id = 9, .current = {1, Sample()}};
  r.dns = maps::DnsEndpoint{.addr4 = *net::IpAddr::Parse("10.244.0.1"),
                            .addr6 = *net::IpAddr::Parse("fd00:244::1"),
                            .port = 20001};
  const nlohmann::json j = nlohmann::json::parse(ToJsonText(r));
  EXPECT_EQ(j["dns"], nlohmann::json::parse(R"({"addr4":"10.244.0.1","addr6":"fd00:244::1","port":20001})"));
  EXPECT_EQ(j, ToJson(r));
  auto text = ParseRecordText(ToJsonText(r));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->dns, r.dns);
  auto dom = SandboxRecordFromJson(j);
  ASSERT_TRUE(dom.ok()) << dom.status();
  EXPECT_EQ(dom->dns, r.dns);

  r.dns->addr6.reset();
  EXPECT_FALSE(nlohmann::json::parse(ToJsonText(r))["dns"].contains("addr6"));
  EXPECT_EQ(ParseRecordText(ToJsonText(r))->dns, r.dns);
  r.dns.reset();
  EXPECT_FALSE(nlohmann::json::parse(ToJsonText(r)).contains("dns"));
  EXPECT_FALSE(ParseRecordText(ToJsonText(r))->dns.has_value());

  for (const char* bad : {R"({"addr4":"10.244.0.1","port":53})", R"({"addr4":"10.244.0.1","port":0})",
                          R"({"addr4":"fd00::1","port":20000})", R"({"addr6":"10.0.0.1","port":20000})",
                          R"({"port":20000})", R"({"addr4":"10.244.0.300","port":20000})"}) {
    nlohmann::json broken = j;
    broken["dns"] = nlohmann::json::parse(bad);
    EXPECT_FALSE(ParseRecordText(broken.dump()).ok()) << bad;
    EXPECT_FALSE(SandboxRecordFromJson(broken).ok()) << bad;
  }
}

TEST(Record, TheFileTextIsTheJsonOfTheRecord) {
  SandboxRecord r{.cgroup_id = 1, .cgroup_path = "/a \"b\"\\c\n", .labels = {{"pod", "p"}}, .current = {3, Sample()}};
  r.current.policy->allowed[0].source = "t\u00e4sk \x01";
  r.note = "n";
  EXPECT_EQ(nlohmann::json::parse(ToJsonText(r)), ToJson(r));
  auto back = ParseRecordText(ToJsonText(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ToJson(*back), ToJson(r));
  r.previous = PolicyRef{2, Sample()};
  r.previous_labels = {{"run", "r"}};
  EXPECT_EQ(nlohmann::json::parse(ToJsonText(r)), ToJson(r));
  back = ParseRecordText(ToJsonText(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ToJson(*back), ToJson(r));
  EXPECT_EQ(*back->previous->policy, Sample());
  // The streaming reader agrees with the DOM reader, and reads the DOM's
  // (indented) output too.
  auto dom = SandboxRecordFromJson(ToJson(r));
  ASSERT_TRUE(dom.ok());
  EXPECT_EQ(ToJson(*dom), ToJson(*ParseRecordText(ToJson(r).dump(2))));
  r.current.policy.reset();
  r.previous.reset();
  back = ParseRecordText(ToJsonText(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->current.policy.has_value());
  EXPECT_FALSE(back->previous.has_value());
}

TEST(Record, TheStreamingReaderRejectsBrokenRecords) {
  SandboxRecord r{.cgroup_id = 1, .current = {3, Sample()}};
  std::string text = ToJsonText(r);
  EXPECT_FALSE(ParseRecordText(text.substr(0, text.size() / 2)).ok());
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"version\":1", "\"version\":2"},
           {"192.0.2.0/24", "192.0.2.0/99"},
           {"\"8000-8100\"", "\"8100-8000\""},
           {"\"*.example.net\"", "\"example.net\""},
           {"\"deny\"", "\"maybe\""},
           {"\"cgroup_id\":1,", ""},
           {"\"default\":\"deny\",", ""}}) {
    std::string bad = text;
    size_t at = bad.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    bad.replace(at, from.size(), to);
    EXPECT_FALSE(ParseRecordText(bad).ok()) << to;
  }
}

TEST(Record, MalformedPoliciesAreErrors) {
  nlohmann::json j = policy::ToJson(Sample());
  j["allowed"][0]["ports"][0] = "70000";
  EXPECT_FALSE(PolicyFromJson(j).ok());
  j = policy::ToJson(Sample());
  j["wildcards"][0]["wildcard"] = "example.net";
  EXPECT_FALSE(PolicyFromJson(j).ok());
  j = policy::ToJson(Sample());
  j["default"] = "maybe";
  EXPECT_FALSE(PolicyFromJson(j).ok());
  j = policy::ToJson(Sample());
  j.erase("names");
  EXPECT_FALSE(PolicyFromJson(j).ok());
}

TEST(SameContents, IgnoresSourcesOrderAndDuplicates) {
  policy::CompiledPolicy a = Sample(), b = Sample();
  for (auto& x : b.allowed) x.source = "elsewhere";
  for (auto& n : b.names) n.source = "elsewhere";
  std::reverse(b.allowed.begin(), b.allowed.end());
  std::reverse(b.protected_cidrs.begin(), b.protected_cidrs.end());
  b.names.push_back(b.names[0]);
  EXPECT_TRUE(SameContents(a, b));
}

TEST(SameContents, SeesEveryDifference) {
  const policy::CompiledPolicy a = Sample();
  auto differs = [&](auto change) {
    policy::CompiledPolicy b = a;
    change(b);
    return !SameContents(a, b);
  };
  EXPECT_TRUE(differs([](auto& b) { b.default_verdict = policy::Verdict::kAllow; }));
  EXPECT_TRUE(differs([](auto& b) { b.deny_action = policy::DenyAction::kReject; }));
  EXPECT_TRUE(differs([](auto& b) { b.protected_cidrs.pop_back(); }));
  EXPECT_TRUE(differs([](auto& b) { b.allowed[0].ports[1].last = 8101; }));
  EXPECT_TRUE(differs([](auto& b) { b.allowed[1].cidr = *net::Cidr::Parse("2001:db8::/33"); }));
  EXPECT_TRUE(differs([](auto& b) { b.names.push_back({"evil.example", "task"}); }));
  EXPECT_TRUE(differs([](auto& b) { b.wildcard_suffixes.clear(); }));
}

class Records : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/egr-records-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    paths_.runtime_dir = tmpl;
  }
  void TearDown() override { std::system(("rm -rf -- " + paths_.runtime_dir).c_str()); }
  Paths paths_;
};

TEST_F(Records, WriteLoadListRemove) {
  SandboxRecords records(paths_);
  EXPECT_FALSE(records.Load(1).value().has_value());
  EXPECT_TRUE(records.List().value().empty());
  for (uint64_t id : {30u, 4u}) {
    ASSERT_TRUE(records.Write({.cgroup_id = id, .labels = {{"task", std::to_string(id)}}, .current = {9, Sample()}}).ok());
  }
  struct stat st {};
  ASSERT_EQ(stat(records.PathOf(4).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(records.dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // An interrupted write's temp file is not a record.
  std::ofstream(records.PathOf(5) + ".tmp.123") << "{";
  auto all = records.List();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].cgroup_id, 4u);
  EXPECT_EQ((*all)[1].labels.at("task"), "30");
  auto one = records.Load(30);
  ASSERT_TRUE(one.ok() && one->has_value());
  EXPECT_EQ(*(*one)->current.policy, Sample());
  // Rewriting replaces the whole record.
  ASSERT_TRUE(records.Write({.cgroup_id = 30, .current = {10, std::nullopt}}).ok());
  EXPECT_FALSE(records.Load(30).value()->current.policy.has_value());
  ASSERT_TRUE(records.Remove(30).ok());
  ASSERT_TRUE(records.Remove(30).ok()) << "removing twice is fine";
  EXPECT_EQ(records.List().value().size(), 1u);
}

TEST_F(Records, ACorruptRecordIsAnErrorNamingIt) {
  SandboxRecords records(paths_);
  ASSERT_TRUE(records.Write({.cgroup_id = 8, .current = {1, Sample()}}).ok());
  std::ofstream(records.PathOf(8)) << "{\"version\": 1, \"cgroup_id\": 8";
  auto r = records.Load(8);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), records.PathOf(8))) << r.status();
  // A record that names another cgroup than its file.
  std::ofstream(records.PathOf(9)) << ToJson(SandboxRecord{.cgroup_id = 10, .current = {1, Sample()}}).dump();
  EXPECT_FALSE(records.Load(9).ok());
}

// egressctl rejects a bad --label with exit 2 naming it, before it needs root
// or a loaded instance.
TEST(LabelFlag, BadLabelIsExit2NamingTheValue) {
  for (const char* cmd : {"sandbox add --cgroup /nonexistent", "run"}) {
    std::string line = std::string(EGRESSCTL_PATH) + " --pin-root /nonexistent/egr-unit " + cmd +
                       " --egress 192.0.2.1 --label 'Pod=x y'" + (std::string(cmd) == "run" ? " -- true" : "") +
                       " 2>&1";
    FILE* f = popen(line.c_str(), "r");
    ASSERT_NE(f, nullptr);
    std::string out;
    char buf[512];
    while (size_t n = fread(buf, 1, sizeof(buf), f)) out.append(buf, n);
    int status = pclose(f);
    EXPECT_EQ(WEXITSTATUS(status), 2) << out;
    EXPECT_TRUE(absl::StrContains(out, "Pod=x y")) << out;
  }
}

// The operator's audit mode travels with the policy in the record (both
// writers, both readers) and takes part in the comparison that decides
// sharing: an audit-only sandbox never shares an enforced one's policy.
TEST(Record, TheAuditModeRoundTripsAndIsPartOfTheContents) {
  policy::CompiledPolicy p = Sample();
  p.audit = {.audit_only = true, .strict = true};
  SandboxRecord r{.cgroup_id = 11, .current = {3, p}};
  const nlohmann::json j = nlohmann::json::parse(ToJsonText(r));
  EXPECT_EQ(j["current"]["policy"]["audit_only"], true);
  EXPECT_EQ(j["current"]["policy"]["strict_audit"], true);
  EXPECT_EQ(j, ToJson(r));
  auto text = ParseRecordText(ToJsonText(r));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->current.policy->audit, p.audit);
  auto dom = SandboxRecordFromJson(ToJson(r));
  ASSERT_TRUE(dom.ok()) << dom.status();
  EXPECT_EQ(dom->current.policy->audit, p.audit);
  EXPECT_FALSE(SameContents(p, Sample()));
  policy::CompiledPolicy strict_only = Sample();
  strict_only.audit.strict = true;
  EXPECT_FALSE(SameContents(p, strict_only));
  EXPECT_TRUE(SameContents(p, *text->current.policy));
  // An enforced policy's record says nothing of audit modes (older readers
  // and hashes see what they saw before).
  SandboxRecord plain{.cgroup_id = 12, .current = {4, Sample()}};
  EXPECT_FALSE(nlohmann::json::parse(ToJsonText(plain))["current"]["policy"].contains("audit_only"));
  nlohmann::json bad = ToJson(r);
  bad["current"]["policy"]["audit_only"] = "yes";
  EXPECT_FALSE(SandboxRecordFromJson(bad).ok());
}

}  // namespace
}  // namespace egressd::control
