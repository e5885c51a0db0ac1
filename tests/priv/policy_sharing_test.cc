// Issue 7: policies are shared only on equal contents, never on the 64-bit
// FNV hash alone (a task author controls its input), and releasing a policy
// deletes its own keys rather than walking every trie.
#include <bpf/bpf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "egressd_env.h"
#include "maps/pinned_maps.h"
#include "maps/policy_store.h"
#include "maps/sandbox_table.h"
#include "userspace/common/node.h"
#include "userspace/control/registry.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;

Paths SharedPaths() {
  Paths paths;
  paths.pin_root = Shared().pin_root();
  paths.runtime_dir = Shared().runtime_dir();
  return paths;
}

policy::CompiledPolicy Allowing(const char* addr, const std::string& source = "test") {
  policy::CompiledPolicy p;
  p.default_verdict = policy::Verdict::kDeny;
  p.allowed.push_back({*net::Cidr::Parse(std::string(addr) + "/32"), {}, source});
  return p;
}

bool Reaches(const std::string& cg, const char* host) {
  RunResult r = Shared().lab().Probe({"tcp", host, "80"}, cg, /*hostile=*/true);
  auto lines = Lines(r);
  return lines.size() == 1 && Ok(lines[0]);
}

struct Sandbox {
  std::string path;
  uint64_t id = 0;
};

Sandbox MakeSandbox(const std::string& name) {
  auto cg = Shared().lab().MakeCgroup(name);
  EXPECT_TRUE(cg.ok()) << cg.status();
  auto id = CgroupIdOf(*cg);
  EXPECT_TRUE(id.ok()) << id.status();
  return {*cg, *id};
}

maps::PolicyId PolicyOf(const maps::PinnedMaps& m, uint64_t cgroup_id) {
  auto e = maps::SandboxTable(m).Get(cgroup_id);
  EXPECT_TRUE(e.ok() && e->has_value());
  return e.ok() && e->has_value() ? (*e)->policy_id : 0;
}

TEST(PolicySharing, ACollidingHashIsNotSharedAndEachSandboxIsJudgedByItsOwnEntries) {
  EGR_REQUIRE_PRIVILEGES();
  const Paths paths = SharedPaths();
  auto m = maps::PinnedMaps::Open(paths.pin_root);
  ASSERT_TRUE(m.ok()) << m.status();
  control::Registry registry(paths);
  Sandbox a = MakeSandbox("collide-a"), b = MakeSandbox("collide-b"), c = MakeSandbox("collide-c");
  const policy::CompiledPolicy p1 = Allowing(kPublicA4), p2 = Allowing(kPublicB4);

  ASSERT_TRUE(registry.Register({.cgroup_id = a.id, .cgroup_path = a.path}, p1).ok());
  // Positive control: equal contents (another source string) are shared.
  ASSERT_TRUE(registry.Register({.cgroup_id = c.id, .cgroup_path = c.path}, Allowing(kPublicA4, "other")).ok());
  const maps::PolicyId shared = PolicyOf(*m, a.id);
  ASSERT_NE(shared, 0u);
  EXPECT_EQ(PolicyOf(*m, c.id), shared) << "equal policies share one id";

  // The attack: a header whose hash is p2's while its entries are p1's (a
  // task author who found an FNV collision gets exactly this).
  egr_policy_val header{};
  ASSERT_EQ(bpf_map_lookup_elem(m->policy(), &shared, &header), 0);
  header.content_hash = p2.ContentHash();
  ASSERT_EQ(bpf_map_update_elem(m->policy(), &shared, &header, BPF_EXIST), 0);

  ASSERT_TRUE(registry.Register({.cgroup_id = b.id, .cgroup_path = b.path}, p2).ok());
  const maps::PolicyId mine = PolicyOf(*m, b.id);
  EXPECT_NE(mine, shared) << "a hash collision made b share a's policy";
  EXPECT_TRUE(Reaches(b.path, kPublicB4)) << "b is judged by its own policy";
  EXPECT_FALSE(Reaches(b.path, kPublicA4)) << "b got a's policy";
  EXPECT_TRUE(Reaches(a.path, kPublicA4));
  EXPECT_FALSE(Reaches(a.path, kPublicB4)) << "a got b's policy";
  Lab::Settle();
  EXPECT_EQ(Shared().lab().TcpAccepts(kPublicA4, 80), 1u) << Shared().lab().CountersSummary();
  EXPECT_EQ(Shared().lab().TcpAccepts(kPublicB4, 80), 1u) << Shared().lab().CountersSummary();

  for (const Sandbox* s : {&a, &b, &c}) {
    EXPECT_TRUE(registry.Unregister(s->id).ok());
    rmdir(s->path.c_str());
  }
}

