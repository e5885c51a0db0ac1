// egr-nft-forwarder: the incumbent's DNS half, as the seeds' sidecar does it:
// a forwarder in the sandbox pod's own network namespace, reached through an
// nft redirect of port 53, that answers a name outside the pod's scope with
// NXDOMAIN and, for an allowed name, adds every address of the answer to the
// pod's nft timeout set in ONE transaction before it releases the answer.
// Its own upstream queries carry a socket mark that the pod's ruleset
// accepts and its redirect skips (the seeds' exemption, and the reason they
// drop NET_RAW: with it a sandbox could set the mark itself).
//
// It is an honest incumbent, not a strawman: the same message handling as
// egressd's proxy (userspace/dns: the scope, the denial, the CNAME chain, the
// protected ranges, the upstream query built from the question), the same
// lifetimes, c-ares upstream, libnftables in process (no fork/exec per
// answer), UDP and TCP.  Only the place it runs and the way it allows an
// address differ, which is what the benchmark compares.
//
//   egr-nft-forwarder --port P --upstream IP[:PORT] --mark M [--table T]
//                     [--policy task.yaml] --egress TARGET...
// Prints "ready" once its sockets listen on 127.0.0.1:P and [::1]:P; on
// SIGUSR1 the answer-to-set times since the last SIGUSR1 (one JSON line); on
// SIGTERM prints its counters (one JSON line, with its transactions'
// durations) and exits 0.  Bad flags: exit 2.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/write.hpp>

#include "absl/strings/numbers.h"
#include "nft_resolved_set.h"
#include "userspace/dns/denial.h"
#include "userspace/dns/query_flow.h"
#include "userspace/dns/upstream.h"
#include "userspace/policy/nft_render.h"
#include "userspace/policy/policy_inputs.h"

namespace egressd::bench {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using asio::ip::udp;

struct Options {
  uint16_t port = 0;
  uint32_t mark = 0;
  std::string table = policy::kNftDefaultTable;
  std::string upstream, policy_file;
  std::vector<std::string> egress;
};

class Forwarder {
 public:
  Forwarder(asio::io_context& io, dns::SandboxScope scope, dns::Upstream& up, NftResolvedSet& set)
      : io_(io), scope_(std::move(scope)), up_(up), sink_(set) {}

  // Decides `wire`; `reply` gets the answer once it may be released.
  void Handle(std::vector<uint8_t> wire, bool tcp, std::function<void(dns::Bytes)> reply) {
    auto d = std::make_shared<dns::Decision>(dns::Decide(scope_, wire, counters_));
    if (d->kind == dns::Decision::kDrop) return;
    if (d->kind == dns::Decision::kRespond) {
      reply(std::move(d->response));
      return;
    }
    const size_t limit = tcp ? dns::kMaxMessage : dns::UdpLimit(d->query);
    up_.Send(d->upstream_query, tcp, [this, d, limit, reply = std::move(reply)](absl::StatusOr<dns::Bytes> answer) {
      const auto answered = std::chrono::steady_clock::now();
      dns::Bytes out = dns::Finish(scope_, *d, answer, limit, sink_, lifetime_, dns::BootTimeNs(), counters_);
      // The answer's one transaction; nothing is released before it returns.
      const bool any = sink_.pending() > 0;
      const auto t0 = std::chrono::steady_clock::now();
      absl::Status s = sink_.Commit();
      if (any) {
        const auto t1 = std::chrono::steady_clock::now();
        Timed(t1 - t0);
        if (s.ok()) answer_to_set_us_.push_back(std::chrono::duration<double, std::micro>(t1 - answered).count());
      }
      if (!s.ok()) {
        ++commit_failed_;
        std::fprintf(stderr, "egr-nft-forwarder: %s: %s\n", d->query.qname.c_str(), s.ToString().c_str());
        out = dns::BuildServFail(d->query, dns::kEdeOther, "nft: could not allow the answer's addresses");
      } else {
        ++commits_;
      }
      reply(std::move(out));
    });
  }

  void ServeUdp(udp::socket& s) {
    s.async_receive_from(asio::buffer(buf_), from_, [this, &s](const boost::system::error_code& ec, size_t n) {
      if (ec) return;
      udp::endpoint client = from_;
      Handle(std::vector<uint8_t>(buf_.begin(), buf_.begin() + n), false, [&s, client](dns::Bytes out) {
        boost::system::error_code ignored;
        s.send_to(asio::buffer(out), client, 0, ignored);
      });
      ServeUdp(s);
    });
  }

