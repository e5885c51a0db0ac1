#include "userspace/daemon/metrics_server.h"

#include <unistd.h>

#include <optional>

#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "maps/dns_endpoints.h"
#include "userspace/daemon/metrics_text.h"

namespace egressd::daemon {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

class Scrape : public std::enable_shared_from_this<Scrape> {
 public:
  Scrape(tcp::socket socket, const Paths& paths, std::shared_ptr<uint64_t> scrapes,
         std::weak_ptr<std::function<audit::DaemonFigures()>> figures)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        paths_(paths),
        scrapes_(std::move(scrapes)),
        figures_(std::move(figures)) {}

  void Read() {
    // A scraper that sends no whole request in time is closed.
    timer_.expires_after(std::chrono::seconds(10));
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) {
        boost::system::error_code ignored;
        self->socket_.close(ignored);
      }
    });
    req_ = {};
    http::async_read(socket_, buf_, req_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (!ec) self->Answer();
    });
  }

 private:
  void Answer() {
    timer_.cancel();
    res_ = {};
    res_.version(req_.version());
    const std::string target(req_.target().substr(0, req_.target().find('?')));
    if (target != "/metrics") {
      res_.result(http::status::not_found);
      res_.set(http::field::content_type, "text/plain");
      res_.body() = "only /metrics here (the control API is the unix socket)\n";
    } else if (req_.method() != http::verb::get && req_.method() != http::verb::head) {
      res_.result(http::status::method_not_allowed);
      res_.set(http::field::content_type, "text/plain");
      res_.body() = "GET only\n";
    } else if (auto text = Render(); !text.ok()) {
      res_.result(http::status::internal_server_error);
      res_.set(http::field::content_type, "text/plain");
      res_.body() = text.status().ToString() + "\n";
      spdlog::warn("metrics: {}", text.status().ToString());
    } else {
      ++*scrapes_;
      res_.result(http::status::ok);
      res_.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      res_.body() = *std::move(text);
    }
    res_.keep_alive(req_.keep_alive());
    res_.prepare_payload();
    http::async_write(socket_, res_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec || !self->res_.keep_alive()) {
        beast::error_code ignored;
        self->socket_.shutdown(tcp::socket::shutdown_send, ignored);
        return;
      }
      self->Read();
    });
  }

  absl::StatusOr<std::string> Render() {
    std::optional<audit::DaemonFigures> daemon;
    if (auto f = figures_.lock(); f && *f) daemon = (*f)();
    return audit::RenderMetrics(paths_, daemon ? &*daemon : nullptr);
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  Paths paths_;  // a copy: a scrape may outlive the server by a moment
  std::shared_ptr<uint64_t> scrapes_;
  std::weak_ptr<std::function<audit::DaemonFigures()>> figures_;
  beast::flat_buffer buf_;
  http::request<http::string_body> req_;
  http::response<http::string_body> res_;
};

}  // namespace

MetricsServer::MetricsServer(asio::io_context& io, Paths paths, std::function<audit::DaemonFigures()> figures)
    : io_(io),
      paths_(std::move(paths)),
      figures_(std::make_shared<std::function<audit::DaemonFigures()>>(std::move(figures))) {}

MetricsServer::~MetricsServer() {
  // The guard stays: it refuses an address and port nothing listens on, and
  // the next daemon sets its own (SetOwnGuards replaces them).
  if (acceptor_) {
    boost::system::error_code ignored;
    acceptor_->close(ignored);
  }
}

uint16_t MetricsServer::port() const {
  if (!acceptor_ || !acceptor_->is_open()) return 0;
  boost::system::error_code ec;
  const tcp::endpoint ep = acceptor_->local_endpoint(ec);
  return ec ? 0 : ep.port();
}

absl::Status MetricsServer::Listen(const net::IpAddr& addr, uint16_t port) {
  auto where = [&](uint16_t p) {
    return addr.is_v4() ? absl::StrCat(addr.ToString(), ":", p) : absl::StrCat("[", addr.ToString(), "]:", p);
  };
  boost::system::error_code ec;
  const asio::ip::address a = asio::ip::make_address(addr.ToString(), ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("metrics.address ", where(port), ": ", ec.message()));
  acceptor_ = std::make_unique<tcp::acceptor>(io_);
  const tcp::endpoint ep(a, port);
  acceptor_->open(ep.protocol(), ec);
  if (!ec) acceptor_->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_->bind(ep, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("metrics.address ", where(port), ": bind: ", ec.message()));
  const uint16_t bound = acceptor_->local_endpoint().port();  // port 0: the one the kernel chose
  // The guard between bind and listen: no sandbox can connect while it is
  // not yet in force (nothing accepts before listen()).
  auto eps = maps::DnsEndpoints::Open(paths_.pin_root);
  if (!eps.ok()) return eps.status();
  if (absl::Status s = eps->SetOwnGuards({{addr, bound}}); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("metrics.address ", where(bound), ": ", s.message()));
  }
  acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("metrics.address ", where(bound), ": listen: ", ec.message()));
  address_ = where(bound);
  ip_ = addr;
  spdlog::info("serving /metrics on {} (guarded from every sandbox in {})", where(bound), "egr_dnsep_v1");
  accepting_ = true;
  Accept();
  return absl::OkStatus();
}

absl::Status MetricsServer::Adopt(const net::IpAddr& addr, uint16_t port, int fd) {
  const std::string where =
      addr.is_v4() ? absl::StrCat(addr.ToString(), ":", port) : absl::StrCat("[", addr.ToString(), "]:", port);
  boost::system::error_code ec;
  acceptor_ = std::make_unique<tcp::acceptor>(io_);
  acceptor_->assign(addr.is_v4() ? tcp::v4() : tcp::v6(), fd, ec);
  if (ec) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("metrics.address ", where, ": adopting the handed-over listener: ", ec.message()));
  }
  auto eps = maps::DnsEndpoints::Open(paths_.pin_root);
  if (!eps.ok()) return eps.status();
  if (absl::Status s = eps->SetOwnGuards({{addr, port}}); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("metrics.address ", where, ": ", s.message()));
  }
  address_ = where;
  ip_ = addr;
  spdlog::info("serving /metrics on {} (handed over; guarded from every sandbox in {})", where, "egr_dnsep_v1");
  // Accepted on from StartAccepting(), as the API's listener (http_server.cc).
  return absl::OkStatus();
}

void MetricsServer::StartAccepting() {
  if (!acceptor_ || !acceptor_->is_open() || accepting_) return;
  accepting_ = true;
  Accept();
}

int MetricsServer::listener_fd() const {
  return acceptor_ && acceptor_->is_open() ? const_cast<tcp::acceptor&>(*acceptor_).native_handle() : -1;
}

void MetricsServer::Stop() {
  if (!acceptor_) return;
  boost::system::error_code ec;
  acceptor_->close(ec);
}

void MetricsServer::Accept() {
  acceptor_->async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (ec) {
      if (ec != asio::error::operation_aborted) {
        spdlog::error("metrics: accept: {}", ec.message());
        Accept();
      }
      return;
    }
    std::make_shared<Scrape>(std::move(socket), paths_, scrapes_, figures_)->Read();
    Accept();
  });
}

}  // namespace egressd::daemon