// FindEqualPolicy decides on the first sharer's record that knows the
// policy's contents (an add parses one record, not all of them): a sharer
// whose record was lost is no evidence either way and does not make every
// later sandbox install its own copy of an equal policy.
TEST(PolicySharing, ASharerWithoutARecordDoesNotStopSharing) {
  EGR_REQUIRE_PRIVILEGES();
  const Paths paths = SharedPaths();
  auto m = maps::PinnedMaps::Open(paths.pin_root);
  ASSERT_TRUE(m.ok()) << m.status();
  control::Registry registry(paths);
  Sandbox a = MakeSandbox("lost-a"), b = MakeSandbox("lost-b"), c = MakeSandbox("lost-c");
  const policy::CompiledPolicy p = Allowing(kPublicA4, "lost-record");
  ASSERT_TRUE(registry.Register({.cgroup_id = a.id, .cgroup_path = a.path}, p).ok());
  ASSERT_TRUE(registry.Register({.cgroup_id = b.id, .cgroup_path = b.path}, p).ok());
  const maps::PolicyId shared = PolicyOf(*m, a.id);
  ASSERT_NE(shared, 0u);
  ASSERT_EQ(PolicyOf(*m, b.id), shared);

  // Whichever of a and b the search meets first, one of them has no record.
  const std::string lost = control::SandboxRecords(paths).PathOf(a.id);
  ASSERT_EQ(unlink(lost.c_str()), 0) << lost;
  const uint64_t a_before = Shared().lab().TcpAccepts(kPublicA4, 80);
  const uint64_t b_before = Shared().lab().TcpAccepts(kPublicB4, 80);
  ASSERT_TRUE(registry.Register({.cgroup_id = c.id, .cgroup_path = c.path}, p).ok());
  EXPECT_EQ(PolicyOf(*m, c.id), shared) << "b's record proves the contents equal";
  EXPECT_TRUE(Reaches(c.path, kPublicA4));
  EXPECT_FALSE(Reaches(c.path, kPublicB4));
  Lab::Settle();
  EXPECT_EQ(Shared().lab().TcpAccepts(kPublicA4, 80) - a_before, 1u) << Shared().lab().CountersSummary();
  EXPECT_EQ(Shared().lab().TcpAccepts(kPublicB4, 80) - b_before, 0u) << Shared().lab().CountersSummary();

  for (const Sandbox* s : {&a, &b, &c}) {
    EXPECT_TRUE(registry.Unregister(s->id).ok());
    rmdir(s->path.c_str());
  }
}

double Ms(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

TEST(PolicyRelease, DeletesOnlyItsOwnKeysWithoutWalkingTheTries) {
  EGR_REQUIRE_PRIVILEGES();
  const Paths paths = SharedPaths();
  auto m = maps::PinnedMaps::Open(paths.pin_root);
  ASSERT_TRUE(m.ok()) << m.status();
  maps::PolicyStore store(*m);
  // 100,000 other entries in the tries (another policy's).
  policy::CompiledPolicy big;
  big.default_verdict = policy::Verdict::kDeny;
  for (uint32_t i = 0; i < 100000; ++i) {
    uint32_t a = 0x0A000000u + i * 7;
    auto cidr = net::Cidr::Parse(std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 255) + "." +
                                 std::to_string((a >> 8) & 255) + "." + std::to_string(a & 255) + "/32");
    ASSERT_TRUE(cidr.ok());
    big.allowed.push_back({*cidr, {}, "bulk"});
  }
  auto big_id = store.FreshId();
  ASSERT_TRUE(big_id.ok());
  ASSERT_TRUE(store.Install(*big_id, big, big.ContentHash()).ok());

  policy::CompiledPolicy small = Allowing(kPublicA4);
  small.allowed.push_back({*net::Cidr::Parse("2001:db8::/64"), {{443, 443}}, "test"});
  small.protected_cidrs.push_back({*net::Cidr::Parse("169.254.169.254/32"), "floor"});
  small.protected_cidrs.push_back({*net::Cidr::Parse("fd00:ec2::254/128"), "floor"});

  auto timed = [&](bool own) {
    auto id = store.FreshId();
    EXPECT_TRUE(id.ok());
    EXPECT_TRUE(store.Install(*id, small, small.ContentHash()).ok());
    EXPECT_EQ(store.CountKeys()[*id].total(), 4u);
    auto t0 = std::chrono::steady_clock::now();
    absl::Status s = own ? store.Release(*id, small) : store.Release(*id);
    double ms = Ms(std::chrono::steady_clock::now() - t0);
    EXPECT_TRUE(s.ok()) << s;
    auto counts = store.CountKeys();
    EXPECT_FALSE(counts.contains(*id)) << "keys of the released policy are left";
    EXPECT_EQ(counts[*big_id].allow4, 100000u) << "the other policy's keys were touched";
    return ms;
  };
  double walk_ms = timed(false), own_ms = timed(true);
  std::printf("[ figure ] release of a 4-key policy with 100000 other entries in the tries: "
              "walking every trie %.2f ms, its own keys %.3f ms\n",
              walk_ms, own_ms);
  EXPECT_LT(own_ms * 10, walk_ms) << "releasing its own keys should not depend on the other entries";
  ASSERT_TRUE(store.Release(*big_id, big).ok());
  EXPECT_FALSE(store.CountKeys().contains(*big_id));
}

}  // namespace
}  // namespace egressd::test
