// Issue 8 §2: what root inside an `egressctl run` sandbox can do to the node
// itself, besides the network. Every attack here succeeded before the
// sandbox's root became root of its own user namespace (mapped to nobody) with
// a read-only view of the node: planting root-owned files, replacing a copy
// of egressctl, opening core_pattern for writing, writing node and netns
// sysctls, and reaching a node service's unix socket under /run. Each runs in
// the node netns (where `egressctl run` sandboxes live), from a working
// directory the test makes, against objects the test places and removes.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "egressd_env.h"
#include "unix_listener.h"

namespace egressd::test {
namespace {

using lab::Lab;
using namespace egressd::lab;
namespace fs = std::filesystem;

constexpr uid_t kNobody = 65534;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool Exists(const std::string& p) {
  struct stat st {};
  return lstat(p.c_str(), &st) == 0;
}

uid_t OwnerOf(const std::string& p) {
  struct stat st {};
  return lstat(p.c_str(), &st) == 0 ? st.st_uid : static_cast<uid_t>(-1);
}

// A sysctl of the node netns (or the node itself), read and restored from
// outside the sandbox whatever the test does in between.
class SysctlGuard {
 public:
  SysctlGuard(std::string netns, std::string path) : netns_(std::move(netns)), path_(std::move(path)) {
    saved_ = Read();
  }
  ~SysctlGuard() {
    if (Read() == saved_) return;
    RunSpec spec;
    spec.argv = {"sh", "-c", "printf '%s\\n' \"$1\" > \"$0\"", path_, saved_};
    spec.netns = netns_;
    RunResult r = lab::Run(spec);
    if (r.exit_code != 0 || Read() != saved_) ADD_FAILURE() << "could not restore " << path_ << ": " << r.Describe();
  }
  std::string Read() const {
    RunSpec spec;
    spec.argv = {"cat", path_};
    spec.netns = netns_;
    return std::string(absl::StripTrailingAsciiWhitespace(lab::Run(spec).out));
  }
  const std::string& saved() const { return saved_; }
  const std::string& path() const { return path_; }

 private:
  std::string netns_, path_, saved_;
};

class RunContainment : public testing::Test {
 protected:
  void SetUp() override {
    EGR_REQUIRE_PRIVILEGES();
    // Scratch space on the node's own filesystem (not a tmpfs the sandbox
    // could have privately): root-owned, as the node's files are.
    scratch_ = "/var/tmp/egr-" + lab().id() + "-" + std::to_string(counter_++);
    work_ = scratch_ + "/work";
    std::error_code ec;
    fs::create_directories(work_, ec);
    ASSERT_FALSE(ec) << scratch_ << ": " << ec.message();
    ASSERT_EQ(chmod(scratch_.c_str(), 0755), 0);
    // The working directory belongs to the user the sandbox's root maps to.
    ASSERT_EQ(chown(work_.c_str(), kNobody, kNobody), 0);
  }
  void TearDown() override {
    std::error_code ec;
    if (!scratch_.empty()) fs::remove_all(scratch_, ec);
  }
  Lab& lab() { return Shared().lab(); }

  // `egressctl run FLAGS -- CMD` started from `cwd`, in the node netns.
  RunResult RunFrom(const std::string& cwd, const std::vector<std::string>& flags,
                    const std::vector<std::string>& cmd) {
    RunSpec spec;
    spec.argv = {"sh", "-c", "cd \"$0\" && exec \"$@\"", cwd, BinaryPath("egressctl"), "run"};
    spec.argv.insert(spec.argv.end(), flags.begin(), flags.end());
    spec.argv.push_back("--");
    spec.argv.insert(spec.argv.end(), cmd.begin(), cmd.end());
    spec.netns = lab().node_netns();
    spec.env = Shared().CtlEnv();
    spec.timeout = std::chrono::milliseconds(static_cast<int64_t>(30000 * TimeScale()));
    last_ = lab::Run(spec);
    return last_;
  }
  // The probe as the sandbox's command, from the working directory.
  std::vector<ProbeLine> Probe(const std::vector<std::string>& flags, std::vector<std::string> probe) {
    probe.insert(probe.begin(), BinaryPath("egressd-probe"));
    RunResult r = RunFrom(work_, flags, probe);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    return Lines(r);
  }
  // A shell in the sandbox: the lines it printed.
  std::vector<std::string> Shell(const std::vector<std::string>& flags, const std::string& script) {
    RunResult r = RunFrom(work_, flags, {"sh", "-c", script});
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    return absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  }
  static bool Has(const std::vector<std::string>& out, const std::string& line) {
    return std::find(out.begin(), out.end(), line) != out.end();
  }

