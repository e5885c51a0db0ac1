// Reading whole BPF maps from the control plane.
#pragma once

#include <bpf/bpf.h>

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

// Every (key, value) still present when read.
template <typename K, typename V>
std::vector<std::pair<K, V>> AllEntries(int fd) {
  std::vector<std::pair<K, V>> out;
  for (const K& k : AllKeys<K>(fd)) {
    V v{};
    if (bpf_map_lookup_elem(fd, &k, &v) == 0) out.emplace_back(k, v);
  }
  return out;
}

}  // namespace egressd::maps
