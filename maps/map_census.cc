#include "maps/map_census.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "maps/map_iter.h"
#include "userspace/common/errors.h"
#include "userspace/common/unique_fd.h"

namespace egressd::maps {
namespace {

// A pinned object's fd is a map when its anon inode says so.
bool IsMapFd(int fd) {
  char link[64] = {};
  const std::string proc = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t n = readlink(proc.c_str(), link, sizeof(link) - 1);
  return n > 0 && std::string(link, n) == "anon_inode:bpf-map";
}

// A snapshot: a key deleted while walking restarts the walk, so the count
// is capped at the capacity.
std::optional<uint64_t> CountKeysOneByOne(int fd, uint32_t key_size, uint32_t max_entries) {
  std::vector<uint8_t> cur(key_size ? key_size : 1), next(key_size ? key_size : 1);
  uint64_t n = 0;
  const void* prev = nullptr;
  while (n < max_entries && bpf_map_get_next_key(fd, prev, next.data()) == 0) {
    ++n;
    cur.swap(next);
    prev = cur.data();
  }
  if (n < max_entries && errno != ENOENT) return std::nullopt;  // not walkable (ringbuf, sk_storage)
  return n;
}

bool PerCpu(uint32_t type) {
  return type == BPF_MAP_TYPE_PERCPU_HASH || type == BPF_MAP_TYPE_PERCPU_ARRAY ||
         type == BPF_MAP_TYPE_LRU_PERCPU_HASH || type == BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE;
}

// Batched where the type has it (maps/map_iter.h): the walk above costs a
// syscall per key, seconds of `egressctl status` for the full cgroup table in
// an emulated guest.
std::optional<uint64_t> CountKeys(int fd, const bpf_map_info& info) {
  size_t value_size = info.value_size;
  if (PerCpu(info.type)) {
    const int cpus = libbpf_num_possible_cpus();
    if (cpus <= 0) return CountKeysOneByOne(fd, info.key_size, info.max_entries);
    value_size = ((value_size + 7) & ~size_t{7}) * static_cast<size_t>(cpus);
  }
  uint64_t n = 0;
  if (!ForEachBatch(fd, info.key_size, value_size, [&](const uint8_t*, const uint8_t*, uint32_t got) { n += got; }))
    return CountKeysOneByOne(fd, info.key_size, info.max_entries);
  return std::min<uint64_t>(n, info.max_entries);
}

}  // namespace

absl::StatusOr<std::vector<MapCensus>> CountPinnedMaps(const std::string& pin_root) {
  DIR* d = opendir(pin_root.c_str());
  if (!d) return ErrnoStatus(errno, absl::StrCat("open pin root ", pin_root));
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    names.emplace_back(e->d_name);
  }
  closedir(d);
  std::vector<MapCensus> out;
  for (const std::string& name : names) {
    const std::string path = absl::StrCat(pin_root, "/", name);
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // links/, ...
    int raw = bpf_obj_get(path.c_str());
    if (raw < 0) return ErrnoStatus(errno, absl::StrCat("open pinned object ", path));
    UniqueFd fd(raw);
    if (!IsMapFd(fd.get())) continue;
    bpf_map_info info{};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd.get(), &info, &len) != 0)
      return ErrnoStatus(errno, absl::StrCat("read map info of ", path));
    const char* type = libbpf_bpf_map_type_str(static_cast<bpf_map_type>(info.type));
    MapCensus c{name, type ? std::string(type) : absl::StrCat("type-", info.type), info.max_entries, std::nullopt};
    if (info.type != BPF_MAP_TYPE_RINGBUF) c.entries = CountKeys(fd.get(), info);
    out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(), [](const MapCensus& a, const MapCensus& b) { return a.name < b.name; });
  return out;
}

}  // namespace egressd::maps