  void Accept(tcp::acceptor& a) {
    a.async_accept([this, &a](const boost::system::error_code& ec, tcp::socket sock) {
      if (!ec) std::make_shared<Conn>(*this, std::move(sock))->Read();
      Accept(a);
    });
  }

  // On SIGUSR1: one line of JSON with the answer-to-set times (from the
  // upstream's answer in hand, c-ares' callback, to its transaction
  // returned) since the last such line, the same span egressd's audit record
  // calls learn_latency_ns (bench/dns_speed.cc reads both).
  void PrintAnswerToSet() {
    std::string line = "{\"answer_to_set_us\": [";
    for (size_t i = 0; i < answer_to_set_us_.size(); ++i) {
      line += (i ? ", " : "") + std::to_string(answer_to_set_us_[i]);
    }
    line += "]}";
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    answer_to_set_us_.clear();
  }

  // One line of JSON for whoever stopped it (the benchmark records it).
  void PrintCounters() const {
    std::printf("{\"queries\": %llu, \"denied\": %llu, \"forwarded\": %llu, \"learned\": %llu, \"commits\": %llu, "
                "\"commit_failed\": %llu, \"servfail\": %llu, \"commit_s_total\": %.6f, \"commit_s_max\": %.6f, "
                "\"commits_over_10ms\": %llu, \"commits_over_100ms\": %llu, \"commits_over_1s\": %llu}\n",
                static_cast<unsigned long long>(counters_.queries.load()),
                static_cast<unsigned long long>(counters_.denied.load()),
                static_cast<unsigned long long>(counters_.forwarded.load()),
                static_cast<unsigned long long>(counters_.learned.load()),
                static_cast<unsigned long long>(commits_), static_cast<unsigned long long>(commit_failed_),
                static_cast<unsigned long long>(counters_.servfail.load()), commit_total_s_, commit_max_s_,
                static_cast<unsigned long long>(over_[0]), static_cast<unsigned long long>(over_[1]),
                static_cast<unsigned long long>(over_[2]));
    std::fflush(stdout);
  }

 private:
  // One TCP connection: length-prefixed queries, answered in the order their
  // answers are ready (pipelined, as RFC 7766 allows).
  struct Conn : std::enable_shared_from_this<Conn> {
    Conn(Forwarder& f, tcp::socket s) : fwd(f), sock(std::move(s)) {}
    void Read() {
      auto self = shared_from_this();
      asio::async_read(sock, asio::buffer(len, 2), [self](const boost::system::error_code& ec, size_t) {
        if (ec) return;
        const size_t n = (self->len[0] << 8) | self->len[1];
        self->msg.resize(n);
        asio::async_read(self->sock, asio::buffer(self->msg), [self](const boost::system::error_code& ec2, size_t) {
          if (ec2) return;
          std::weak_ptr<Conn> weak = self;
          self->fwd.Handle(self->msg, true, [weak](dns::Bytes out) {
            if (auto c = weak.lock()) c->Write(std::move(out));
          });
          self->Read();
        });
      });
    }
    void Write(dns::Bytes out) {
      dns::Bytes framed = {static_cast<uint8_t>(out.size() >> 8), static_cast<uint8_t>(out.size())};
      framed.insert(framed.end(), out.begin(), out.end());
      queue.push_back(std::move(framed));
      if (queue.size() == 1) Flush();
    }
    void Flush() {
      auto self = shared_from_this();
      asio::async_write(sock, asio::buffer(queue.front()), [self](const boost::system::error_code& ec, size_t) {
        if (ec) return;
        self->queue.pop_front();
        if (!self->queue.empty()) self->Flush();
      });
    }
    Forwarder& fwd;
    tcp::socket sock;
    uint8_t len[2] = {};
    std::vector<uint8_t> msg;
    std::deque<dns::Bytes> queue;
  };

  // The transactions' durations: the loop serves nothing while one runs.
  void Timed(std::chrono::steady_clock::duration d) {
    const double s = std::chrono::duration<double>(d).count();
    commit_total_s_ += s;
    commit_max_s_ = std::max(commit_max_s_, s);
    over_[0] += s > 0.01;
    over_[1] += s > 0.1;
    over_[2] += s > 1.0;
  }

