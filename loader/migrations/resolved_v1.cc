// egr_resolved_v1 -> egr_resolved_v2 (retired by cfab065, "dns sink: ...
// egr_resolved_v2 keeps every rule that allowed an address").  v1 held one
// name id per learned address; v2 holds up to EGR_RESOLVED_NAMES and a keep
// for unconnected senders.  The key is unchanged.  An address keeps its
// expiry to the nanosecond (the same boot-time clock), its one name as the
// newest of v2's, and keep_s 0: v1 had no grace for sends, and 0 is v2's
// "expiry is final for sends too", so nothing is allowed longer than v1
// allowed it.
#include <bpf/bpf.h>
#include <linux/bpf.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "loader/migration.h"
#include "maps/egressd_abi.h"
#include "maps/map_iter.h"
#include "userspace/common/errors.h"

namespace egressd {
namespace {

// The v1 value as cfab065^:maps/egressd_abi.h declared it.
struct ResolvedValV1 {
  uint64_t expires_boot_ns;
  uint32_t name_id;
  uint32_t pad0;
};
static_assert(sizeof(ResolvedValV1) == 16);

egr_resolved_val FromV1(const ResolvedValV1& old) {
  egr_resolved_val v{};
  v.expires_boot_ns = old.expires_boot_ns;
  v.name_ids[0] = old.name_id;
  v.keep_s = 0;
  return v;
}

// Writes in batches (one syscall per chunk; 100k addresses are 25 calls).
absl::Status WriteAll(int to_fd, std::vector<egr_resolved_key>& keys, std::vector<egr_resolved_val>& vals) {
  constexpr size_t kChunk = 4096;
  for (size_t at = 0; at < keys.size(); at += kChunk) {
    uint32_t n = static_cast<uint32_t>(std::min(kChunk, keys.size() - at));
    DECLARE_LIBBPF_OPTS(bpf_map_batch_opts, opts, .elem_flags = BPF_ANY);
    if (bpf_map_update_batch(to_fd, &keys[at], &vals[at], &n, &opts) != 0) {
      // Kernels without batch ops on this map: one at a time.
      if (errno != EINVAL && errno != EOPNOTSUPP) {
        return ErrnoStatus(errno, absl::StrCat("write learned addresses into ", EGR_MAP_RESOLVED));
      }
      for (size_t i = at; i < keys.size(); ++i) {
        if (bpf_map_update_elem(to_fd, &keys[i], &vals[i], BPF_ANY) != 0) {
          return ErrnoStatus(errno, absl::StrCat("write a learned address into ", EGR_MAP_RESOLVED));
        }
      }
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

// Every entry of the v1 map, read in batches (a syscall per 4096 entries;
// one lookup per key where the kernel has no batch ops on the map).
absl::Status ReadV1(int from_fd, std::vector<egr_resolved_key>& keys, std::vector<egr_resolved_val>& vals) {
  constexpr uint32_t kChunk = 4096;
  std::vector<egr_resolved_key> k(kChunk);
  std::vector<ResolvedValV1> v(kChunk);
  uint64_t in = 0, out = 0;  // the hash map's batch token (a bucket index)
  for (bool first = true;; first = false) {
    uint32_t n = kChunk;
    DECLARE_LIBBPF_OPTS(bpf_map_batch_opts, opts);
    const int r = bpf_map_lookup_batch(from_fd, first ? nullptr : &in, &out, k.data(), v.data(), &n, &opts);
    const int err = errno;
    if (r != 0 && err != ENOENT) {
      if (first && (err == EINVAL || err == EOPNOTSUPP)) break;
      return ErrnoStatus(err, "read the learned addresses of egr_resolved_v1");
    }
    for (uint32_t i = 0; i < n; ++i) {
      keys.push_back(k[i]);
      vals.push_back(FromV1(v[i]));
    }
    if (r != 0) return absl::OkStatus();  // ENOENT: the last batch
    in = out;
  }
  for (const auto& [key, val] : maps::AllEntries<egr_resolved_key, ResolvedValV1>(from_fd)) {
    keys.push_back(key);
    vals.push_back(FromV1(val));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> Carry(int from_fd, int to_fd) {
  std::vector<egr_resolved_key> keys;
  std::vector<egr_resolved_val> vals;
  EGR_RETURN_IF_ERROR(ReadV1(from_fd, keys, vals));
  EGR_RETURN_IF_ERROR(WriteAll(to_fd, keys, vals));
  return keys.size();
}

struct KeyHash {
  size_t operator()(const egr_resolved_key& k) const {
    uint64_t h = k.sandbox_id * 0x9e3779b97f4a7c15ull;
    for (uint8_t b : k.addr) h = (h ^ b) * 1099511628211ull;
    return h;
  }
};
struct KeyEq {
  bool operator()(const egr_resolved_key& a, const egr_resolved_key& b) const {
    return std::memcmp(&a, &b, sizeof(a)) == 0;
  }
};

// What the old writers did since the carry: an answer learned or refreshed
// (written again), an address forgotten or collected (deleted here too, so
// the copy never allows what the old map no longer does).
absl::StatusOr<size_t> Level(int from_fd, int to_fd) {
  std::vector<egr_resolved_key> keys;
  std::vector<egr_resolved_val> vals;
  EGR_RETURN_IF_ERROR(ReadV1(from_fd, keys, vals));
  absl::flat_hash_set<egr_resolved_key, KeyHash, KeyEq> live(keys.begin(), keys.end());
  size_t deleted = 0;
  for (const auto& k : maps::AllKeys<egr_resolved_key>(to_fd)) {
    if (live.contains(k)) continue;
    if (bpf_map_delete_elem(to_fd, &k) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, absl::StrCat("delete a forgotten address from ", EGR_MAP_RESOLVED));
    }
    ++deleted;
  }
  EGR_RETURN_IF_ERROR(WriteAll(to_fd, keys, vals));
  return deleted;
}

}  // namespace

const Migration kMigrateResolvedV1 = {
    "egr_resolved_v1",
    EGR_MAP_RESOLVED,
    {"egr_resolved_v1", BPF_MAP_TYPE_HASH, sizeof(egr_resolved_key), sizeof(ResolvedValV1), EGR_MAX_RESOLVED,
     BPF_F_NO_PREALLOC},
    Carry,
    Level,
    "learned addresses with their expiries and name",
};

}  // namespace egressd
