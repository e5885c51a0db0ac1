// Reading whole BPF maps from the control plane.
#pragma once

#include <bpf/bpf.h>

#include <cerrno>
#include <cstdint>
#include <utility>
#include <vector>

namespace egressd::maps {

// Every key, collected first: deleting while iterating would skip keys.
template <typename K>
std::vector<K> AllKeys(int fd) {
  std::vector<K> keys;
  K key{}, next{};
  const void* cur = nullptr;
  while (bpf_map_get_next_key(fd, cur, &next) == 0) {
    keys.push_back(next);
    key = next;
    cur = &key;
  }
  return keys;
}

// Every (key, value) still present when read, one lookup per key.
template <typename K, typename V>
std::vector<std::pair<K, V>> AllEntriesOneByOne(int fd) {
  std::vector<std::pair<K, V>> out;
  for (const K& k : AllKeys<K>(fd)) {
    V v{};
    if (bpf_map_lookup_elem(fd, &k, &v) == 0) out.emplace_back(k, v);
  }
  return out;
}

// Every (key, value) still present when read.  BPF_MAP_LOOKUP_BATCH where the
// map type has it (hash and array maps): a few syscalls instead of two per
// entry, which for the 65,536-entry cgroup table was ~25 s of `egressctl
// status` in an emulated guest (~0.4 s natively).  A map type without it
// (LPM tries: ENOTSUPP, 524), or any failure part-way, reads key by key from
// the start, as before.
template <typename K, typename V>
std::vector<std::pair<K, V>> AllEntries(int fd) {
  // A hash map's batch must hold its largest bucket (else ENOSPC), which this
  // is far above.
  constexpr uint32_t kChunk = 4096;
  std::vector<K> keys(kChunk);
  std::vector<V> values(kChunk);
  std::vector<std::pair<K, V>> out;
  // The position token: a bucket or index (u32) for hash and array maps.
  uint64_t in_batch = 0, out_batch = 0;
  for (bool first = true;; first = false) {
    uint32_t n = kChunk;
    const int r = bpf_map_lookup_batch(fd, first ? nullptr : &in_batch, &out_batch, keys.data(),
                                       values.data(), &n, nullptr);
    const int err = r == 0 ? 0 : errno;
    if (r != 0 && err != ENOENT) return AllEntriesOneByOne<K, V>(fd);
    for (uint32_t i = 0; i < n && i < kChunk; ++i) out.emplace_back(keys[i], values[i]);
    if (err == ENOENT) return out;  // the walk's end (with its last entries)
    in_batch = out_batch;
  }
}

}  // namespace egressd::maps
