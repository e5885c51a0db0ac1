// The incumbent and egressd judge alike: for seeded random policies (CIDRs
// v4/v6, nested, grants with ports, each floor) and the probes where a rule
// could go wrong (both edges of every prefix and one address past each, v4,
// v6, v4-mapped and NAT64 spellings, the ports of every grant and one past
// each end), the hostile probe gets the same verdict under egressd (pod 0,
// `egressctl run`) as under `egressctl policy compile -o nft` loaded with
// `nft -f` in a second pod's netns.  Every probe address is put on the
// world's loopback and every probe port has a listener there that reports
// each accept, so an allowed connect is one that arrived at a lab host, and
// a denied one fails in connect() (egressd: EPERM; the ruleset's TCP reset:
// ECONNREFUSED) with nothing arriving.
//
// EGR_DIFF_SEED=N reruns one seed; the failure message prints the seed, the
// compiled policy and the start of the nft ruleset.
#include <arpa/inet.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "egressd_env.h"

namespace egressd::test {
namespace {

using U128 = unsigned __int128;

struct Addr {
  bool v4;
  U128 v;
  bool operator<(const Addr& o) const { return v4 != o.v4 ? v4 > o.v4 : v < o.v; }
};

Addr ParseAddr(const std::string& text) {
  uint8_t b[16] = {};
  if (inet_pton(AF_INET, text.c_str(), b) == 1) {
    return {true, (U128{b[0]} << 24) | (U128{b[1]} << 16) | (U128{b[2]} << 8) | b[3]};
  }
  EXPECT_EQ(inet_pton(AF_INET6, text.c_str(), b), 1) << text;
  U128 v = 0;
  for (uint8_t x : b) v = (v << 8) | x;
  return {false, v};
}

std::string Text(const Addr& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.v4) {
    const uint32_t be = htonl(static_cast<uint32_t>(a.v));
    inet_ntop(AF_INET, &be, buf, sizeof(buf));
  } else {
    uint8_t b[16];
    U128 v = a.v;
    for (int i = 15; i >= 0; --i, v >>= 8) b[i] = static_cast<uint8_t>(v);
    inet_ntop(AF_INET6, b, buf, sizeof(buf));
  }
  return buf;
}

struct Prefix {
  Addr base;
  int len;
  U128 Last() const {
    const int host = (base.v4 ? 32 : 128) - len;
    return base.v | (host == 128 ? ~U128{0} : (U128{1} << host) - 1);
  }
  std::string ToString() const { return Text(base) + "/" + std::to_string(len); }
};

Prefix ParsePrefix(const std::string& text) {
  const size_t slash = text.find('/');
  return {ParseAddr(text.substr(0, slash)), std::stoi(text.substr(slash + 1))};
}

// Addresses a probe must not use: unroutable or special in the kernel, or the
// lab's own links and pods (their routes are not the world's).
bool Usable(const Addr& a) {
  const char* v4_off[] = {"0.0.0.0/8",     "127.0.0.0/8",    "224.0.0.0/3",
                          "10.244.0.0/24", "203.0.113.0/30"};
  const char* v6_off[] = {"::/96",          "::ffff:0:0/96", "fe80::/10", "ff00::/8",
                          "fd00:244::/64", "2001:db8:ffff::/64"};
  for (const char* t : a.v4 ? std::vector<const char*>(std::begin(v4_off), std::end(v4_off))
                            : std::vector<const char*>(std::begin(v6_off), std::end(v6_off))) {
    const Prefix p = ParsePrefix(t);
    if (a.v >= p.base.v && a.v <= p.Last()) return false;
  }
  return true;
}

struct Generated {
  std::vector<std::string> flags;
  std::vector<Prefix> prefixes;            // allowed, as the probes see them
  std::vector<std::pair<int, int>> ports;  // grant port ranges
};

Prefix RandomPrefix(std::mt19937& rng, bool v4) {
  // v4 inside 198.18.0.0/15, v6 inside 2001:db8:100::/40: lab-only space, no
  // floor protects it, so every policy compiles.
  const Prefix area = ParsePrefix(v4 ? "198.18.0.0/15" : "2001:db8:100::/40");
  const int bits = v4 ? 32 : 128;
  const int len = area.len + 1 + static_cast<int>(rng() % (bits - area.len));
  U128 r = (U128{rng()} << 96) | (U128{rng()} << 64) | (U128{rng()} << 32) | rng();
  const U128 host_mask = area.Last() ^ area.base.v;
  U128 v = area.base.v | (r & host_mask);
  const int host = bits - len;
  if (host > 0) v &= ~((host == 128 ? ~U128{0} : (U128{1} << host) - 1));
  return {{v4, v}, len};
}

Generated Generate(std::mt19937& rng, int round) {
  Generated g;
  const char* floors[] = {"connected", "airgapped", "hosted"};
  g.flags = {"--floor", floors[round % 3], "--on-deny", "reject"};
  // Round 3 declares no --egress: the connected floor's default allow.
  const int n_cidrs = round == 3 ? 0 : 4 + static_cast<int>(rng() % 5);
  for (int i = 0; i < n_cidrs; ++i) {
    Prefix p = RandomPrefix(rng, rng() % 2);
    // Half of them nested in an earlier one, so entries overlap.
    if (i > 0 && rng() % 2) {
      const Prefix& outer = g.prefixes[rng() % g.prefixes.size()];
      const int bits = outer.base.v4 ? 32 : 128;
      if (outer.len < bits) {
        const int len = outer.len + 1 + static_cast<int>(rng() % (bits - outer.len));
        const U128 inner = outer.base.v | ((U128{rng()} << 32 | rng()) & (outer.Last() ^ outer.base.v));
        const int host = bits - len;
        p = {{outer.base.v4, host ? inner & ~((U128{1} << host) - 1) : inner}, len};
      }
    }
    g.prefixes.push_back(p);
    g.flags.insert(g.flags.end(), {"--egress", p.ToString()});
  }
  // Grants: a host (often inside an allowed prefix) with ports.
  for (int i = 0; i < 3; ++i) {
    Addr host = RandomPrefix(rng, rng() % 2).base;
    if (!g.prefixes.empty() && rng() % 2) {
      const Prefix& in = g.prefixes[rng() % g.prefixes.size()];
      host = {in.base.v4, in.base.v | (rng() & static_cast<uint32_t>(in.Last() ^ in.base.v))};
    }
    const int first = i == 0 ? 80 : 1000 + static_cast<int>(rng() % 9000);
    const int last = i == 2 ? first + static_cast<int>(rng() % 50) : first;
    g.ports.push_back({first, last});
    const std::string ports = first == last ? std::to_string(first)
                                            : std::to_string(first) + "-" + std::to_string(last);
    const std::string addr = host.v4 ? Text(host) : "[" + Text(host) + "]";
    g.flags.insert(g.flags.end(), {"--grant", addr + ":" + ports});
    g.prefixes.push_back({host, host.v4 ? 32 : 128});
  }
  return g;
}

std::vector<std::string> Protected(const std::string& compiled_text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = compiled_text.find("\nprotected ", pos)) != std::string::npos) {
    pos += 11;
    out.push_back(compiled_text.substr(pos, compiled_text.find(' ', pos) - pos));
  }
  return out;
}

