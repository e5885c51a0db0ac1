// explain judges as the kernel does: every policy conformance vector that
// compiles (tests/unit/policy_conformance_vectors.inc) is registered on a
// lab cgroup, addresses are learned for it (inside protected ranges, just
// outside allowed prefixes, and one expired), and at every probe (both edges
// of every protected and allowed prefix and one address past each, their
// NAT64 and v4-mapped spellings, loopback, the learned addresses; ports 53,
// 80, 443, the ends of the port space and both sides of every allowed range;
// TCP and UDP) policy::Explain's verdict equals what connect() got from the
// programs in force.  The probing child joins the cgroup and a network
// namespace of its own with no routes, so a connect() the programs let
// through fails in routing (ENETUNREACH) or reaches nothing, and only the
// programs say EPERM.  The deny action is set to reject for the kernel and
// explain alike, so each denial is visible in connect().
#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <set>

#include "egressd_env.h"
#include "maps/pinned_maps.h"
#include "maps/resolved_table.h"
#include "explain_psl_text.h"  // generated: EGR_TESTDATA_PSL_TEXT
#include "tests/unit/policy_conformance_vectors.h"
#include "userspace/common/node.h"
#include "userspace/control/registry.h"
#include "userspace/dns/scope.h"
#include "userspace/policy/explain.h"

