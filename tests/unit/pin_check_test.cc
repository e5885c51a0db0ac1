// The pinned-state checks' pure parts (loader/pin_check.h) and the migration
// table (loader/migration.h) against the built object's own map
// declarations: no root, no BPF syscalls (the object is opened, never
// loaded).
#include <bpf/libbpf.h>
#include <linux/bpf.h>

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "loader/migration.h"
#include "loader/pin_check.h"
#include "maps/egressd_abi.h"

namespace egressd {
namespace {

const MapShape kResolved{EGR_MAP_RESOLVED, BPF_MAP_TYPE_HASH, sizeof(egr_resolved_key), sizeof(egr_resolved_val),
                         EGR_MAX_RESOLVED, BPF_F_NO_PREALLOC};

TEST(CompareShape, SameShapeIsAccepted) { EXPECT_TRUE(CompareShape(kResolved, kResolved, "/p").ok()); }

TEST(CompareShape, EachFieldIsNamedWithExpectedAndFound) {
  struct Case {
    const char* field;
    MapShape found;
    const char* says;
  };
  MapShape type = kResolved, key = kResolved, value = kResolved, max = kResolved, flags = kResolved;
  type.type = BPF_MAP_TYPE_LRU_HASH;
  key.key_size = 20;
  value.value_size = 24;
  max.max_entries = 1024;
  flags.flags = 0;
  for (const Case& c : {Case{"type", type, "type expected hash (1), found lru_hash (9)"},
                        Case{"key", key, "key_size expected 24, found 20"},
                        Case{"value", value, "value_size expected 32, found 24"},
                        Case{"max", max, "max_entries expected 1048576, found 1024"},
                        Case{"flags", flags, "map_flags expected 1, found 0"}}) {
    absl::Status s = CompareShape(kResolved, c.found, "/sys/fs/bpf/x/egr_resolved_v2");
    ASSERT_FALSE(s.ok()) << c.field;
    EXPECT_TRUE(IsPinnedStateError(s)) << c.field;
    EXPECT_NE(s.message().find(c.says), absl::string_view::npos) << s.message();
    EXPECT_NE(s.message().find("egr_resolved_v2 (/sys/fs/bpf/x/egr_resolved_v2)"), absl::string_view::npos);
    // One field differs: only it is named.
    EXPECT_EQ(s.message().find("expected"), s.message().rfind("expected")) << s.message();
  }
}

TEST(PinnedStateError, IsItsOwnKind) {
  EXPECT_FALSE(IsPinnedStateError(absl::FailedPreconditionError("containment missing")));
  EXPECT_FALSE(IsPinnedStateError(absl::InvalidArgumentError("x")));
  EXPECT_TRUE(IsPinnedStateError(PinnedStateError("x")));
}

TEST(SplitVersion, NamesAndVersions) {
  auto a = SplitVersion("egr_stats_v3"), b = SplitVersion("egr_resolved_v12");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->first, "egr_stats");
  EXPECT_EQ(a->second, 3);
  EXPECT_EQ(b->first, "egr_resolved");
  EXPECT_EQ(b->second, 12);
  EXPECT_FALSE(SplitVersion("egr_stats"));
  EXPECT_FALSE(SplitVersion("egr_stats_v"));
  EXPECT_FALSE(SplitVersion("egr_stats_v0"));
  EXPECT_FALSE(SplitVersion("egr_stats_v03"));
  EXPECT_FALSE(SplitVersion("egr_stats_v3x"));
}

TEST(CheckNotNewer, OlderAndEqualPass) {
  EXPECT_TRUE(CheckNotNewer({"egr_resolved_v1", "egr_resolved_v2", "egr_stats_v1"}, {kResolved}, 0, "/p").ok());
  EXPECT_TRUE(CheckNotNewer({}, {kResolved}, kPinSchema, "/p").ok());
  EXPECT_TRUE(CheckNotNewer({}, {kResolved}, std::nullopt, "/p").ok());
}

TEST(CheckNotNewer, NewerNameIsRefusedNamingBoth) {
  absl::Status s = CheckNotNewer({"egr_resolved_v3"}, {kResolved}, std::nullopt, "/p");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(IsPinnedStateError(s));
  EXPECT_NE(s.message().find("/p/egr_resolved_v3 is pinned, this egressd's layout is egr_resolved_v2"),
            absl::string_view::npos)
      << s.message();
}

TEST(CheckNotNewer, NewerSchemaIsRefusedNamingBoth) {
  absl::Status s = CheckNotNewer({}, {kResolved}, kPinSchema + 1, "/p");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(IsPinnedStateError(s));
  EXPECT_NE(s.message().find(absl::StrCat("the pinned schema is ", kPinSchema + 1)), absl::string_view::npos);
  EXPECT_NE(s.message().find(absl::StrCat("this egressd knows schema ", kPinSchema)), absl::string_view::npos);
}

struct ObjDeleter {
  void operator()(bpf_object* o) const { bpf_object__close(o); }
};

std::vector<MapShape> Declared() {
  DECLARE_LIBBPF_OPTS(bpf_object_open_opts, opts, .pin_root_path = "/nonexistent-pin-root");
  std::unique_ptr<bpf_object, ObjDeleter> obj(bpf_object__open_file(EGR_BPF_OBJECT, &opts));
  if (!obj) return {};
  return DeclaredPinnedShapes(obj.get());
}

// The expectations come from the object, not a copy: the ABI's structs are
// what its pinned maps declare.
TEST(DeclaredPinnedShapes, AreTheObjectsPinnedMaps) {
  std::vector<MapShape> d = Declared();
  ASSERT_FALSE(d.empty()) << EGR_BPF_OBJECT;
  std::set<std::string> names;
  for (const auto& m : d) names.insert(m.name);
  for (const char* n : {EGR_MAP_CGROUPS, EGR_MAP_POLICY, EGR_MAP_RESOLVED, EGR_MAP_RESUSE, EGR_MAP_SOCK,
                        EGR_MAP_CONFIG, EGR_MAP_STATS, EGR_MAP_DNS, EGR_MAP_EVENTS}) {
    EXPECT_TRUE(names.count(n)) << n;
  }
  for (const auto& m : d) {
    EXPECT_EQ(m.name.rfind("egr_", 0), 0u) << m.name << ": only egressd's maps are pinned";
    if (m.name == EGR_MAP_RESOLVED) {
      EXPECT_TRUE(CompareShape(kResolved, m, "-").ok());
    }
    if (m.name == EGR_MAP_STATS) {
      EXPECT_EQ(m.max_entries, EGR_STAT_MAX);
    }
  }
}

// Each migration goes from an older _vN of a map to the one this build
// declares, and its frozen layout differs from the new one (else it would
// not have needed a new name).
TEST(Migrations, GoFromAnOlderVersionToADeclaredMap) {
  std::vector<MapShape> d = Declared();
  ASSERT_FALSE(d.empty());
  for (const Migration* m : Migrations()) {
    auto from = SplitVersion(m->from), to = SplitVersion(m->to);
    ASSERT_TRUE(from && to) << m->from << " -> " << m->to;
    EXPECT_EQ(from->first, to->first);
    EXPECT_LT(from->second, to->second) << m->from;
    EXPECT_EQ(m->from_shape.name, m->from);
    const MapShape* target = nullptr;
    for (const auto& s : d) {
      if (s.name == m->to) target = &s;
    }
    ASSERT_NE(target, nullptr) << m->to << " is not declared by the object";
    MapShape old = m->from_shape;
    old.name = target->name;
    EXPECT_FALSE(CompareShape(*target, old, "-").ok()) << m->from << " has the new layout";
    EXPECT_EQ(m->from_shape.type, target->type) << m->from;
  }
}

}  // namespace
}  // namespace egressd
