#include "maps/map_iter.h"

#include <cerrno>

namespace egressd::maps {

bool ForEachBatch(int fd, size_t key_size, size_t value_size,
                  const std::function<void(const uint8_t* keys, const uint8_t* values, uint32_t n)>& take) {
  // A hash map's batch must hold its largest bucket (else ENOSPC), which this
  // is far above.
  constexpr uint32_t kChunk = 4096;
  std::vector<uint8_t> keys(size_t{kChunk} * (key_size ? key_size : 1));
  std::vector<uint8_t> values(size_t{kChunk} * (value_size ? value_size : 1));
  // The position token: a bucket or index (u32) for hash and array maps.
  uint64_t in_batch = 0, out_batch = 0;
  for (bool first = true;; first = false) {
    uint32_t n = kChunk;
    const int r = bpf_map_lookup_batch(fd, first ? nullptr : &in_batch, &out_batch, keys.data(),
                                       values.data(), &n, nullptr);
    const int err = r == 0 ? 0 : errno;
    if (r != 0 && err != ENOENT) return false;
    take(keys.data(), values.data(), n < kChunk ? n : kChunk);
    if (err == ENOENT) return true;  // the walk's end (with its last entries)
    in_batch = out_batch;
  }
}

}  // namespace egressd::maps