struct Probe {
  std::string op;  // "tcp" or "mapped6"
  std::string dst;
  int port;
  std::string Describe() const { return op + " " + dst + " " + std::to_string(port); }
};

// What the probe saw: "allow" once connect() succeeded, "deny" for a refusal
// in connect(), anything else named (a bug in the lab or in an enforcer).
std::string Verdict(const lab::ProbeLine& l) {
  const auto stage = l.find("stage");
  if (Ok(l) || (stage != l.end() && stage->second != "connect")) return "allow";
  const std::string e = Errno(l);
  if (e == "EPERM" || e == "ECONNREFUSED") return "deny";
  return "other:" + e;
}

// A listener on the world's loopback for every port the lab's servers do not
// serve: accepts, echoes one read, closes, and prints "DST PORT" per accept.
constexpr const char* kListener = R"(
import select, socket, sys
socks = []
for port in sys.argv[1:]:
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", int(port)))
    s.listen(512)
    socks.append(s)
print("ready", flush=True)
while True:
    for s in select.select(socks, [], [])[0]:
        c, _ = s.accept()
        dst, port = c.getsockname()[:2]
        if dst.startswith("::ffff:"):
            dst = dst[7:]
        print(dst, port, flush=True)
        c.settimeout(1)
        try:
            c.sendall(c.recv(64))
        except OSError:
            pass
        c.close()
)";