  std::string scratch_, work_;
  RunResult last_;
  static inline int counter_ = 0;
};

const std::vector<std::string> kDefault = {};
const std::vector<std::string> kHostRoot = {"--host-root"};

TEST_F(RunContainment, RootIsNobodyOfTheNodeAndWritesOnlyItsWorkdir) {
  const std::string planted = scratch_ + "/planted", own = work_ + "/own";
  auto l = Probe(kDefault, {"write-file", planted, "x", "--create", "--then", "write-file", own, "x", "--create"});
  ASSERT_EQ(l.size(), 2u) << last_.Describe();
  EXPECT_NE(l[0]["result"], "ok") << "wrote outside its working directory: " << last_.Describe();
  EXPECT_FALSE(Exists(planted)) << planted << " owned by uid " << OwnerOf(planted);
  // Positive control: the working directory is writable, and what the
  // sandbox's root makes there belongs to nobody on the node, not to root.
  EXPECT_EQ(l[1]["result"], "ok") << last_.Describe();
  EXPECT_EQ(OwnerOf(own), kNobody) << own;
}

TEST_F(RunContainment, CannotReplaceACopyOfEgressctl) {
  const std::string bin = scratch_ + "/bin/egressctl";
  fs::create_directories(scratch_ + "/bin");
  fs::copy_file(BinaryPath("egressctl"), bin);
  ASSERT_EQ(chmod(bin.c_str(), 0755), 0);
  const std::string before = ReadFile(bin);
  for (const auto& mode : {kDefault, kHostRoot}) {
    auto l = Probe(mode, {"write-file", bin, "#!/bin/sh\n", "--then", "unlink", bin, "--then", "write-file", bin,
                          "#!/bin/sh\n", "--create"});
    ASSERT_EQ(l.size(), 3u) << last_.Describe();
    for (auto& line : l) EXPECT_NE(line["result"], "ok") << absl::StrJoin(mode, " ") << ": " << last_.Describe();
    EXPECT_TRUE(ReadFile(bin) == before) << bin << " was changed (" << absl::StrJoin(mode, " ") << ")";
  }
}

TEST_F(RunContainment, CannotOpenCorePatternForWriting) {
  for (const auto& mode : {kDefault, kHostRoot}) {
    // Opened, never written: the open alone is the proof.
    ProbeLine l = Only(RunFrom(work_, mode, {BinaryPath("egressd-probe"), "open-write", "/proc/sys/kernel/core_pattern"}));
    EXPECT_NE(l["result"], "ok") << absl::StrJoin(mode, " ") << ": " << last_.Describe();
    EXPECT_EQ(l["stage"], "open") << last_.Describe();
  }
}

TEST_F(RunContainment, CannotWriteNodeOrNetnsSysctls) {
  const std::string node = lab().node_netns();
  SysctlGuard lease(node, "/proc/sys/fs/lease-break-time");  // the node's own (no namespace)
  SysctlGuard ping(node, "/proc/sys/net/ipv4/ping_group_range");
  SysctlGuard localnet(node, "/proc/sys/net/ipv4/conf/all/route_localnet");
  ASSERT_FALSE(lease.saved().empty());
  ASSERT_FALSE(ping.saved().empty());
  ASSERT_FALSE(localnet.saved().empty());
  const std::string lease_new = std::to_string(std::stoi(lease.saved()) + 1);
  const std::string ping_new = ping.saved() == "0\t2147483647" ? "1 0" : "0 2147483647";
  const std::string localnet_new = localnet.saved() == "1" ? "0" : "1";
  for (const auto& mode : {kDefault, kHostRoot}) {
    auto l = Probe(mode, {"write-file", lease.path(), lease_new, "--then", "write-file", ping.path(), ping_new,
                          "--then", "write-file", localnet.path(), localnet_new});
    ASSERT_EQ(l.size(), 3u) << last_.Describe();
    const std::string m = absl::StrJoin(mode, " ");
    EXPECT_NE(l[0]["result"], "ok") << m << ": " << last_.Describe();
    EXPECT_NE(l[1]["result"], "ok") << m << ": " << last_.Describe();
    EXPECT_NE(l[2]["result"], "ok") << m << ": " << last_.Describe();
    EXPECT_EQ(lease.Read(), lease.saved()) << m;
    EXPECT_EQ(ping.Read(), ping.saved()) << m << ": ping sockets re-enabled";
    EXPECT_EQ(localnet.Read(), localnet.saved()) << m << ": route_localnet changed";
  }
}

TEST_F(RunContainment, CannotReachNodeUnixSocketsUnderRun) {
  // Stand-ins for containerd's socket and a node resolver's (no nscd or
  // systemd-resolved socket need exist here): the resolver answers any name,
  // here one the sandbox's policy denies, with the address it would use.
  const std::string dir = "/run/egr-rc-" + lab().id();
  fs::create_directories(dir + "/nscd");
  UnixListener containerd(dir + "/containerd.sock", "containerd");
  UnixListener resolver(dir + "/nscd/socket", kImds4);
  ASSERT_TRUE(containerd.ready() && resolver.ready()) << dir;
  const std::vector<std::string> ask = {"unix-path-connect", containerd.path(), "--then", "unix-path-connect",
                                        resolver.path(), "--payload", "GETHOSTBYNAME metadata.denied.example\n"};
  // Positive control: the same probe outside any sandbox reaches both.
  RunResult outside = lab().ProbeIn(lab().node_netns(), ask);
  auto ol = Lines(outside);
  ASSERT_EQ(ol.size(), 2u) << outside.Describe();
  ASSERT_EQ(ol[0]["reply"], "containerd") << outside.Describe();
  ASSERT_EQ(ol[1]["reply"], kImds4) << outside.Describe();
  ASSERT_EQ(containerd.accepts() + resolver.accepts(), 2u);
  for (const auto& mode : {kDefault, kHostRoot}) {
    std::vector<std::string> flags = mode;
    flags.insert(flags.end(), {"--floor", "airgapped"});
    auto l = Probe(flags, ask);
    ASSERT_EQ(l.size(), 2u) << last_.Describe();
    EXPECT_EQ(l[0]["errno"], "ENOENT") << last_.Describe();
    EXPECT_EQ(l[1]["errno"], "ENOENT") << "resolved a denied name via the node's resolver: " << last_.Describe();
  }
  EXPECT_EQ(containerd.accepts(), 1u) << "a sandbox reached " << containerd.path();
  EXPECT_EQ(resolver.accepts(), 1u) << "a sandbox reached " << resolver.path();
  // The node's real resolver sockets, where this machine has them.
  for (const std::string real : {"/run/nscd/socket", "/run/systemd/resolve/io.systemd.Resolve"}) {
    if (!Exists(real)) {
      std::cout << "[ info ] no " << real << " on this node\n";
      continue;
    }
    ProbeLine l = Only(RunFrom(work_, kDefault, {BinaryPath("egressd-probe"), "unix-path-connect", real}));
    EXPECT_EQ(l["errno"], "ENOENT") << last_.Describe();
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_F(RunContainment, DefaultSandboxHasNoPowerOverTheNodesIds) {
  // Root-owned files inside the working directory: today's DAC_OVERRIDE,
  // FOWNER and CHOWN would override them; SETUID would become any node user.
  const std::string secret = work_ + "/root-secret";
  { std::ofstream(secret) << "s"; }
  ASSERT_EQ(chmod(secret.c_str(), 0600), 0);
  auto out = Shell(kDefault,
                   "id -u; "
                   "(echo x > root-secret) 2>/dev/null && echo DAC_OVERRIDE; "
                   "chmod 4777 root-secret 2>/dev/null && echo FOWNER; "
                   "chown 1234 root-secret 2>/dev/null && echo CHOWN; "
                   "setpriv --reuid 1234 --regid 1234 --clear-groups touch as-1234 2>/dev/null && echo SETUID; "
                   "echo done");
  EXPECT_TRUE(Has(out, "done")) << last_.Describe();
  EXPECT_TRUE(Has(out, "0")) << "root of its own namespace: " << last_.Describe();
  EXPECT_FALSE(Has(out, "DAC_OVERRIDE")) << last_.Describe();
  EXPECT_FALSE(Has(out, "FOWNER")) << last_.Describe();
  EXPECT_FALSE(Has(out, "CHOWN")) << last_.Describe();
  EXPECT_FALSE(Has(out, "SETUID")) << last_.Describe();
  EXPECT_FALSE(Exists(work_ + "/as-1234"));
  EXPECT_EQ(ReadFile(secret), "s");
  struct stat st {};
  ASSERT_EQ(stat(secret.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST_F(RunContainment, DefaultSandboxRawSocketsFailAtSocket) {
  // Why the datapath tests run their hostile client with --host-root: here
  // CAP_NET_RAW belongs to the sandbox's own user namespace, and the node's
  // netns is not its to use raw sockets in.
  auto l = Probe(kDefault, {"raw-icmp", kPublicA4, "--then", "raw-udp", kPublicA4, "7000", "--then", "raw-icmp",
                            kPublicA6});
  ASSERT_EQ(l.size(), 3u) << last_.Describe();
  for (auto& line : l) {
    EXPECT_EQ(line["stage"], "socket") << last_.Describe();
    EXPECT_EQ(line["errno"], "EPERM") << last_.Describe();
    EXPECT_EQ(line.count("send_ret"), 0u) << last_.Describe();
  }
  std::cout << "[ info ] default egressctl run: raw socket() refused with " << l[0]["errno"]
            << "; with --host-root: ";
  ProbeLine host = Only(RunFrom(work_, kHostRoot, {BinaryPath("egressd-probe"), "raw-icmp", kPublicA4}));
  EXPECT_EQ(host["socket"], "created") << last_.Describe();
  EXPECT_TRUE(host.count("send_ret")) << last_.Describe();
  std::cout << "socket created, sendto returned " << host["send_ret"] << "\n";
}

TEST_F(RunContainment, HostRootStaysNodeRootWithNetRaw) {
  RunResult r = RunFrom(work_, kHostRoot, {"sh", "-c", "id -u; grep ^CapEff /proc/self/status"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  std::vector<std::string> out = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(out.size(), 2u) << r.Describe();
  EXPECT_EQ(out[0], "0");
  uint64_t eff = std::stoull(out[1].substr(out[1].find(':') + 1), nullptr, 16);
  EXPECT_TRUE(eff & (1ULL << 13)) << "CAP_NET_RAW";
  EXPECT_FALSE(eff & (1ULL << 21)) << "CAP_SYS_ADMIN";
  EXPECT_FALSE(eff & (1ULL << 12)) << "CAP_NET_ADMIN";
  // Still read-only outside its working directory.
  const std::string planted = scratch_ + "/planted";
  ProbeLine l = Only(RunFrom(work_, kHostRoot, {BinaryPath("egressd-probe"), "write-file", planted, "x", "--create"}));
  EXPECT_EQ(l["errno"], "EROFS") << last_.Describe();
  EXPECT_FALSE(Exists(planted));
}

TEST_F(RunContainment, PrivateTmpAndRunAreWritableAndStayPrivate) {
  const std::string tmp = "/tmp/egr-rc-" + lab().id(), run = "/run/egr-rc-" + lab().id() + "-marker";
  auto l = Probe(kDefault, {"write-file", tmp, "x", "--create", "--then", "write-file", run, "x", "--create",
                            "--then", "write-file", "/dev/shm/egr-rc-" + lab().id(), "x", "--create"});
  ASSERT_EQ(l.size(), 3u) << last_.Describe();
  for (auto& line : l) EXPECT_EQ(line["result"], "ok") << last_.Describe();
  EXPECT_FALSE(Exists(tmp)) << "the sandbox's /tmp is the node's";
  EXPECT_FALSE(Exists(run)) << "the sandbox's /run is the node's";
  EXPECT_FALSE(Exists("/dev/shm/egr-rc-" + lab().id())) << "the sandbox's /dev/shm is the node's";
}

TEST_F(RunContainment, WorkdirAndWritableFlags) {
  const std::string extra = scratch_ + "/extra", other = scratch_ + "/other";
  fs::create_directories(extra);
  fs::create_directories(other);
  ASSERT_EQ(chown(extra.c_str(), kNobody, kNobody), 0);
  ASSERT_EQ(chown(other.c_str(), kNobody, kNobody), 0);
  // --workdir replaces the current directory; --writable adds one.
  RunResult r = RunFrom("/", {"--workdir", other, "--writable", extra},
                        {BinaryPath("egressd-probe"), "write-file", other + "/a", "x", "--create", "--then",
                         "write-file", extra + "/b", "x", "--create", "--then", "write-file", work_ + "/c", "x",
                         "--create", "--then", "exec", "--", "pwd"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  auto l = Lines(r);
  ASSERT_EQ(l.size(), 3u) << r.Describe();
  EXPECT_EQ(l[0]["result"], "ok") << r.Describe();
  EXPECT_EQ(l[1]["result"], "ok") << r.Describe();
  EXPECT_EQ(l[2]["errno"], "EROFS") << "the current directory is not writable beside --workdir: " << r.Describe();
  EXPECT_TRUE(absl::StrContains(r.out, "\n" + other + "\n")) << "the command starts in --workdir: " << r.Describe();
  // Bad input names the value, exits 2, and runs nothing.
  const std::string marker = work_ + "/ran";
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--writable", "/"}, {"--writable", scratch_ + "/no-such-dir"},
        {"--writable", "relative/dir"}, {"--workdir", "/proc/sys"}, {"--writable", Shared().runtime_dir()},
        {"--host-root", "--user", "65534"}}) {
    r = RunFrom(work_, bad, {"touch", marker});
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(bad, " ") << ": " << r.Describe();
    EXPECT_TRUE(absl::StrContains(r.err, bad.back()) || absl::StrContains(r.err, bad.front())) << r.err;
    EXPECT_FALSE(Exists(marker)) << absl::StrJoin(bad, " ");
  }
}

}  // namespace
}  // namespace egressd::test
