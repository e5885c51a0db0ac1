// Frozen descriptions of layouts older egressd builds pinned, for the
// migration tests to build that state without those builds.  Kept apart
// from loader/migrations/ on purpose: a migration's own idea of the old
// layout is what the test checks, so the test does not borrow it.
// Source: `git show cfab065^:maps/egressd_abi.h` and `...:bpf/lib/maps.h`.
#pragma once

#include <bpf/bpf.h>
#include <linux/bpf.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "maps/egressd_abi.h"

namespace egressd::test::old_layout {

// egr_resolved_v1 (until cfab065): BPF_MAP_TYPE_HASH, key struct
// egr_resolved_key (unchanged since), this value, EGR_MAX_RESOLVED entries,
// BPF_F_NO_PREALLOC.
inline constexpr const char* kResolvedV1 = "egr_resolved_v1";
struct ResolvedValV1 {
  uint64_t expires_boot_ns;  // bpf_ktime_get_boot_ns() deadline
  uint32_t name_id;          // which allowed name produced it (audit)
  uint32_t pad0;
};
static_assert(sizeof(ResolvedValV1) == 16);
inline constexpr uint32_t kResolvedV1Type = BPF_MAP_TYPE_HASH;
inline constexpr uint32_t kResolvedV1KeySize = 24;
inline constexpr uint32_t kResolvedV1MaxEntries = 1u << 20;
inline constexpr uint32_t kResolvedV1Flags = BPF_F_NO_PREALLOC;

// egr_resolved_v2 between cfab065 and 5e7e896: keep_s and its pad were
// added without a new name, so a node that ran a build of that span holds a
// v2 pin of this value size.  What the shape check must refuse.
inline constexpr uint32_t kResolvedV2EarlyValueSize = 24;

inline uint64_t BootNs() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

struct LearnedV1 {
  egr_resolved_key key;
  ResolvedValV1 val;
};

// `n` learned addresses of synthetic sandboxes (ids from 0x7e57 << 48, 200
// addresses each, in 10.0.0.0/8 as ::ffff:a.b.c.d), each with its own expiry
// (from `first_expiry`, a microsecond apart) and name id.
inline std::vector<LearnedV1> Synthetic(size_t n, uint64_t first_expiry) {
  std::vector<LearnedV1> out(n);
  for (size_t i = 0; i < n; ++i) {
    LearnedV1& e = out[i];
    e.key.sandbox_id = (uint64_t{0x7e57} << 48) + i / 200;
    e.key.addr[10] = e.key.addr[11] = 0xff;
    e.key.addr[12] = 10;
    e.key.addr[13] = uint8_t(i >> 16);
    e.key.addr[14] = uint8_t(i >> 8);
    e.key.addr[15] = uint8_t(i);
    e.val.expires_boot_ns = first_expiry + i * 1000;
    e.val.name_id = uint32_t(i + 1);
  }
  return out;
}

// What an ABI-v2 build up to cfab065 left pinned, made out of an instance
// loaded by this build at `pin_root`: egr_resolved_v1 (this file's layout)
// pinned and holding `learned`, no egr_resolved_v2 pin, the schema entry 0
// (those builds had none).  The programs in force keep reading the map that
// was pinned as egr_resolved_v2; it is given the same addresses (as v2 says
// them), so what they enforce is what the old state allows.  Returns that
// map's fd (the caller closes it).
inline absl::StatusOr<int> StageOldResolvedState(const std::string& pin_root, const std::vector<LearnedV1>& learned) {
  auto fail = [](const std::string& what) { return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno))); };
  const std::string v2_pin = pin_root + "/" + EGR_MAP_RESOLVED, v1_pin = pin_root + "/" + kResolvedV1;
  int live = bpf_obj_get(v2_pin.c_str());
  if (live < 0) return fail("open " + v2_pin);
  DECLARE_LIBBPF_OPTS(bpf_map_create_opts, copts, .map_flags = kResolvedV1Flags);
  int old = bpf_map_create(static_cast<bpf_map_type>(kResolvedV1Type), kResolvedV1, kResolvedV1KeySize,
                           sizeof(ResolvedValV1), kResolvedV1MaxEntries, &copts);
  if (old < 0) {
    close(live);
    return fail("create a map of the egr_resolved_v1 layout");
  }
  for (const auto& e : learned) {
    egr_resolved_val v{};
    v.expires_boot_ns = e.val.expires_boot_ns;
    v.name_ids[0] = e.val.name_id;
    if (bpf_map_update_elem(old, &e.key, &e.val, BPF_ANY) != 0 || bpf_map_update_elem(live, &e.key, &v, BPF_ANY) != 0) {
      close(old);
      close(live);
      return fail("write a learned address");
    }
  }
  const int pinned = bpf_obj_pin(old, v1_pin.c_str());
  close(old);
  if (pinned != 0 || unlink(v2_pin.c_str()) != 0) {
    close(live);
    return fail("pin " + v1_pin + " / unpin " + v2_pin);
  }
  int cfg = bpf_obj_get((pin_root + "/" + EGR_MAP_CONFIG).c_str());
  uint32_t zero = 0;
  egr_config_val c{};
  const bool ok = cfg >= 0 && bpf_map_lookup_elem(cfg, &zero, &c) == 0 &&
                  (c.pad0 = 0, bpf_map_update_elem(cfg, &zero, &c, BPF_ANY) == 0);
  if (cfg >= 0) close(cfg);
  if (!ok) {
    close(live);
    return fail("zero the schema entry");
  }
  return live;
}

}  // namespace egressd::test::old_layout
