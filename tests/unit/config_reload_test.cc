// Config reload's pure parts (userspace/daemon/config_reload.h): a policy
// narrowed to a new floor is never more open than it or the floor; the dns
// keys that need a restart; the declarations and contained roots kept on
// disk; containedRoots in the deployment config.
#include "userspace/daemon/config_reload.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "userspace/policy/deployment_config.h"

namespace egressd::daemon {
namespace {

net::Cidr C(const char* s) { return *net::Cidr::Parse(s); }

policy::CompiledPolicy Declared() {
  policy::CompiledPolicy p;
  p.default_verdict = policy::Verdict::kDeny;
  p.protected_cidrs = {{C("169.254.169.254/32"), "floor connected"}};
  p.allowed = {{C("198.51.100.0/24"), {}, "task"}, {C("203.0.113.7/32"), {{443, 443}}, "run --egress"},
               {C("192.0.2.0/24"), {}, "task"}};
  p.names = {{"api.example.com", "task"}};
  return p;
}

TEST(RestrictToFloor, ANewProtectedRangeDeniesWhatItSpansAndKeepsTheRest) {
  auto floor = policy::ParseDeploymentConfig("protected: [203.0.113.0/24, 192.0.2.128/25]", "egressd.yaml", nullptr);
  ASSERT_TRUE(floor.ok()) << floor.status();
  Restricted r = RestrictToFloor(Declared(), *floor);
  // 203.0.113.7 lies inside: gone; 192.0.2.0/24 overlaps: kept, the kernel
  // denies its protected half (protected ranges are judged first).
  ASSERT_EQ(r.policy.allowed.size(), 2u);
  EXPECT_EQ(r.policy.allowed[0].cidr, C("198.51.100.0/24"));
  EXPECT_EQ(r.policy.allowed[1].cidr, C("192.0.2.0/24"));
  bool has203 = false, has192 = false, kept_old = false;
  for (const auto& p : r.policy.protected_cidrs) {
    has203 |= p.cidr == C("203.0.113.0/24");
    has192 |= p.cidr == C("192.0.2.128/25");
    kept_old |= p.cidr == C("169.254.169.254/32");
  }
  EXPECT_TRUE(has203 && has192 && kept_old);
  ASSERT_EQ(r.conflicts.size(), 2u);
  EXPECT_TRUE(absl::StrContains(r.conflicts[0], "203.0.113.7/32")) << r.conflicts[0];
  EXPECT_TRUE(absl::StrContains(r.conflicts[0], "lies inside")) << r.conflicts[0];
  EXPECT_TRUE(absl::StrContains(r.conflicts[1], "overlaps")) << r.conflicts[1];
  EXPECT_EQ(r.policy.names, Declared().names) << "names stay: their addresses meet the protected ranges in the kernel";
  EXPECT_EQ(r.policy.default_verdict, policy::Verdict::kDeny);
}

TEST(RestrictToFloor, AirgappedDeniesTheDefaultAndAuditOnlyGoesWhenNoLongerAllowed) {
  policy::CompiledPolicy open;
  open.default_verdict = policy::Verdict::kAllow;
  open.audit.audit_only = true;
  auto floor = policy::ParseDeploymentConfig("airgapped: true", "egressd.yaml", nullptr);
  ASSERT_TRUE(floor.ok()) << floor.status();
  Restricted r = RestrictToFloor(open, *floor);
  EXPECT_EQ(r.policy.default_verdict, policy::Verdict::kDeny);
  EXPECT_FALSE(r.policy.audit.audit_only);
  EXPECT_EQ(r.conflicts.size(), 2u);
  // The same policy under a floor it fits: nothing taken away, and never
  // widened (a removed protected range stays).
  policy::CompiledPolicy p = Declared();
  Restricted same = RestrictToFloor(p, policy::DefaultDeployment());
  EXPECT_TRUE(same.conflicts.empty());
  EXPECT_EQ(same.policy.allowed, p.allowed);
  EXPECT_GE(same.policy.protected_cidrs.size(), p.protected_cidrs.size());
}

TEST(RestrictToFloor, AnUnknownPolicyIsDeniedEverything) {
  Restricted r = RestrictToFloor(std::nullopt, policy::DefaultDeployment());
  EXPECT_EQ(r.policy.default_verdict, policy::Verdict::kDeny);
  EXPECT_TRUE(r.policy.allowed.empty());
  EXPECT_FALSE(r.policy.protected_cidrs.empty());
  EXPECT_EQ(r.conflicts.size(), 1u);
}

TEST(KeepRunningDns, NamesTheKeysThatNeedARestartAndKeepsTheRunningValues) {
  auto a = policy::ParseDeploymentConfig("dns: {upstreams: [192.0.2.53], endpoint4: 10.244.0.1}", "a", nullptr);
  auto b = policy::ParseDeploymentConfig(
      "dns: {upstreams: [192.0.2.54], endpoint4: 10.244.0.2, graceSeconds: 5, maxAddressesPerName: 10}", "b", nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  policy::DnsSettings next = b->dns;
  auto keys = KeepRunningDns(a->dns, next);
  EXPECT_EQ(keys, (std::vector<std::string>{"dns.upstreams", "dns.graceSeconds", "dns.maxAddressesPerName"}));
  EXPECT_EQ(next.upstreams, a->dns.upstreams);
  EXPECT_EQ(next.grace_s, a->dns.grace_s);
  EXPECT_EQ(next.endpoint4, b->dns.endpoint4) << "endpoints are the next registrations' defaults";
  policy::DnsSettings same = a->dns;
  EXPECT_TRUE(KeepRunningDns(a->dns, same).empty());
}

TEST(Declaration, RoundTripsWithoutItsCgroupAndKeepsThePodUid) {
  auto req = ParseSandboxRequest(R"({"cgroup": "/sys/fs/cgroup/x", "egress": ["192.0.2.1"], "labels": {"pod": "p"},
                                     "task": "egress:\n  allow: [api.example.com]\n", "strict_audit": true})");
  ASSERT_TRUE(req.ok()) << req.status();
  req->pod_uid = "5b0c6f7e-1d2a-4b3c-9d8e-7f6a5b4c3d2e";
  const std::string text = DeclarationText(Declaration{"pod-a", *req});
  EXPECT_EQ(text.find("/sys/fs/cgroup/x"), std::string::npos) << "the record holds the cgroup: " << text;
  auto back = ParseDeclaration(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->id, "pod-a");
  EXPECT_TRUE(back->request.cgroup.empty());
  EXPECT_EQ(back->request.pod_uid, req->pod_uid);
  EXPECT_EQ(back->request.egress, req->egress);
  EXPECT_EQ(back->request.task, req->task);
  EXPECT_TRUE(back->request.strict_audit);
  EXPECT_FALSE(ParseDeclaration("{\"id\": 3}").ok());
  EXPECT_FALSE(ParseDeclaration("not json").ok());
}

TEST(ConfigRoots, RoundTripAndAncestry) {
  std::vector<ConfigRoot> roots = {{"/sys/fs/cgroup/kubepods.slice", 42}, {"/sys/fs/cgroup/b", 7}};
  auto back = ParseConfigRoots(ConfigRootsText(roots));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, roots);
  EXPECT_FALSE(ParseConfigRoots("{\"roots\": [{\"path\": 1}]}").ok());
  EXPECT_TRUE(ContainsCgroup("/sys/fs/cgroup/a", "/sys/fs/cgroup/a"));
  EXPECT_TRUE(ContainsCgroup("/sys/fs/cgroup/a", "/sys/fs/cgroup/a/b"));
  EXPECT_FALSE(ContainsCgroup("/sys/fs/cgroup/a", "/sys/fs/cgroup/ab"));
}

TEST(ContainedRootsSetting, AbsolutePlainPathsEachOnceElseEveryProblemNamed) {
  auto ok = policy::ParseDeploymentConfig("containedRoots: [/sys/fs/cgroup/kubepods.slice, /sys/fs/cgroup/x/y]",
                                          "egressd.yaml", nullptr);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->contained_roots, (std::vector<std::string>{"/sys/fs/cgroup/kubepods.slice", "/sys/fs/cgroup/x/y"}));
  EXPECT_TRUE(policy::DefaultDeployment().contained_roots.empty());
  auto bad = policy::ParseDeploymentConfig(
      "containedRoots: [relative/dir, /sys/fs/cgroup/../etc, /sys/fs/cgroup/a/, /sys/fs/cgroup/a, /sys/fs/cgroup/a]",
      "egressd.yaml", nullptr);
  ASSERT_FALSE(bad.ok());
  const std::string m(bad.status().message());
  EXPECT_TRUE(absl::StrContains(m, "\"relative/dir\"")) << m;
  EXPECT_TRUE(absl::StrContains(m, "\"/sys/fs/cgroup/../etc\"")) << m;
  EXPECT_TRUE(absl::StrContains(m, "\"/sys/fs/cgroup/a/\"")) << m;
  EXPECT_TRUE(absl::StrContains(m, "named twice")) << m;
  EXPECT_TRUE(absl::StrContains(m, "containedRoots")) << m;
}

}  // namespace
}  // namespace egressd::daemon
