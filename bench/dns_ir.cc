// Instructions per query of the DNS proxy's hot path, reproducible on a noisy
// machine (bench/dns_ir.sh runs it under callgrind).  The real DnsProxy,
// Upstream (c-ares) and audit observer (audit::DnsAudit on a UserEventWriter,
// as the daemon wires them) on one Asio loop in this thread; the upstream is
// a dnsmasq the script starts; the client sends one query at a time from a
// plain socket, so every query takes the same path:
//   allowed: receive -> parse -> scope -> upstream -> book -> map write -> answer -> audit line
//   denied:  receive -> parse -> scope -> local NXDOMAIN -> answer -> audit line
// The map write goes to an in-memory sink (no BPF: the two syscalls of
// maps::ResolvedTable are kernel time, which callgrind does not count).
// Phases are separated with callgrind's client requests: stats are zeroed
// after a warm-up and dumped after each phase (the audit writer flushed
// first, so its thread's work for the phase is in the phase).  Without
// valgrind the requests do nothing and the wall-clock per query is printed.
//
//   egr-dns-ir --upstream 127.0.0.1:PORT [--queries N] [--no-audit]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include <boost/asio/io_context.hpp>
#include <valgrind/callgrind.h>

#include "userspace/audit/dns_events.h"
#include "userspace/audit/user_events.h"
#include "userspace/common/node.h"
#include "userspace/common/unique_fd.h"
#include "userspace/dns/proxy.h"
#include "userspace/dns/self_test.h"
#include "userspace/policy/floor.h"

namespace egressd {
namespace {

constexpr uint64_t kSandbox = 4242;

class CountingSink : public dns::LearnedAddressSink {
 public:
  absl::Status Learn(uint64_t, const net::IpAddr&, uint64_t, uint32_t) override {
    ++learned;
    return absl::OkStatus();
  }
  absl::Status Forget(uint64_t, const net::IpAddr&) override { return absl::OkStatus(); }
  absl::StatusOr<bool> InUse(uint64_t, const net::IpAddr&) const override { return false; }
  uint64_t learned = 0;
};

// A plain query for `name` (A, IN, RD), as a stub resolver sends it.
dns::Bytes Query(uint16_t id, const std::string& name) {
  dns::Bytes m = {static_cast<uint8_t>(id >> 8), static_cast<uint8_t>(id), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    m.push_back(static_cast<uint8_t>(dot - start));
    m.insert(m.end(), name.begin() + start, name.begin() + dot);
    start = dot + 1;
  }
  m.insert(m.end(), {0, 0, 1, 0, 1});
  return m;
}

struct Phase {
  const char* label;
  std::string name;
  uint8_t want_rcode;
};

int Fail(const std::string& what) {
  std::fprintf(stderr, "egr-dns-ir: %s\n", what.c_str());
  return 1;
}

int Main(int argc, char** argv) {
  std::string upstream_text;
  int queries = 2000;
  bool audit_on = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--upstream" && i + 1 < argc) {
      upstream_text = argv[++i];
    } else if (a == "--queries" && i + 1 < argc) {
      queries = std::atoi(argv[++i]);
    } else if (a == "--no-audit") {
      audit_on = false;
    } else {
      std::fprintf(stderr, "usage: egr-dns-ir --upstream IP:PORT [--queries N] [--no-audit] (got \"%s\")\n", a.c_str());
      return 2;
    }
  }
  auto server = dns::ParseUpstreamServer(upstream_text);
  if (!server.ok() || queries <= 0) {
    std::fprintf(stderr, "egr-dns-ir: --upstream IP:PORT and --queries N > 0 (got \"%s\", %d)\n",
                 upstream_text.c_str(), queries);
    return 2;
  }

  boost::asio::io_context io;
  dns::UpstreamOptions uo;
  uo.servers = {*server};
  auto upstream = dns::Upstream::Create(io, uo);
  if (!upstream.ok()) return Fail(upstream.status().ToString());

