// The node's key for question-name ids (userspace/dns/qname_key.h): the
// SipHash-2-4 it is (the reference vectors), the file it lives in (made
// once, mode 0600, the same key for every process, a damaged one refused by
// name and left as it is), and ids that differ from the unkeyed NameId.
#include "userspace/dns/qname_key.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "userspace/dns/scope.h"

namespace egressd::dns {
namespace {

QnameKey::Bytes RefKey() {
  QnameKey::Bytes k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(i);
  return k;
}

class TempDir {
 public:
  TempDir() {
    char t[] = "/tmp/egr-qname-key-XXXXXX";
    path_ = mkdtemp(t);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// SipHash-2-4's reference vectors (Aumasson and Bernstein's paper, key
// 00..0f, message 00..(n-1)): the 64-bit tags of n = 0 and n = 15 are
// 310e0edd47db6f72 and e545be4961ca29a1 as bytes; the id is the tag's first
// four bytes read little-endian.
TEST(QnameKey, IsSipHash24ReadLittleEndian) {
  auto k = QnameKey::FromBytes(RefKey());
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ((*k)->Id(""), 0xdd0e0e31u);
  std::string m;
  for (int i = 0; i < 15; ++i) m.push_back(static_cast<char>(i));
  EXPECT_EQ((*k)->Id(m), 0x49be45e5u);
}

TEST(QnameKey, IdsDependOnTheKeyAndAreNotTheUnkeyedNameId) {
  auto a = QnameKey::FromBytes(RefKey());
  auto b = QnameKey::FromBytes(QnameKey::Bytes{42});
  ASSERT_TRUE(a.ok() && b.ok());
  int same_as_fnv = 0, same_across_keys = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string name = "n" + std::to_string(i) + ".example.com";
    EXPECT_NE((*a)->Id(name), 0u);
    same_as_fnv += (*a)->Id(name) == NameId(name);
    same_across_keys += (*a)->Id(name) == (*b)->Id(name);
  }
  EXPECT_EQ(same_as_fnv, 0);
  EXPECT_EQ(same_across_keys, 0);
}

TEST(QnameKey, LoadOrCreateMakesOnePrivateKeyEveryLoadShares) {
  TempDir dir;
  const std::string path = QnameKey::PathIn(dir.path());
  auto first = QnameKey::LoadOrCreate(path);
  ASSERT_TRUE(first.ok()) << first.status();
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 16);
  auto again = QnameKey::LoadOrCreate(path);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*first)->Id("api.example.com"), (*again)->Id("api.example.com"));
}

// Processes (here threads) racing to make the key all end up with the one
// linked in first, and no temporary file is left behind.
TEST(QnameKey, RacingCreatorsAgreeOnOneKey) {
  TempDir dir;
  const std::string path = QnameKey::PathIn(dir.path());
  constexpr int kThreads = 8;
  std::vector<uint32_t> ids(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto k = QnameKey::LoadOrCreate(path);
      if (k.ok()) {
        ids[i] = (*k)->Id("api.example.com");
      } else {
        errors[i] = k.status().ToString();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(errors[i], "") << i;
  EXPECT_EQ(std::set<uint32_t>(ids.begin(), ids.end()).size(), 1u);
  EXPECT_EQ(access(path.c_str(), F_OK), 0);
  EXPECT_EQ(std::system(("test $(ls -A '" + dir.path() + "' | wc -l) -eq 1").c_str()), 0) << "no temporary file left";
}

TEST(QnameKey, AMissingDirectoryIsAnErrorNamingIt) {
  TempDir dir;
  const std::string path = QnameKey::PathIn(dir.path() + "/gone");
  auto k = QnameKey::LoadOrCreate(path);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find(dir.path() + "/gone"), std::string::npos) << k.status();
}

TEST(QnameKey, ADamagedKeyFileIsRefusedByNameAndLeftAsItIs) {
  TempDir dir;
  const std::string path = QnameKey::PathIn(dir.path());
  { std::ofstream(path) << "short"; }
  auto k = QnameKey::LoadOrCreate(path);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find(path), std::string::npos) << k.status();
  EXPECT_NE(k.status().message().find("5 bytes"), std::string::npos) << k.status();
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "short") << "nothing overwritten";
}

}  // namespace
}  // namespace egressd::dns
