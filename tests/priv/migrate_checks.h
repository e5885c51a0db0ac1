// What migrate_test (egressctl load) and daemon_migrate_test (egressd
// itself) both check of a migration from egr_resolved_v1: the pinned state
// it leaves, and a live flow that ran across it.
#pragma once

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "egressd_env.h"
#include "maps/egressd_abi.h"
#include "maps/map_iter.h"
#include "old_layouts.h"

namespace egressd::test::migrate {

inline bool Exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}
inline std::chrono::milliseconds Scaled(std::chrono::milliseconds d) {
  return std::chrono::milliseconds(static_cast<long long>(d.count() * TimeScale()));
}
inline long long Num(const lab::ProbeLine& l, const char* key) {
  long long v = -1;
  auto it = l.find(key);
  if (it == l.end() || !absl::SimpleAtoi(it->second, &v)) return -1;
  return v;
}
inline egr_resolved_key V4Key(uint64_t sandbox, const char* v4) {
  egr_resolved_key k{.sandbox_id = sandbox};
  k.addr[10] = k.addr[11] = 0xff;
  EXPECT_EQ(inet_pton(AF_INET, v4, &k.addr[12]), 1);
  return k;
}
inline uint32_t PinnedSchema(const std::string& pins) {
  int fd = bpf_obj_get((pins + "/" EGR_MAP_CONFIG).c_str());
  uint32_t zero = 0;
  egr_config_val c{};
  if (fd >= 0) {
    bpf_map_lookup_elem(fd, &zero, &c);
    close(fd);
  }
  return c.pad0;
}

// The old pin and the staging pins gone, the schema written, and every
// learned address in the new map (open, returned; -1 if it is not) with its
// expiry and name and no keep (v1 had none).
inline int ExpectResolvedMigrated(const std::string& pins, const std::string& staging,
                                  const std::vector<old_layout::LearnedV1>& learned) {
  EXPECT_FALSE(Exists(pins + "/" + old_layout::kResolvedV1));
  EXPECT_FALSE(Exists(staging)) << "the stale staging pin and its directory are removed";
  EXPECT_EQ(PinnedSchema(pins), uint32_t{kPinSchema});
  int fd = bpf_obj_get((pins + "/" EGR_MAP_RESOLVED).c_str());
  EXPECT_GE(fd, 0);
  if (fd < 0) return fd;
  auto entries = maps::AllEntries<egr_resolved_key, egr_resolved_val>(fd);
  EXPECT_EQ(entries.size(), learned.size());
  size_t same = 0;
  for (const auto& e : learned) {
    egr_resolved_val v{};
    if (bpf_map_lookup_elem(fd, &e.key, &v) != 0) continue;
    same += v.expires_boot_ns == e.val.expires_boot_ns && v.name_ids[0] == e.val.name_id && v.name_ids[1] == 0 &&
            v.keep_s == 0;
  }
  EXPECT_EQ(same, learned.size()) << "each address with its expiry, its name, and no keep (v1 had none)";
  return fd;
}

// The live flow (egressd-probe hold) never broke: every round echoed on its
// one connection, from before [from_ms, to_ms] to after it, and at least 5
// rounds ran inside it.
inline void ExpectFlowUnbroken(lab::Background& hold, long long from_ms, long long to_ms, const char* inside) {
  int during = 0, bad = 0;
  std::string first_bad;
  for (;;) {
    auto line = hold.ReadOutLine(Scaled(std::chrono::seconds(10)));
    ASSERT_TRUE(line.has_value()) << "the live flow stopped: " << hold.err();
    auto l = lab::ParseProbeLine(*line);
    ASSERT_TRUE(l.ok()) << *line;
    if (!Ok(*l)) {
      ++bad;
      if (first_bad.empty()) first_bad = *line;
    }
    const long long at = Num(*l, "start_ms");
    during += at >= from_ms && at <= to_ms;
    if (at > to_ms + 200) break;
  }
  hold.Stop();
  EXPECT_EQ(bad, 0) << "the live flow was cut: " << first_bad;
  EXPECT_GE(during, 5) << "rounds of the live flow ran " << inside;
}

}  // namespace egressd::test::migrate
