#include "resolved_axis.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loops.h"
#include "maps/pinned_maps.h"
#include "maps/resolved_table.h"
#include "nft_resolved_set.h"
#include "tests/dns/dns_wire.h"
#include "userspace/dns/scope.h"
#include "userspace/policy/nft_render.h"

namespace egressd::bench {
namespace {

constexpr uint64_t kFillLifetimeS = 3600;

// The calling thread in another network namespace until destroyed: the
// incumbent's set is reached over netlink in the pod's own namespace.
class ScopedNetns {
 public:
  explicit ScopedNetns(const std::string& netns) {
    self_ = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    const int target = open(netns.c_str(), O_RDONLY | O_CLOEXEC);
    ok_ = self_ >= 0 && target >= 0 && setns(target, CLONE_NEWNET) == 0;
    if (target >= 0) close(target);
  }
  ~ScopedNetns() {
    if (ok_ && setns(self_, CLONE_NEWNET) != 0) std::perror("setns back");
    if (self_ >= 0) close(self_);
  }
  bool ok() const { return ok_; }

 private:
  int self_ = -1;
  bool ok_ = false;
};

// The i-th address of the fills, in 198.18.0.0/15 (RFC 2544's benchmarking
// range): held by the enforcers, never connected to.
net::IpAddr FillAddress(int i) {
  return net::IpAddr::V4({198, static_cast<uint8_t>(18 + i / 65536), static_cast<uint8_t>(i / 256 % 256),
                          static_cast<uint8_t>(i % 256)});
}
constexpr int kAddOneBase = 120'000;  // the "add one" addresses, after every fill

// The first A record of the answer to query `id` (rcode NOERROR), or false:
// the message read with the tests' libknot reader (tests/dns/dns_wire.h).
bool FirstA(const uint8_t* m, size_t n, uint16_t id, in_addr* out) {
  const dns::testing::Parsed p = dns::testing::Parse(dns::testing::Bytes(m, m + n));
  if (!p.ok || !p.qr || p.id != id || p.rcode != 0) return false;
  for (const auto& rr : p.records) {
    if (rr.section == 0 && rr.type == KNOT_RRTYPE_A) return inet_pton(AF_INET, rr.value.c_str(), out) == 1;
  }
  return false;
}

struct ResolveConnect {
  int answered = 0, connected = 0;
  double to_answer_s = 0, answer_to_connected_s = 0;
};

// In a child inside netns (and cgroup): asks `resolver` for qname over UDP,
// then connects at once to the address answered, port `port`.
ResolveConnect ResolveThenConnect(const std::string& netns, const std::string& cgroup, const char* resolver,
                                  const std::string& qname, uint16_t port) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const int ns = open(netns.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) _exit(3);
    if (!cgroup.empty()) std::ofstream(cgroup + "/cgroup.procs") << getpid();
    ResolveConnect r;
    const timeval tmo{2, 0};
    sockaddr_in rs{};
    rs.sin_family = AF_INET;
    rs.sin_port = htons(53);
    inet_pton(AF_INET, resolver, &rs.sin_addr);
    const int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    setsockopt(u, SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof(tmo));
    const uint16_t id = static_cast<uint16_t>(getpid());
    const dns::testing::Bytes q = dns::testing::MakeQuery(qname, {.id = id});
    uint8_t buf[1500];
    in_addr a{};
    const auto t0 = Clock::now();
    ssize_t n = sendto(u, q.data(), q.size(), 0, reinterpret_cast<const sockaddr*>(&rs), sizeof(rs)) ==
                        static_cast<ssize_t>(q.size())
                    ? recv(u, buf, sizeof(buf), 0)
                    : -1;
    const auto t1 = Clock::now();
    if (n > 0 && FirstA(buf, static_cast<size_t>(n), id, &a)) {
      r.answered = 1;
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_port = htons(port);
      sa.sin_addr = a;
      const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tmo, sizeof(tmo));  // bounds connect() too
      r.connected = connect(s, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) == 0;
      const auto t2 = Clock::now();
      const linger lg{1, 0};
      setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
      close(s);
      r.answer_to_connected_s = Seconds(t2 - t1);
    }
    r.to_answer_s = Seconds(t1 - t0);
    char line[128];
    const int len = std::snprintf(line, sizeof(line), "%d %d %.9f %.9f\n", r.answered, r.connected, r.to_answer_s,
                                  r.answer_to_connected_s);
    if (write(fds[1], line, len) != len) _exit(4);
    _exit(0);
  }
  close(fds[1]);
  char line[128] = {};
  const ssize_t got = pid > 0 ? read(fds[0], line, sizeof(line) - 1) : -1;
  close(fds[0]);
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  ResolveConnect r;
  if (got > 0) std::sscanf(line, "%d %d %lf %lf", &r.answered, &r.connected, &r.to_answer_s, &r.answer_to_connected_s);
  return r;
}