  asio::io_context& io_;
  dns::SandboxScope scope_;
  dns::Upstream& up_;
  NftLearnedSink sink_;
  dns::Lifetime lifetime_;
  dns::Counters counters_;
  uint64_t commits_ = 0, commit_failed_ = 0;
  double commit_total_s_ = 0, commit_max_s_ = 0;
  uint64_t over_[3] = {};
  std::vector<double> answer_to_set_us_;
  std::array<uint8_t, dns::kMaxMessage> buf_;
  udp::endpoint from_;
};

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "egr-nft-forwarder: %s\nusage: egr-nft-forwarder --port P --upstream IP[:PORT] --mark M [--table T] "
               "[--policy task.yaml] --egress TARGET...\n",
               why.c_str());
  return 2;
}

int Main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return Usage("\"" + a + "\" needs a value");
    const std::string v = argv[++i];
    uint32_t n = 0;
    if (a == "--port" && absl::SimpleAtoi(v, &n) && n > 0 && n < 65536) {
      o.port = static_cast<uint16_t>(n);
    } else if (a == "--mark" && absl::SimpleHexAtoi(v, &n) && n != 0) {
      o.mark = n;
    } else if (a == "--table") {
      o.table = v;
    } else if (a == "--upstream") {
      o.upstream = v;
    } else if (a == "--policy") {
      o.policy_file = v;
    } else if (a == "--egress") {
      o.egress.push_back(v);
    } else {
      return Usage("bad flag or value: " + a + " \"" + v + "\"");
    }
  }
  if (o.port == 0 || o.mark == 0 || o.upstream.empty()) return Usage("--port, --mark (hex, not 0) and --upstream are required");
  auto server = dns::ParseUpstreamServer(o.upstream);
  if (!server.ok()) return Usage(std::string(server.status().message()));

  // The pod's scope, compiled exactly as `egressctl policy compile -o nft`
  // compiles the ruleset this forwarder fills.
  policy::PolicyInputs in;
  if (!o.policy_file.empty()) in.task = policy::InputText::File(o.policy_file);
  in.run_targets = o.egress;
  in.dns_served = true;
  auto compiled = policy::CompileInputs(in);
  if (!compiled.ok()) return Usage(std::string(compiled.status().message()));
  dns::SandboxScope scope;
  scope.names = dns::NameScope(*compiled);
  scope.protected_cidrs = compiled->protected_cidrs;

  auto set = NftResolvedSet::Open(o.table);
  if (!set.ok()) {
    std::fprintf(stderr, "egr-nft-forwarder: %s\n", set.status().ToString().c_str());
    return 1;
  }
  asio::io_context io;
  dns::UpstreamOptions uo;
  uo.servers = {*server};
  uo.socket_mark = o.mark;
  auto up = dns::Upstream::Create(io, uo);
  if (!up.ok()) {
    std::fprintf(stderr, "egr-nft-forwarder: %s\n", up.status().ToString().c_str());
    return 1;
  }
  Forwarder fwd(io, std::move(scope), **up, **set);
  std::vector<std::unique_ptr<udp::socket>> udps;
  std::vector<std::unique_ptr<tcp::acceptor>> tcps;
  try {
    for (const char* addr : {"127.0.0.1", "::1"}) {
      const auto ip = asio::ip::make_address(addr);
      udps.push_back(std::make_unique<udp::socket>(io, udp::endpoint(ip, o.port)));
      tcps.push_back(std::make_unique<tcp::acceptor>(io, tcp::endpoint(ip, o.port)));
    }
  } catch (const boost::system::system_error& e) {
    std::fprintf(stderr, "egr-nft-forwarder: bind port %u: %s\n", o.port, e.what());
    return 1;
  }
  for (auto& s : udps) fwd.ServeUdp(*s);
  for (auto& a : tcps) fwd.Accept(*a);
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code&, int) { io.stop(); });
  asio::signal_set dump(io, SIGUSR1);
  std::function<void()> wait_dump = [&] {
    dump.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec) return;
      fwd.PrintAnswerToSet();
      wait_dump();
    });
  };
  wait_dump();
  std::printf("ready\n");
  std::fflush(stdout);
  io.run();
  fwd.PrintCounters();
  return 0;
}

}  // namespace
}  // namespace egressd::bench

int main(int argc, char** argv) { return egressd::bench::Main(argc, argv); }