namespace egressd::test {
namespace {

using policy::CompiledPolicy;
using policy::Explain;
using policy::ExplainQuery;

struct Probe {
  net::IpAddr addr;
  uint16_t port;
  policy::Proto proto;
  bool mapped6;  // an IPv4 address through an AF_INET6 socket as ::ffff:a.b.c.d
  std::string Describe() const {
    return absl::StrCat(mapped6 ? "mapped6 " : "", std::string(policy::kProtoNames.Name(proto)), " ", addr.ToString(), " ", port);
  }
};

// One past either end of a prefix, or its ends (nullopt past the address space).
std::optional<net::IpAddr> Step(const net::Cidr& c, bool end, int step) {
  std::array<uint8_t, 16> b = c.addr().bytes();
  const int bits = c.addr().bits();
  if (end) {
    for (int bit = c.prefix_len(); bit < bits; ++bit) b[bit / 8] |= static_cast<uint8_t>(0x80 >> (bit % 8));
  }
  for (int i = bits / 8 - 1; step != 0 && i >= 0; --i) {
    const int v = b[i] + step;
    b[i] = static_cast<uint8_t>(v & 0xff);
    if (v >= 0 && v <= 0xff) step = 0;
  }
  if (step != 0) return std::nullopt;
  return c.addr().is_v4() ? net::IpAddr::V4({b[0], b[1], b[2], b[3]}) : net::IpAddr::V6(b);
}

net::IpAddr Nat64(const net::IpAddr& v4) {
  std::array<uint8_t, 16> b = {0x00, 0x64, 0xff, 0x9b};
  std::copy(v4.bytes().begin(), v4.bytes().begin() + 4, b.begin() + 12);
  return net::IpAddr::V6(b);
}

std::vector<Probe> Probes(const CompiledPolicy& p, const std::vector<policy::LearnedAddress>& learned) {
  std::vector<net::Cidr> prefixes;
  for (const auto& c : p.protected_cidrs) prefixes.push_back(c.cidr);
  for (const auto& a : p.allowed) prefixes.push_back(a.cidr);
  std::set<net::IpAddr> addrs = {*net::IpAddr::Parse("127.0.0.1"), *net::IpAddr::Parse("::1"),
                                 *net::IpAddr::Parse("198.51.100.99")};
  for (const auto& l : learned) addrs.insert(l.addr);
  for (const net::Cidr& c : prefixes) {
    for (bool end : {false, true}) {
      for (int step : {-1, 0, 1}) {
        auto a = Step(c, end, step);
        if (!a) continue;
        addrs.insert(*a);
        if (a->is_v4()) addrs.insert(Nat64(*a));
      }
    }
  }
  std::set<uint16_t> ports = {1, 53, 80, 443, 65535};
  for (const auto& a : p.allowed) {
    for (const auto& r : a.ports) {
      for (int port : {r.first - 1, int{r.first}, int{r.last}, r.last + 1}) {
        if (port > 0 && port <= 65535) ports.insert(static_cast<uint16_t>(port));
      }
    }
  }
  std::vector<Probe> out;
  for (const net::IpAddr& a : addrs) {
    // Multicast and broadcast mean other things to connect() than a destination.
    if (a.is_v4() && (a.bytes()[0] >= 224)) continue;
    if (!a.is_v4() && a.bytes()[0] == 0xff) continue;
    for (uint16_t port : ports) {
      for (policy::Proto proto : {policy::Proto::kTcp, policy::Proto::kUdp}) {
        out.push_back({a, port, proto, false});
        if (a.is_v4() && proto == policy::Proto::kTcp) out.push_back({a, port, proto, true});
      }
    }
  }
  return out;
}

// What connect() got for each probe, from a child in `cgroup` and a fresh
// netns: 0 it went through the programs, EPERM they refused, else the errno
// (a result no enforcer gives, named in the failure).
std::vector<int> KernelResults(const std::string& cgroup, const std::vector<Probe>& probes) {
  const size_t bytes = std::max<size_t>(1, probes.size()) * sizeof(int);
  void* shared = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    ADD_FAILURE() << "mmap: " << std::strerror(errno);
    return {};
  }
  int* results = static_cast<int*>(shared);
  const pid_t child = fork();
  if (child == 0) {
    const int procs = open((cgroup + "/cgroup.procs").c_str(), O_WRONLY);
    if (procs < 0 || write(procs, "0", 1) != 1) _exit(3);
    close(procs);
    if (unshare(CLONE_NEWNET) != 0) _exit(4);
    for (size_t i = 0; i < probes.size(); ++i) {
      const Probe& p = probes[i];
      const int type = p.proto == policy::Proto::kTcp ? SOCK_STREAM : SOCK_DGRAM;
      sockaddr_storage ss{};
      socklen_t len;
      int family;
      if (p.addr.is_v4() && !p.mapped6) {
        auto* in = reinterpret_cast<sockaddr_in*>(&ss);
        in->sin_family = family = AF_INET;
        in->sin_port = htons(p.port);
        std::memcpy(&in->sin_addr, p.addr.bytes().data(), 4);
        len = sizeof(*in);
      } else {
        auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
        in6->sin6_family = family = AF_INET6;
        in6->sin6_port = htons(p.port);
        const auto b = p.addr.ToMapped16();
        std::memcpy(&in6->sin6_addr, p.addr.is_v4() ? b.data() : p.addr.bytes().data(), 16);
        len = sizeof(*in6);
      }
      const int fd = socket(family, type | SOCK_NONBLOCK, 0);
      if (fd < 0) _exit(5);
      results[i] = connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0 ? 0 : errno;
      close(fd);
    }
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  std::vector<int> out;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    ADD_FAILURE() << "the probing child failed: status " << status;
  } else {
    out.assign(results, results + probes.size());
  }
  munmap(shared, bytes);
  return out;
}

TEST(ExplainDifferential, EveryPolicyVectorIsJudgedByExplainAsByTheKernel) {
  EGR_REQUIRE_PRIVILEGES();
  Egressd& e = Shared();
  auto cg = e.lab().MakeCgroup("explain-diff");
  ASSERT_TRUE(cg.ok()) << cg.status();
  auto cg_id = CgroupIdOf(*cg);
  ASSERT_TRUE(cg_id.ok()) << cg_id.status();
  Paths paths;
  paths.pin_root = e.pin_root();
  paths.runtime_dir = e.runtime_dir();
  control::Registry registry(paths);
  auto maps = maps::PinnedMaps::Open(e.pin_root());
  ASSERT_TRUE(maps.ok()) << maps.status();
  maps::ResolvedTable resolved(*maps);

  const auto t0 = std::chrono::steady_clock::now();
  std::map<std::string, int> totals;
  int vectors = 0, mismatches = 0;
  for (const policy::conformance::Vector& v : policy::conformance::kVectors) {
    auto compiled = policy::conformance::CompileVector(v);
    if (!compiled.ok()) continue;  // an error vector: nothing to judge
    ++vectors;
    CompiledPolicy p = *compiled;
    p.deny_action = policy::DenyAction::kReject;
    ASSERT_TRUE(registry.Register(*cg_id, p).ok()) << v.rule;

    // Learned: the first address of every protected range (must stay
    // denied), one past the last address of every allowed prefix (allowed
    // only by the answer), and an expired one.
    std::vector<policy::LearnedAddress> learned;
    const std::string rule = p.names.empty() ? "learned.example" : p.names[0].name;
    for (const auto& c : p.protected_cidrs) learned.push_back({c.cidr.addr(), {rule}, 600000});
    for (const auto& a : p.allowed) {
      if (auto past = Step(a.cidr, true, 1)) learned.push_back({*past, {rule}, 600000});
    }
    learned.push_back({*net::IpAddr::Parse("198.51.100.77"), {rule}, 0});
    const uint64_t now = maps::BootClockNs();
    for (const auto& l : learned) {
      const uint64_t expires = l.expires_in_ms > 0 ? now + uint64_t(l.expires_in_ms) * 1'000'000 : now - 1;
      ASSERT_TRUE(resolved.Learn(*cg_id, l.addr, expires, dns::NameId(rule)).ok()) << l.addr.ToString();
    }

    const std::vector<Probe> probes = Probes(p, learned);
    const std::vector<int> got = KernelResults(*cg, probes);
    ASSERT_EQ(got.size(), probes.size()) << v.rule;
    for (size_t i = 0; i < probes.size(); ++i) {
      ExplainQuery q;
      q.dest = probes[i].addr;
      q.port = probes[i].port;
      q.proto = probes[i].proto;
      q.own_netns = true;  // the child's netns is not the node's
      q.learned = learned;
      const policy::Explanation x = Explain(p, q);
      const int err = got[i];
      const bool kernel_allows = err != EPERM;
      ++totals[absl::StrCat(x.allowed ? "allow " : "deny ", std::string(policy::kExplainStepNames.Name(x.step)))];
      if (err != 0 && err != EPERM && err != ENETUNREACH && err != EINPROGRESS && err != ECONNREFUSED &&
          err != EADDRNOTAVAIL /* ::1 with lo down */) {
        ADD_FAILURE() << v.rule << ": " << probes[i].Describe() << ": connect() said " << std::strerror(err);
      }
      if (x.allowed != kernel_allows && ++mismatches <= 20) {
        ADD_FAILURE() << v.rule << ": " << probes[i].Describe() << ": explain says "
                      << (x.allowed ? "allow" : "deny") << " (" << x.ToText() << "), the kernel "
                      << (kernel_allows ? "let it through" : "said EPERM") << "\n" << p.ToText();
      }
    }
    ASSERT_TRUE(resolved.RemoveSandbox(*cg_id).ok());
  }
  ASSERT_TRUE(registry.Unregister(*cg_id).ok());
  EXPECT_EQ(mismatches, 0);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Every step decided somewhere, each both ways where it can.
  for (const char* want : {"deny dns_refused", "allow own_loopback", "deny protected", "allow allowed",
                           "allow resolved", "allow default", "deny default"}) {
    EXPECT_GT(totals[want], 0) << want << " never decided: " << testing::PrintToString(totals);
  }
  EXPECT_GT(vectors, 20);
  std::printf("explain differential: %d vectors, %s, %.1f s\n", vectors, testing::PrintToString(totals).c_str(), s);
}

}  // namespace
}  // namespace egressd::test
