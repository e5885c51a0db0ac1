// Reading whole maps (maps/map_iter.h, maps/map_census.cc): the batched read
// gives what the key-by-key walk gives, for every map type egressd pins, and
// falls back where the kernel has no batch for the type (LPM tries).
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "egressd_env.h"
#include "gtest/gtest.h"
#include "maps/map_census.h"
#include "maps/map_iter.h"

namespace egressd::test {
namespace {

struct Lpm4Key {
  uint32_t prefixlen;
  uint32_t addr;
};

class MapFd {
 public:
  MapFd(bpf_map_type type, uint32_t key, uint32_t value, uint32_t max, uint32_t flags = 0) {
    LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = flags);
    fd_ = bpf_map_create(type, nullptr, key, value, max, &o);
  }
  ~MapFd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

template <typename K, typename V>
void ExpectSameEntries(int fd) {
  auto batched = maps::AllEntries<K, V>(fd);
  auto walked = maps::AllEntriesOneByOne<K, V>(fd);
  auto less = [](const auto& a, const auto& b) {
    return std::memcmp(&a.first, &b.first, sizeof(K)) < 0;
  };
  std::sort(batched.begin(), batched.end(), less);
  std::sort(walked.begin(), walked.end(), less);
  ASSERT_EQ(batched.size(), walked.size());
  for (size_t i = 0; i < batched.size(); ++i) {
    EXPECT_EQ(std::memcmp(&batched[i].first, &walked[i].first, sizeof(K)), 0) << i;
    EXPECT_EQ(std::memcmp(&batched[i].second, &walked[i].second, sizeof(V)), 0) << i;
  }
}

TEST(MapRead, AHashMapOfManyEntriesReadsWholeAndAsTheWalkReadsIt) {
  EGR_REQUIRE_PRIVILEGES();
  // More than one batch (4,096), and a full map.
  constexpr uint32_t kMax = 10000;
  MapFd m(BPF_MAP_TYPE_HASH, sizeof(uint64_t), sizeof(uint64_t), kMax);
  ASSERT_GE(m.get(), 0) << std::strerror(errno);
  for (uint64_t k = 0; k < kMax; ++k) {
    const uint64_t key = ~0ull - k * 7919, v = k;
    ASSERT_EQ(bpf_map_update_elem(m.get(), &key, &v, BPF_NOEXIST), 0) << std::strerror(errno);
  }
  auto all = maps::AllEntries<uint64_t, uint64_t>(m.get());
  ASSERT_EQ(all.size(), kMax);
  for (const auto& [k, v] : all) EXPECT_EQ(k, ~0ull - v * 7919);
  ExpectSameEntries<uint64_t, uint64_t>(m.get());
}

TEST(MapRead, EmptyAndArrayAndLpmTrieMapsReadAsTheWalkReadsThem) {
  EGR_REQUIRE_PRIVILEGES();
  MapFd empty(BPF_MAP_TYPE_HASH, sizeof(uint32_t), sizeof(uint32_t), 64);
  ASSERT_GE(empty.get(), 0) << std::strerror(errno);
  EXPECT_TRUE((maps::AllEntries<uint32_t, uint32_t>(empty.get()).empty()));

  MapFd array(BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), sizeof(uint64_t), 5000);
  ASSERT_GE(array.get(), 0) << std::strerror(errno);
  for (uint32_t k = 0; k < 5000; k += 3) {
    const uint64_t v = k * 3ull;
    ASSERT_EQ(bpf_map_update_elem(array.get(), &k, &v, BPF_ANY), 0);
  }
  EXPECT_EQ((maps::AllEntries<uint32_t, uint64_t>(array.get()).size()), 5000u);
  ExpectSameEntries<uint32_t, uint64_t>(array.get());

  // The kernel has no batch for LPM tries: the walk answers.
  MapFd lpm(BPF_MAP_TYPE_LPM_TRIE, sizeof(Lpm4Key), sizeof(uint32_t), 512, BPF_F_NO_PREALLOC);
  ASSERT_GE(lpm.get(), 0) << std::strerror(errno);
  for (uint32_t i = 0; i < 300; ++i) {
    Lpm4Key k{24, htonl(0x0a000000u | (i << 8))};
    ASSERT_EQ(bpf_map_update_elem(lpm.get(), &k, &i, BPF_ANY), 0);
  }
  EXPECT_EQ((maps::AllEntries<Lpm4Key, uint32_t>(lpm.get()).size()), 300u);
  ExpectSameEntries<Lpm4Key, uint32_t>(lpm.get());
}

TEST(MapRead, TheCensusCountsPinnedMapsOfEveryKindAsTheWalkWould) {
  EGR_REQUIRE_PRIVILEGES();
  const std::string root = absl::StrCat("/sys/fs/bpf/egr-test-mapread-", getpid());
  ASSERT_EQ(mkdir(root.c_str(), 0700), 0) << root << ": " << std::strerror(errno);
  struct Cleanup {
    std::string root;
    ~Cleanup() {
      for (const char* n : {"hash", "percpu", "lpm", "array", "ring"})
        unlink(absl::StrCat(root, "/", n).c_str());
      rmdir(root.c_str());
    }
  } cleanup{root};
  MapFd hash(BPF_MAP_TYPE_HASH, sizeof(uint64_t), 24, 9000);
  MapFd percpu(BPF_MAP_TYPE_PERCPU_HASH, sizeof(uint32_t), 12, 100);
  MapFd lpm(BPF_MAP_TYPE_LPM_TRIE, sizeof(Lpm4Key), sizeof(uint32_t), 64, BPF_F_NO_PREALLOC);
  MapFd array(BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), sizeof(uint32_t), 33);
  MapFd ring(BPF_MAP_TYPE_RINGBUF, 0, 0, 4096);
  for (const MapFd* m : {&hash, &percpu, &lpm, &array, &ring}) ASSERT_GE(m->get(), 0) << std::strerror(errno);
  std::vector<uint8_t> value(24), percpu_value(16 * static_cast<size_t>(libbpf_num_possible_cpus()));
  for (uint64_t k = 0; k < 8191; ++k) ASSERT_EQ(bpf_map_update_elem(hash.get(), &k, value.data(), BPF_ANY), 0);
  for (uint32_t k = 0; k < 77; ++k)
    ASSERT_EQ(bpf_map_update_elem(percpu.get(), &k, percpu_value.data(), BPF_ANY), 0) << std::strerror(errno);
  for (uint32_t i = 0; i < 40; ++i) {
    Lpm4Key k{32, htonl(0xc0000200u + i)};
    ASSERT_EQ(bpf_map_update_elem(lpm.get(), &k, &i, BPF_ANY), 0);
  }
  for (const auto& [m, n] : std::vector<std::pair<const MapFd*, const char*>>{
           {&hash, "hash"}, {&percpu, "percpu"}, {&lpm, "lpm"}, {&array, "array"}, {&ring, "ring"}})
    ASSERT_EQ(bpf_obj_pin(m->get(), absl::StrCat(root, "/", n).c_str()), 0) << std::strerror(errno);

  auto census = maps::CountPinnedMaps(root);
  ASSERT_TRUE(census.ok()) << census.status();
  std::map<std::string, std::optional<uint64_t>> got;
  for (const auto& c : *census) got[c.name] = c.entries;
  EXPECT_EQ(got["hash"], 8191u);
  EXPECT_EQ(got["percpu"], 77u);
  EXPECT_EQ(got["lpm"], 40u);
  EXPECT_EQ(got["array"], 33u);
  EXPECT_EQ(got["ring"], std::nullopt);
}

}  // namespace
}  // namespace egressd::test
