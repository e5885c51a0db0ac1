// The DNS stack one process hosts, assembled once for the daemon, `egressctl
// dns serve` and `egressctl run`: the upstream, the kernel's learned-address
// table (with the lifetime's grace as its in-use window), the audit of every
// query, the proxy with the deployment's lifetime and bounds, and the
// collector of expired learned entries, woken by the table's writes.  Torn
// down in the reverse order: collector, proxy, upstream (then the audit).
// Everything runs on the caller's io_context, which must not be running on
// another thread while Create runs.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "maps/pinned_maps.h"
#include "maps/resolved_collector.h"
#include "maps/resolved_table.h"
#include "userspace/audit/dns_events.h"
#include "userspace/audit/user_events.h"
#include "userspace/common/node.h"
#include "userspace/dns/proxy.h"
#include "userspace/dns/upstream.h"
#include "userspace/policy/deployment_config.h"

namespace egressd::daemon {

struct DnsHostOptions {
  dns::UpstreamOptions upstream;  // servers (at least one), timeout, tries
  dns::Lifetime lifetime;
  dns::Bounds bounds;
  // The audit writer the DNS records go through: borrowed (the daemon's,
  // which must outlive the host), or null: one of the host's own, opened
  // under `audit_source` ("dns-proxy").
  audit::UserEventWriter* audit = nullptr;
  std::string audit_source = "dns-proxy";
  // Each sandbox's learned book starts from what egr_resolved_v2 holds for
  // it (a restart keeps quotas and caps).  egressctl run's sandbox is new:
  // nothing to read.
  bool seed_books = true;
  // Serve the readiness self-test on 127.0.0.1 (the daemon's /readyz).
  bool self_test = false;

  // The lifetime and bounds of the deployment config's dns: block.
  void SetFrom(const policy::DnsSettings& settings);
};

// The latest self-test: a query to the proxy's self-test endpoint, answered
// NXDOMAIN by the proxy itself (userspace/dns/self_test.h).
struct SelfTestResult {
  bool ok = false;
  std::string reason;  // why not, when !ok
  std::optional<std::chrono::steady_clock::time_point> finished;
};

class DnsHost {
 public:
  // Fails (nothing left running) when the upstream, the audit writer or
  // the self-test endpoint cannot be set up.  `maps` must outlive the host.
  static absl::StatusOr<std::unique_ptr<DnsHost>> Create(boost::asio::io_context& io, const Paths& paths,
                                                         const maps::PinnedMaps& maps, DnsHostOptions options);
  ~DnsHost();
  DnsHost(const DnsHost&) = delete;
  DnsHost& operator=(const DnsHost&) = delete;

  dns::DnsProxy& proxy() { return *proxy_; }
  maps::ResolvedTable& table() { return *table_; }
  const dns::ProxyOptions& proxy_options() const { return proxy_options_; }
  audit::UserEventWriter& audit() { return *audit_; }

  // Starts a self-test query unless one is in flight (on the loop's thread).
  void StartSelfTest();
  // The latest finished one; before the first has finished, !ok saying so.
  const SelfTestResult& self_test() const { return self_test_; }
  // Answers to earlier tests, come after their timeout, that a later test
  // read and dropped (each one a test that was slower than 1 s).
  uint64_t self_test_late_answers() const { return self_test_late_answers_; }

 private:
  DnsHost(boost::asio::io_context& io) : io_(io), self_test_timer_(io) {}
  void ReceiveSelfTestAnswer(uint16_t id);
  void FinishSelfTest(uint16_t id, const boost::system::error_code& ec, size_t n);

  boost::asio::io_context& io_;
  std::unique_ptr<audit::UserEventWriter> own_audit_;
  audit::UserEventWriter* audit_ = nullptr;
  std::unique_ptr<audit::DnsAudit> dns_audit_;
  std::unique_ptr<dns::Upstream> upstream_;
  std::unique_ptr<maps::ResolvedTable> table_;
  dns::ProxyOptions proxy_options_;
  std::unique_ptr<dns::DnsProxy> proxy_;
  std::unique_ptr<maps::ResolvedCollector> collector_;
  // The self-test's client side.
  std::optional<boost::asio::ip::udp::socket> self_test_sock_;
  boost::asio::ip::udp::endpoint self_test_ep_;
  boost::asio::steady_timer self_test_timer_;
  std::array<uint8_t, 512> self_test_buf_{};
  bool self_test_in_flight_ = false;
  bool self_test_timed_out_ = false;
  uint16_t self_test_id_ = 0;
  uint64_t self_test_late_answers_ = 0;
  // Cleared when the host goes: a handler the loop runs later does nothing.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  SelfTestResult self_test_{false, "the first self-test query has not been answered yet", std::nullopt};
};

}  // namespace egressd::daemon