// One transaction adding `addrs` to the incumbent's set, in pod 1's netns.
absl::Status NftFill(const std::string& netns, NftResolvedSet& set, const std::vector<net::IpAddr>& addrs) {
  if (addrs.empty()) return absl::OkStatus();
  ScopedNetns in(netns);
  if (!in.ok()) return absl::InternalError("setns " + netns);
  std::vector<std::string> elems;
  elems.reserve(addrs.size());
  for (const auto& a : addrs) elems.push_back(absl::StrCat(a.ToString(), " timeout ", kFillLifetimeS, "s"));
  return set.Run(absl::StrCat("add element inet ", policy::kNftDefaultTable, " ", policy::kNftResolved4Set, " { ",
                              absl::StrJoin(elems, ", "), " }\n"));
}

}  // namespace

absl::Status FillResolvedBoth(test::Egressd& e, uint64_t sandbox, const std::string& scope,
                              const std::string& nft_netns, int n, json& out) {
  auto maps = maps::PinnedMaps::Open(e.pin_root());
  if (!maps.ok()) return maps.status();
  maps::ResolvedTable table(*maps);
  std::unique_ptr<NftResolvedSet> set;
  {
    ScopedNetns in(nft_netns);
    if (!in.ok()) return absl::InternalError("setns " + nft_netns);
    auto s = NftResolvedSet::Open(policy::kNftDefaultTable);
    if (!s.ok()) return absl::Status(s.status().code(), "incumbent's set: " + std::string(s.status().message()));
    set = std::move(*s);
  }
  const uint64_t expires = dns::BootTimeNs() + kFillLifetimeS * 1'000'000'000ull;
  const uint32_t name_id = dns::NameId(scope);
  std::vector<net::IpAddr> fill;
  fill.reserve(n);
  for (int i = 0; i < n; ++i) fill.push_back(FillAddress(i));
  const auto t0 = Clock::now();
  for (const auto& a : fill) {
    if (absl::Status s = table.Learn(sandbox, a, expires, name_id); !s.ok()) {
      return absl::Status(s.code(), "egressd's resolved map: " + std::string(s.message()));
    }
  }
  const auto t1 = Clock::now();
  if (absl::Status s = NftFill(nft_netns, *set, fill); !s.ok()) {
    return absl::Status(s.code(), "incumbent's fill: " + std::string(s.message()));
  }
  const auto t2 = Clock::now();
  out = {{"held", n}, {"scope", scope}, {"fill_s", {{"egressd", Seconds(t1 - t0)}, {"nftables", Seconds(t2 - t1)}}}};
  return absl::OkStatus();
}

