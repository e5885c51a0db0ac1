// Prometheus /metrics over TCP (metrics.address), on the daemon's io_context
// (Boost.Beast): the text `egressctl metrics` prints (userspace/audit/
// metrics.h), rendered per scrape.  The address and port are guarded in the
// kernel from every sandbox (maps/dns_endpoints.h SetOwnGuards) before the
// listener opens, so no sandbox ever reaches it, whatever its policy allows.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "absl/status/status.h"
#include "userspace/common/node.h"
#include "userspace/daemon/metrics_text.h"
#include "userspace/net/ip.h"

namespace egressd::daemon {

class MetricsServer {
 public:
  // `figures`: the daemon's own counters, read on the loop at each scrape
  // (metrics_text.h DaemonFigures); empty: the pinned state alone.
  MetricsServer(boost::asio::io_context& io, Paths paths, std::function<audit::DaemonFigures()> figures = {});
  ~MetricsServer();
  // Guards addr:port from every sandbox, then listens there.
  absl::Status Listen(const net::IpAddr& addr, uint16_t port);
  // The hand-over (handover.h): serves a listener the old daemon passed
  // (bound and listening at addr:port); the guard is set again, idempotently.
  absl::Status Adopt(const net::IpAddr& addr, uint16_t port, int fd);
  // Accepts on an adopted listener (once this daemon said it serves; a
  // listener of its own accepts from Listen).
  void StartAccepting();
  // The listening socket's fd for the next daemon (-1 if none); Stop closes
  // this daemon's acceptor, leaving the next one's copy listening.
  int listener_fd() const;
  void Stop();
  uint16_t port() const;
  std::string address() const { return address_; }  // "IP:PORT" / "[IPv6]:PORT" as bound
  const net::IpAddr& ip() const { return ip_; }       // the address bound (for the hand-over)
  uint64_t scrapes() const { return *scrapes_; }

 private:
  void Accept();

  boost::asio::io_context& io_;
  Paths paths_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
  std::string address_;
  net::IpAddr ip_;
  std::shared_ptr<uint64_t> scrapes_ = std::make_shared<uint64_t>(0);
  // Shared with each scrape as a weak_ptr: a scrape that outlives the
  // server (and the daemon the function reads) renders without them.
  std::shared_ptr<std::function<audit::DaemonFigures()>> figures_;
  bool accepting_ = false;
};

}  // namespace egressd::daemon
