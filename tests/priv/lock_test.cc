// Issue 7: the instance lock is an flock on a file nothing removes, so a
// locker blocked across `unload` (which removes the pin directory) and the
// `load` after it never holds the lock together with anyone.  Three lockers
// log enter/leave under the lock; the test proves each was blocked while
// another held it (/proc/locks lists it as a waiter) and that the logged
// intervals never overlap.
#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "egressd_env.h"
#include "userspace/common/node.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;
using std::chrono::milliseconds;

// Whether /proc/locks lists `pid` as blocked on an flock ("N: -> FLOCK ...").
bool BlockedOnFlock(pid_t pid) {
  std::ifstream in("/proc/locks");
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() > 5 && f[1] == "->" && f[2] == "FLOCK" && f[5] == std::to_string(pid)) return true;
  }
  return false;
}

bool Exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}


// Opens the gate FIFO for writing and closes it: the holder reads EOF.
void OpenGate(const std::string& fifo) {
  int fd = open(fifo.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << "open " << fifo;
  close(fd);
}

TEST(InstanceLock, ASecondLockerBlockedAcrossUnloadThenLoadNeverHoldsItWithAnother) {
  EGR_REQUIRE_PRIVILEGES();
  const InstanceDirs dirs = Shared().Other("lock");
  const std::string pins = dirs.pin_root, runtime = dirs.runtime_dir;
  auto ctl = [&](std::vector<std::string> args) { return Egressd::CtlAt(Shared().lab(), dirs, args); };
  const std::string scratch = "/tmp/egr-lock-test-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(scratch.c_str(), 0700), 0);
  // Runs even when an assertion below fails.
  // Runs even when an assertion below fails (the instance itself is unloaded
  // and its runtime dir removed by Shared()'s teardown).
  struct Cleanup {
    std::string scratch;
    ~Cleanup() { lab::Run({.argv = {"rm", "-rf", "--", scratch}}); }
  } cleanup{scratch};
  const std::string log = scratch + "/log", gate_a = scratch + "/gate-a", gate_b = scratch + "/gate-b";
  ASSERT_EQ(mkfifo(gate_a.c_str(), 0600), 0);
  ASSERT_EQ(mkfifo(gate_b.c_str(), 0600), 0);
  ASSERT_EQ(ctl({"load"}).exit_code, 0);

  auto holder = [&](const char* name, std::vector<std::string> extra) {
    RunSpec spec;
    spec.argv = {BinaryPath("egr-lock-holder"), name, pins, runtime, log};
    spec.argv.insert(spec.argv.end(), extra.begin(), extra.end());
    spec.netns = Shared().lab().node_netns();
    spec.env["EGRESSD_NODE_NETNS"] = Shared().lab().node_netns();
    spec.timeout = milliseconds(60000);
    auto bg = Start(spec);
    EXPECT_TRUE(bg.ok()) << bg.status();
    return std::move(*bg);
  };
  const milliseconds wait(10000 * static_cast<int>(TimeScale()));

  // A holds the lock and will unload the instance.
  Background a = holder("A", {"--gate", gate_a, "--unload"});
  ASSERT_EQ(a.ReadOutLine(wait), "held") << a.err();
  // B queues behind A on the lock.
  Background b = holder("B", {"--gate", gate_b});
  ASSERT_TRUE(Lab::WaitFor([&] { return BlockedOnFlock(b.pid()); }, wait)) << "B is not waiting for the lock";

  // A unloads (the pin directory goes) and exits; B gets the lock.
  OpenGate(gate_a);
  EXPECT_EQ(a.Wait(wait).exit_code, 0) << a.err();
  EXPECT_FALSE(Exists(pins)) << "A's unload left the pins";
  ASSERT_EQ(b.ReadOutLine(wait), "held") << b.err();

  // C loads again (recreating the pin directory) and must wait for B: with
  // a lock on the pin directory it would lock the new directory at once.
  Background c = holder("C", {"--load"});
  EXPECT_TRUE(Lab::WaitFor([&] { return BlockedOnFlock(c.pid()); }, wait)) << "C did not wait for B";
  EXPECT_FALSE(Exists(pins + "/links")) << "C loaded while B held the lock";
  OpenGate(gate_b);
  EXPECT_EQ(b.Wait(wait).exit_code, 0) << b.err();
  EXPECT_EQ(c.ReadOutLine(wait), "held") << c.err();
  EXPECT_EQ(c.Wait(milliseconds(60000)).exit_code, 0) << c.err();
  EXPECT_TRUE(Exists(pins + "/links")) << "C's load left no links";

  // The log: A, B, C each entered after the one before left.
  std::ifstream in(log);
  std::map<std::string, std::pair<long long, long long>> span;
  std::vector<std::string> order;
  for (std::string what, name; in >> what >> name;) {
    long long t = 0;
    in >> t;
    if (what == "enter") {
      span[name].first = t;
      order.push_back(name);
    } else {
      span[name].second = t;
    }
  }
  ASSERT_EQ(order, (std::vector<std::string>{"A", "B", "C"}));
  for (const auto& [name, s] : span) EXPECT_LT(s.first, s.second) << name;
  EXPECT_LT(span["A"].second, span["B"].first) << "A and B held the lock at once";
  EXPECT_LT(span["B"].second, span["C"].first) << "B and C held the lock at once";
  EXPECT_TRUE(Exists(runtime + "/lock")) << "the lock file was removed";
  EXPECT_EQ(ctl({"unload", "--force"}).exit_code, 0);
}

}  // namespace
}  // namespace egressd::test