json ResolvedAxis(test::Egressd& e, DnsLab& d, const std::vector<int>& sizes, bool quick, bool& all_ran) {
  json out;
  auto maps = maps::PinnedMaps::Open(e.pin_root());
  if (!maps.ok()) {
    out["error"] = maps.status().ToString();
    all_ran = false;
    return out;
  }
  maps::ResolvedTable table(*maps);
  std::unique_ptr<NftResolvedSet> set;
  {
    ScopedNetns in(d.netns(1));
    auto s = NftResolvedSet::Open(policy::kNftDefaultTable);
    if (!in.ok() || !s.ok()) {
      out["error"] = in.ok() ? s.status().ToString() : "setns " + d.netns(1);
      all_ran = false;
      return out;
    }
    set = std::move(*s);
  }
  const int rounds = quick ? 3 : 9, conns = quick ? 300 : 3000, add_reps = quick ? 5 : 50;
  const uint64_t expires = dns::BootTimeNs() + kFillLifetimeS * 1'000'000'000ull;
  const uint32_t name_id = dns::NameId(kBenchScope);
  const uint64_t sandbox = d.sandbox_id();
  auto fail = [&](json& cell, const std::string& why) {
    std::fprintf(stderr, "resolved axis: %s\n", why.c_str());
    cell["error"] = why;
    all_ran = false;
  };

  // The server's address first: every connect loop goes to it, allowed only
  // because it is resolved (the policy has names and no CIDR).
  const net::IpAddr server = *net::IpAddr::Parse(lab::kPublicA4);
  int held = 1, next_fill = 0, next_add = kAddOneBase, next_fresh = 0;
  if (absl::Status s = table.Learn(sandbox, server, expires, name_id); !s.ok()) {
    fail(out, s.ToString());
    return out;
  }
  if (absl::Status s = NftFill(d.netns(1), *set, {server}); !s.ok()) {
    fail(out, s.ToString());
    return out;
  }

  for (int n : sizes) {
    json& cell = out["sizes"][std::to_string(n)];
    // ---- fill to n: map writes one by one (as the proxy learns), one nft transaction ----
    std::vector<net::IpAddr> fill;
    for (; held < n; ++held) fill.push_back(FillAddress(next_fill++));
    const auto t0 = Clock::now();
    for (const auto& a : fill) {
      if (absl::Status s = table.Learn(sandbox, a, expires, name_id); !s.ok()) {
        fail(cell, s.ToString());
        break;
      }
    }
    const auto t1 = Clock::now();
    absl::Status nft = NftFill(d.netns(1), *set, fill);
    const auto t2 = Clock::now();
    if (!nft.ok()) fail(cell, "incumbent fill: " + std::string(nft.message()));
    cell["held"] = held;
    cell["fill_s"] = {{"egressd", Seconds(t1 - t0)}, {"nftables", Seconds(t2 - t1)}, {"added", fill.size()}};

    // ---- connect + accept + close to the resolved address ----
    Interleaved connect = Interleave(rounds, [&](int idx) {
      LoopResult lr = ConnectLoop(d.netns(idx), d.cgroup(idx), lab::kPublicA4, 80, conns);
      if (lr.ok != conns) std::fprintf(stderr, "resolved %d, %s: %d of %d connects failed\n", n, kEnforcers[idx],
                                       conns - lr.ok, conns);
      return Measured{lr.wall_s > 0 ? lr.ok / lr.wall_s : 0, lr.ok ? lr.cpu_s / lr.ok * 1e6 : 0, lr.ok == conns};
    });
    Store(connect, cell, "connect_per_s", "cpu_us_per_conn");

    // ---- DNS answer to connection allowed: a fresh name per round ----
    int call = 0;
    Interleaved rc = Interleave(rounds, [&](int idx) {
      const int fresh = (next_fresh + call++ / 3) % kFreshNames;
      ResolveConnect r = ResolveThenConnect(d.netns(idx), d.cgroup(idx), d.resolver(), FreshName(fresh), 80);
      if (!r.connected) std::fprintf(stderr, "resolved %d, %s: %s answered %d, connected %d\n", n, kEnforcers[idx],
                                     FreshName(fresh).c_str(), r.answered, r.connected);
      return Measured{(r.to_answer_s + r.answer_to_connected_s) * 1e3, r.answer_to_connected_s * 1e6,
                      r.answered && r.connected};
    });
    next_fresh += rounds;
    held += rounds;  // each enforcer learned one fresh address per round
    Store(rc, cell, "resolve_connect_ms", "answer_to_connected_us");

    // ---- adding one resolved address: one map write vs one nft transaction ----
    std::vector<double> add_map, add_nft;
    for (int k = 0; k < add_reps; ++k) {
      const net::IpAddr a = FillAddress(next_add++);
      const auto m0 = Clock::now();
      absl::Status s = table.Learn(sandbox, a, expires, name_id);
      add_map.push_back(Seconds(Clock::now() - m0) * 1e6);
      ScopedNetns in(d.netns(1));
      set->Add(a, kFillLifetimeS);
      const auto n0 = Clock::now();
      absl::Status c = set->Commit();
      add_nft.push_back(Seconds(Clock::now() - n0) * 1e6);
      if (!s.ok() || !c.ok()) {
        fail(cell, !s.ok() ? s.ToString() : c.ToString());
        break;
      }
    }
    held += add_reps;
    cell["add_one_us"] = {{"egressd", Summary(add_map, true)}, {"nftables", Summary(add_nft, true)}};
    all_ran = all_ran && connect.all_ok && rc.all_ok;
    std::fprintf(stderr, "enforcer_bench: %d resolved addresses done\n", n);
  }
  out["add_reps"] = add_reps;
  return out;
}

}  // namespace egressd::bench