// egressd-probe lines for `probes`, in chunks so no run outlives its timeout.
std::vector<lab::ProbeLine> RunProbes(const std::vector<Probe>& probes,
                                      const std::function<lab::RunResult(std::vector<std::string>)>& run) {
  std::vector<lab::ProbeLine> out;
  for (size_t at = 0; at < probes.size(); at += 200) {
    std::vector<std::string> argv = {"batch"};
    for (size_t i = at; i < std::min(probes.size(), at + 200); ++i) {
      argv.push_back(probes[i].op + " " + probes[i].dst + " " + std::to_string(probes[i].port) +
                     " --timeout-ms 1500");
    }
    lab::RunResult r = run(argv);
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    auto lines = Lines(r);
    out.insert(out.end(), lines.begin(), lines.end());
  }
  return out;
}

TEST(Differential, EgressdAndTheNftablesRenderingGiveTheSameVerdicts) {
  EGR_REQUIRE_PRIVILEGES();
  if (std::system("command -v nft >/dev/null 2>&1") != 0) {
    if (BpfRequired()) FAIL() << "nft is not installed (scripts/install-deps.sh)";
    GTEST_SKIP() << "nft is not installed";
  }
  Egressd& e = Shared();
  auto nft_pod = e.lab().AddPod();
  ASSERT_TRUE(nft_pod.ok()) << nft_pod.status();
  const std::string nft_netns = (*nft_pod)->netns;
  const char* seed_env = std::getenv("EGR_DIFF_SEED");
  const unsigned seed = seed_env ? static_cast<unsigned>(std::stoul(seed_env)) : 20261201u;
  std::mt19937 rng(seed);
  std::map<std::string, int> totals;
  std::set<std::string> on_world;

  for (int round = 0; round < 4; ++round) {
    const Generated g = Generate(rng, round);
    std::vector<std::string> text_args = {"policy", "compile"};
    text_args.insert(text_args.end(), g.flags.begin(), g.flags.end());
    lab::RunResult text = e.Ctl(text_args);
    ASSERT_EQ(text.exit_code, 0) << text.Describe();
    std::vector<std::string> nft_args = text_args;
    nft_args.insert(nft_args.begin() + 2, {"-o", "nft"});
    lab::RunResult rules = e.Ctl(nft_args);
    ASSERT_EQ(rules.exit_code, 0) << rules.Describe();
    const std::string context = "seed " + std::to_string(seed) + " round " + std::to_string(round) +
                                "\n" + text.out + "\n" + rules.out.substr(0, 4000);
    lab::RunSpec load;
    load.argv = {"nft", "-f", "-"};
    load.netns = nft_netns;
    load.stdin_data = rules.out;
    lab::RunResult loaded = lab::Run(load);
    ASSERT_EQ(loaded.exit_code, 0) << loaded.Describe() << "\n" << context;

    // Probe addresses: both ends of every prefix and one past each.
    std::vector<Prefix> prefixes = g.prefixes;
    for (const std::string& p : Protected(text.out)) prefixes.push_back(ParsePrefix(p));
    std::set<Addr> addrs;
    const U128 nat64 = ParsePrefix("64:ff9b::/96").base.v;
    for (const Prefix& p : prefixes) {
      const U128 max = p.base.v4 ? 0xffffffffu : ~U128{0};
      std::vector<U128> edges = {p.base.v, p.Last()};
      if (p.base.v > 0) edges.push_back(p.base.v - 1);
      if (p.Last() < max) edges.push_back(p.Last() + 1);
      for (U128 v : edges) {
        addrs.insert({p.base.v4, v});
        // The NAT64 spelling of an IPv4 edge (judged against protected v4).
        if (p.base.v4) addrs.insert({false, nat64 | v});
      }
    }
    std::set<int> ports = {80, 443};
    for (auto [first, last] : g.ports) {
      for (int p : {first - 1, first, last, last + 1}) ports.insert(p);
    }
    std::vector<Probe> probes;
    std::string world_batch;
    for (const Addr& a : addrs) {
      if (!Usable(a)) continue;
      const std::string t = Text(a);
      if (on_world.insert(t).second) {
        world_batch += "address replace " + t + (a.v4 ? "/32" : "/128 nodad") + " dev lo\n";
      }
      for (int port : ports) {
        probes.push_back({"tcp", t, port});
        // v4-mapped: the same address through an AF_INET6 socket.
        if (a.v4) probes.push_back({"mapped6", t, port});
      }
    }
    if (!world_batch.empty()) {
      lab::RunSpec add;
      add.argv = {"ip", "-batch", "-"};
      add.netns = e.lab().world_netns();
      add.stdin_data = world_batch;
      lab::RunResult added = lab::Run(add);
      ASSERT_EQ(added.exit_code, 0) << added.Describe();
    }

    lab::RunSpec listen;
    listen.argv = {"python3", "-c", kListener};
    for (int port : ports) {
      if (port != 80 && port != 443 && port != 8080) listen.argv.push_back(std::to_string(port));
    }
    listen.netns = e.lab().world_netns();
    auto listener = lab::Start(listen);
    ASSERT_TRUE(listener.ok()) << listener.status();
    ASSERT_EQ(listener->ReadOutLine(std::chrono::seconds(10)), "ready") << listener->err();

    // What arrived at the world for one side's run: "DST PORT" -> accepts.
    auto arrivals = [&](const std::vector<lab::ProbeLine>& lines) {
      std::map<std::string, int> got;
      int expected = 0;
      for (const auto& l : lines) expected += Verdict(l) == "allow";
      int seen = 0;
      for (size_t i = 0; i < probes.size(); ++i) {
        const int p = probes[i].port;
        if (p == 80 || p == 443 || p == 8080) {
          const std::string key = probes[i].dst + " " + std::to_string(p);
          if (!got.count(key)) {
            got[key] = static_cast<int>(e.lab().TcpAccepts(probes[i].dst, p));
            seen += got[key];
          }
        }
      }
      while (seen < expected) {
        auto line = listener->ReadOutLine(std::chrono::seconds(3));
        if (!line) break;
        ++got[*line];
        ++seen;
      }
      return got;
    };
    auto judge = [&](const std::vector<lab::ProbeLine>& lines, const char* side) {
      EXPECT_EQ(lines.size(), probes.size())
          << side << ": no answer from "
          << (lines.size() < probes.size() ? probes[lines.size()].Describe() : "") << " on\n" << context;
      const auto got = arrivals(lines);
      std::map<std::string, int> want;
      for (size_t i = 0; i < std::min(lines.size(), probes.size()); ++i) {
        if (Verdict(lines[i]) == "allow") ++want[probes[i].dst + " " + std::to_string(probes[i].port)];
      }
      std::map<std::string, int> got_nonzero;
      for (const auto& [k, n] : got) {
        if (n) got_nonzero[k] = n;
      }
      EXPECT_EQ(got_nonzero, want) << side << ": what arrived at the world differs from what the probe saw";
    };

    e.lab().ResetCounters();
    const auto egressd_lines = RunProbes(probes, [&](std::vector<std::string> argv) {
      return e.RunSandboxed(g.flags, argv);
    });
    judge(egressd_lines, "egressd");
    e.lab().ResetCounters();
    const auto nft_lines = RunProbes(probes, [&](std::vector<std::string> argv) {
      argv.insert(argv.begin(), lab::BinaryPath("egressd-probe"));
      lab::RunSpec spec;
      spec.argv = std::move(argv);
      spec.netns = nft_netns;
      spec.hostile = true;
      spec.timeout = std::chrono::seconds(60);
      return lab::Run(spec);
    });
    judge(nft_lines, "nftables");
    ASSERT_EQ(egressd_lines.size(), probes.size()) << context;
    ASSERT_EQ(nft_lines.size(), probes.size()) << context;
    int mismatches = 0;
    for (size_t i = 0; i < probes.size(); ++i) {
      const std::string ve = Verdict(egressd_lines[i]), vn = Verdict(nft_lines[i]);
      ++totals["egressd " + ve];
      ++totals["nft " + vn];
      EXPECT_EQ(ve.rfind("other", 0), std::string::npos) << probes[i].Describe() << ": egressd " << ve;
      EXPECT_EQ(vn.rfind("other", 0), std::string::npos) << probes[i].Describe() << ": nft " << vn;
      if (ve != vn && ++mismatches <= 20) {
        ADD_FAILURE() << probes[i].Describe() << ": egressd " << ve << ", nftables " << vn << "\n"
                      << (mismatches == 1 ? context : "");
      }
    }
    EXPECT_EQ(mismatches, 0) << "of " << probes.size() << " probes, " << context.substr(0, 200);
  }
  // Both verdicts occurred on both sides: a run where everything is allowed
  // (or denied) would agree without proving anything.
  EXPECT_GT(totals["egressd allow"], 100) << testing::PrintToString(totals);
  EXPECT_GT(totals["egressd deny"], 100) << testing::PrintToString(totals);
  EXPECT_EQ(totals["egressd allow"], totals["nft allow"]) << testing::PrintToString(totals);
  std::printf("differential: seed %u, verdicts %s\n", seed, testing::PrintToString(totals).c_str());
}

}  // namespace
}  // namespace egressd::test
