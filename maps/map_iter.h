// Reading whole BPF maps from the control plane.
#pragma once

#include <bpf/bpf.h>

#include <cstdint>
#include <cstring>
#include <functional>
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

// Calls `take` with each batch of the whole map (`n` keys of `key_size` bytes
// and their values of `value_size` bytes, packed), read with
// BPF_MAP_LOOKUP_BATCH: a few syscalls for a map of any size, where a walk
// costs two per entry (the 65,536-entry cgroup table was ~25 s of `egressctl
// status` in an emulated guest).  False when the map's type has no batch (LPM
// tries: ENOTSUPP, 524) or the read failed part-way: what was taken is then
// partial, and the caller reads key by key instead.  A per-CPU map's value is
// round_up(value_size, 8) x possible CPUs, as for a lookup.
bool ForEachBatch(int fd, size_t key_size, size_t value_size,
                  const std::function<void(const uint8_t* keys, const uint8_t* values, uint32_t n)>& take);

// Every (key, value) still present when read: batched where the kernel can,
// key by key otherwise.
template <typename K, typename V>
std::vector<std::pair<K, V>> AllEntries(int fd) {
  std::vector<std::pair<K, V>> out;
  const bool whole = ForEachBatch(fd, sizeof(K), sizeof(V), [&](const uint8_t* k, const uint8_t* v, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
      auto& e = out.emplace_back();
      std::memcpy(&e.first, k + i * sizeof(K), sizeof(K));
      std::memcpy(&e.second, v + i * sizeof(V), sizeof(V));
    }
  });
  return whole ? out : AllEntriesOneByOne<K, V>(fd);
}

}  // namespace egressd::maps
