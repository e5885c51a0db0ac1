#include "userspace/daemon/dns_host.h"

#include <random>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"
#include "userspace/daemon/upstream_guard.h"
#include "userspace/dns/self_test.h"

namespace egressd::daemon {

namespace asio = boost::asio;
using asio::ip::udp;

namespace {

// How long the self-test waits for the proxy's answer: the proxy answers it
// from memory, so a second means its loop is stuck or its socket gone.
constexpr std::chrono::milliseconds kSelfTestTimeout{1000};

}  // namespace

void DnsHostOptions::SetFrom(const policy::DnsSettings& settings) {
  lifetime = dns::LifetimeOf(settings);
  bounds = dns::Bounds{settings.max_addresses_per_sandbox, settings.max_addresses_per_name};
}

absl::StatusOr<std::unique_ptr<DnsHost>> DnsHost::Create(asio::io_context& io, const Paths& paths,
                                                         const maps::PinnedMaps& maps, DnsHostOptions options) {
  std::unique_ptr<DnsHost> h(new DnsHost(io));
  // Every upstream socket guarded in the kernel from every sandbox before
  // it connects (upstream_guard.h); without the guard no upstream is asked.
  if (!options.upstream.guard) {
    EGR_ASSIGN_OR_RETURN(options.upstream.guard, KernelUpstreamGuard::Open(paths.pin_root));
  }
  EGR_ASSIGN_OR_RETURN(h->upstream_, dns::Upstream::Create(io, options.upstream));
  h->table_ = std::make_unique<maps::ResolvedTable>(maps, uint64_t{options.lifetime.grace_s} * 1'000'000'000ull);
  if (options.audit) {
    h->audit_ = options.audit;
  } else {
    // Every query becomes an audit record (docs/audit.md, "DNS").
    auto writer = audit::UserEventWriter::Open(paths, options.audit_source);
    if (!writer.ok()) return writer.status();
    h->own_audit_ = std::move(*writer);
    h->audit_ = h->own_audit_.get();
  }
  h->dns_audit_ = std::make_unique<audit::DnsAudit>(*h->audit_);
  h->proxy_options_.observer = h->dns_audit_.get();
  h->proxy_options_.lifetime = options.lifetime;
  h->proxy_options_.bounds = options.bounds;
  // Learned entries carry a keyed id of their question name, which policy
  // changes trust (dns/qname_key.h); every process of the instance shares it.
  EGR_ASSIGN_OR_RETURN(h->proxy_options_.qname_key,
                       dns::QnameKey::LoadOrCreate(dns::QnameKey::PathIn(paths.runtime_dir)));
  h->proxy_ = std::make_unique<dns::DnsProxy>(io, *h->upstream_, *h->table_, h->proxy_options_);
  // Expired learned addresses go, on this loop: a sweep never interleaves
  // with the proxy's writes (maps/resolved_collector.h).
  h->collector_ = std::make_unique<maps::ResolvedCollector>(io, maps.resolved(), maps.resuse(),
                                                            maps::ResolvedCollector::Options{});
  h->table_->OnWrite([c = h->collector_.get()](uint64_t expires) { c->Expect(expires); });
  h->collector_->Start();  // its first sweep: what the books are seeded from is what is still allowed
  if (options.seed_books) {
    uint64_t total = 0;
    EGR_ASSIGN_OR_RETURN(auto entries, h->table_->List(SIZE_MAX, &total));
    std::map<uint64_t, std::vector<dns::LearnedSeed>> by_sandbox;
    for (const maps::LearnedEntry& e : entries) {
      dns::LearnedSeed seed{e.addr, e.learned.expires_boot_ns, {}, e.learned.qname_id};
      for (uint32_t id : e.learned.name_ids) {
        if (id != 0) seed.rule_ids.push_back(id);
      }
      by_sandbox[e.sandbox].push_back(std::move(seed));
    }
    for (auto& [sandbox, seeds] : by_sandbox) h->proxy_->Seed(sandbox, std::move(seeds));
    if (!entries.empty()) {
      spdlog::info("dns: {} learned address(es) of {} sandbox(es) in egr_resolved_v2: their books start from them",
                   entries.size(), by_sandbox.size());
    }
  }
  if (options.self_test) {
    EGR_ASSIGN_OR_RETURN(dns::Endpoint ep, h->proxy_->ServeSelfTest(net::IpAddr::V4({127, 0, 0, 1})));
    h->self_test_ep_ = udp::endpoint(asio::ip::address_v4::loopback(), ep.port);
    h->self_test_sock_.emplace(io);
    boost::system::error_code ec;
    h->self_test_sock_->open(udp::v4(), ec);
    if (!ec) h->self_test_sock_->connect(h->self_test_ep_, ec);
    if (ec) return ErrnoStatus(ec.value(), absl::StrCat("the DNS self-test's client socket to ", ep.ToString()));
    h->StartSelfTest();
  }
  return h;
}

DnsHost::~DnsHost() {
  *alive_ = false;
  if (self_test_sock_) {
    boost::system::error_code ec;
    self_test_sock_->close(ec);
  }
  self_test_timer_.cancel();
  collector_.reset();
  proxy_.reset();
  upstream_.reset();
}

void DnsHost::StartSelfTest() {
  if (!self_test_sock_ || self_test_in_flight_) return;
  self_test_in_flight_ = true;
  static thread_local std::mt19937 rng{std::random_device{}()};
  const uint16_t id = static_cast<uint16_t>(rng());
  self_test_id_ = id;
  auto query = std::make_shared<dns::Bytes>(dns::SelfTestQuery(id));
  std::weak_ptr<bool> alive = alive_;
  self_test_sock_->async_send(asio::buffer(*query), [this, alive, query, id](const boost::system::error_code& ec, size_t) {
    if (alive.expired() || !*alive.lock()) return;
    if (ec) FinishSelfTest(id, ec, 0);
  });
  ReceiveSelfTestAnswer(id);
  self_test_timer_.expires_after(kSelfTestTimeout);
  self_test_timer_.async_wait([this, alive, id](const boost::system::error_code& ec) {
    if (ec || alive.expired() || !*alive.lock() || !self_test_in_flight_ || self_test_id_ != id) return;
    // Cancels the receive, which finishes the test as timed out.
    self_test_timed_out_ = true;
    self_test_sock_->cancel();
  });
}

// An earlier test's answer that came after its timeout is dropped and the
// receive armed again: judged, it would fail this test, and this test's own
// answer would then fail the next, one behind for ever (readyz stuck at 503
// after a single slow answer; seen in a 6.1 guest under TCG).
void DnsHost::ReceiveSelfTestAnswer(uint16_t id) {
  std::weak_ptr<bool> alive = alive_;
  self_test_sock_->async_receive(asio::buffer(self_test_buf_), [this, alive, id](const boost::system::error_code& ec,
                                                                                size_t n) {
    if (alive.expired() || !*alive.lock()) return;
    if (!ec && self_test_in_flight_ && id == self_test_id_ &&
        dns::IsEarlierSelfTestAnswer(std::span<const uint8_t>(self_test_buf_.data(), n), id)) {
      ++self_test_late_answers_;
      ReceiveSelfTestAnswer(id);
      return;
    }
    FinishSelfTest(id, ec, n);
  });
}

void DnsHost::FinishSelfTest(uint16_t id, const boost::system::error_code& ec, size_t n) {
  if (!self_test_in_flight_ || id != self_test_id_) return;
  SelfTestResult r;
  if (ec == asio::error::operation_aborted && self_test_timed_out_) {
    r.reason = absl::StrCat("no answer from the DNS proxy's self-test endpoint 127.0.0.1:", self_test_ep_.port(),
                            " within ", kSelfTestTimeout.count(), " ms");
  } else if (ec) {
    r.reason = absl::StrCat("the DNS self-test query to 127.0.0.1:", self_test_ep_.port(), ": ", ec.message());
  } else {
    absl::Status s = dns::CheckSelfTestAnswer(std::span<const uint8_t>(self_test_buf_.data(), n), id);
    r.ok = s.ok();
    if (!s.ok()) r.reason = std::string(s.message());
  }
  r.finished = std::chrono::steady_clock::now();
  if (!r.ok && (self_test_.ok || !self_test_.finished)) spdlog::warn("dns: self-test failed: {}", r.reason);
  self_test_ = std::move(r);
  self_test_in_flight_ = false;
  self_test_timed_out_ = false;
  self_test_timer_.cancel();
  // A send error leaves the receive pending: cancelled, it finds the test
  // finished (in_flight false) and does nothing.
  if (ec && ec != asio::error::operation_aborted) self_test_sock_->cancel();
}

}  // namespace egressd::daemon