  char tmpl[] = "/tmp/egr-dns-ir-XXXXXX";
  if (!mkdtemp(tmpl)) return Fail("mkdtemp");
  const std::string dir = tmpl;
  Paths paths;
  paths.runtime_dir = dir;
  std::unique_ptr<audit::UserEventWriter> writer;
  std::unique_ptr<audit::DnsAudit> observer;
  if (audit_on) {
    auto w = audit::UserEventWriter::Open(paths, "dns-proxy");
    if (!w.ok()) return Fail(w.status().ToString());
    writer = std::move(*w);
    observer = std::make_unique<audit::DnsAudit>(*writer);
  }

  CountingSink sink;
  dns::ProxyOptions po;
  po.observer = observer.get();
  dns::DnsProxy proxy(io, **upstream, sink, po);
  policy::CompiledPolicy p;
  p.names = {policy::NameRule("allowed.bench.test")};
  p.wildcard_suffixes = {policy::NameRule("bench.test")};
  dns::SandboxScope scope;
  scope.sandbox_id = kSandbox;
  scope.names = dns::NameScope(p);
  scope.protected_cidrs = policy::FloorProtected(policy::Floor::kConnected);
  dns::Endpoint ep;
  ep.addr4 = net::IpAddr::V4({127, 0, 0, 1});
  absl::Status served = absl::UnknownError("no port");
  for (uint16_t port = 20000 + static_cast<uint16_t>(getpid() % 20000), tries = 0; tries < 50; ++port, ++tries) {
    ep.port = port;
    served = proxy.Serve(scope, ep);
    if (served.ok()) break;
  }
  if (!served.ok()) return Fail(served.ToString());

  UniqueFd client(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(ep.port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (client.get() < 0 || connect(client.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    return Fail(std::string("client socket: ") + std::strerror(errno));
  }

  uint16_t id = 1;
  // One query, answered: the loop runs until the answer is in the client's
  // socket (loopback delivers inside the proxy's send).
  auto ask = [&](const std::string& name, uint8_t want_rcode) -> bool {
    const dns::Bytes q = Query(id, name);
    if (send(client.get(), q.data(), q.size(), 0) != static_cast<ssize_t>(q.size())) return false;
    uint8_t buf[1232];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (;;) {
      ssize_t n = recv(client.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (n >= 12) {
        const uint16_t got = static_cast<uint16_t>((buf[0] << 8) | buf[1]);
        if (got != id) continue;  // a late answer to an earlier query
        ++id;
        if ((buf[3] & 0x0f) != want_rcode) {
          std::fprintf(stderr, "egr-dns-ir: %s: rcode %d, expected %d\n", name.c_str(), buf[3] & 0x0f, want_rcode);
          return false;
        }
        return true;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "egr-dns-ir: %s: no answer within 5 s\n", name.c_str());
        return false;
      }
      io.run_one_for(std::chrono::milliseconds(100));
    }
  };

  const Phase phases[] = {{"allowed", "allowed.bench.test", 0},
                          {"wildcard", "w.bench.test", 0},
                          {"denied", "denied.example", 3}};
  for (const Phase& ph : phases) {
    for (int i = 0; i < 200; ++i) {  // warm-up: sockets, caches, the book's entry
      if (!ask(ph.name, ph.want_rcode)) return 1;
    }
    if (writer) writer->Flush();
    CALLGRIND_ZERO_STATS;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < queries; ++i) {
      if (!ask(ph.name, ph.want_rcode)) return 1;
    }
    if (writer) writer->Flush();
    const auto t1 = std::chrono::steady_clock::now();
    CALLGRIND_DUMP_STATS_AT(ph.label);
    std::printf("%s %d queries %.1f us/query (wall clock, this machine's load included)\n", ph.label, queries,
                std::chrono::duration<double, std::micro>(t1 - t0).count() / queries);
  }
  std::printf("learned %llu, audit lines %llu\n", static_cast<unsigned long long>(sink.learned),
              static_cast<unsigned long long>(writer ? writer->written() : 0));
  writer.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}

}  // namespace
}  // namespace egressd

int main(int argc, char** argv) { return egressd::Main(argc, argv); }
