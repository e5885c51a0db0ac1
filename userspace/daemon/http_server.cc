#include "userspace/daemon/http_server.h"

#include <sys/stat.h>
#include <cstdio>
#include <unistd.h>

#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "userspace/common/errors.h"
#include "userspace/common/node.h"

namespace egressd::daemon {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using local = asio::local::stream_protocol;

Response ErrorResponse(int status, const std::string& code, const std::string& message) {
  std::vector<std::string> reasons = absl::StrSplit(message, '\n', absl::SkipEmpty());
  if (reasons.empty()) reasons.push_back(code);
  return Response{status, {{"error", {{"code", code}, {"message", reasons[0]}, {"reasons", reasons}}}}};
}

Response FromStatus(const absl::Status& s) {
  const std::string m(s.message());
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument: return ErrorResponse(400, "invalid_input", m);
    case absl::StatusCode::kNotFound: return ErrorResponse(404, "not_found", m);
    case absl::StatusCode::kAlreadyExists: return ErrorResponse(409, "conflict", m);
    case absl::StatusCode::kFailedPrecondition: return ErrorResponse(409, "node_cannot_contain", m);
    case absl::StatusCode::kPermissionDenied: return ErrorResponse(403, "forbidden", m);
    case absl::StatusCode::kUnavailable: return ErrorResponse(503, "unavailable", m);
    default: return ErrorResponse(500, "node_failure", s.ToString());
  }
}

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(local::socket socket, const HttpServer::Handler& handler, absl::StatusOr<Peer> peer)
      : socket_(std::move(socket)), timer_(socket_.get_executor()), handler_(handler), peer_(std::move(peer)) {}

  void Read() {
    // A connection that sends no whole request in time is closed: idle
    // connections (a refused sandbox's among them) cannot pile up.
    timer_.expires_after(std::chrono::seconds(peer_.ok() ? 30 : 5));
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) {
        boost::system::error_code ignored;
        self->socket_.close(ignored);
      }
    });
    parser_.emplace();
    parser_->body_limit(4 << 20);
    http::async_read(socket_, buf_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return;  // closed, or not HTTP: nothing to answer
      self->Handle();
    });
  }

 private:
  void Handle() {
    timer_.cancel();
    const auto& req = parser_->get();
    Response r;
    if (!peer_.ok()) {
      r = FromStatus(peer_.status());
      spdlog::warn("api: refused {} {}: {}", std::string(req.method_string()), std::string(req.target()),
                   std::string(peer_.status().message()));
    } else {
      try {
        r = handler_(Request{std::string(req.method_string()), std::string(req.target()), req.body()}, *peer_);
      } catch (const std::exception& e) {
        r = ErrorResponse(500, "node_failure", e.what());
      }
    }
    if (r.stream) return Stream(req, std::move(r));
    res_ = {};
    res_.version(req.version());
    res_.result(static_cast<http::status>(r.status));
    res_.set(http::field::content_type, "application/json");
    res_.body() = r.body.dump() + "\n";
    // A refused peer gets one answer, then the connection closes.
    res_.keep_alive(req.keep_alive() && peer_.ok());
    res_.prepare_payload();
    http::async_write(socket_, res_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec || !self->res_.keep_alive()) {
        beast::error_code ignored;
        self->socket_.shutdown(local::socket::shutdown_send, ignored);
        return;
      }
      self->Read();
    });
  }

  // The header (chunked), then the connection is the stream's.
  void Stream(const http::request<http::string_body>& req, Response r) {
    head_.emplace();
    head_->version(req.version());
    head_->result(static_cast<http::status>(r.status));
    head_->set(http::field::content_type, r.content_type.empty() ? "application/octet-stream" : r.content_type);
    head_->chunked(true);
    head_->keep_alive(false);
    serializer_.emplace(*head_);
    http::async_write_header(socket_, *serializer_,
                             [self = shared_from_this(), start = std::move(r.stream)](beast::error_code ec, size_t) {
                               if (ec) return;
                               start(std::make_shared<ChunkedStream>(std::move(self->socket_)));
                             });
  }

  local::socket socket_;
  asio::steady_timer timer_;
  std::optional<http::response<http::empty_body>> head_;
  std::optional<http::response_serializer<http::empty_body>> serializer_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  const HttpServer::Handler& handler_;
  absl::StatusOr<Peer> peer_;
};

}  // namespace

ChunkedStream::ChunkedStream(local::socket socket) : socket_(std::move(socket)) {}

ChunkedStream::~ChunkedStream() = default;

void ChunkedStream::Start(std::function<void()> ready) {
  ready_ = std::move(ready);
  // The client sends nothing more; a read that ends is its hang-up.
  socket_.async_read_some(asio::buffer(&peek_, 1), [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec != asio::error::operation_aborted) self->Close();
  });
  if (ready_) ready_();
}

void ChunkedStream::Write(std::string data) {
  if (closed_ || finishing_ || data.empty()) return;
  char size[20];
  const int n = std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  queued_.append(size, n);
  queued_ += data;
  queued_ += "\r\n";
  written_ += data.size();
  Flush();
}

void ChunkedStream::Finish() {
  if (closed_ || finishing_) return;
  finishing_ = true;
  queued_ += "0\r\n\r\n";
  Flush();
}

void ChunkedStream::Flush() {
  if (in_flight_ || closed_) return;
  if (queued_.empty()) {
    if (finishing_ && !finished_) {
      finished_ = true;
      beast::error_code ignored;
      socket_.shutdown(local::socket::shutdown_send, ignored);
    }
    return;
  }
  sending_.swap(queued_);
  queued_.clear();
  in_flight_ = true;
  asio::async_write(socket_, asio::buffer(sending_), [self = shared_from_this()](beast::error_code ec, size_t) {
    self->in_flight_ = false;
    if (ec) return self->Close();
    self->Flush();
    if (!self->in_flight_ && !self->closed_ && self->ready_) self->ready_();
  });
}

void ChunkedStream::Close() {
  if (closed_) return;
  closed_ = true;
  beast::error_code ignored;
  socket_.close(ignored);
  // The producer hears it once, then lets go of us (its callback may own it).
  if (auto ready = std::move(ready_)) ready();
  ready_ = nullptr;
}

HttpServer::HttpServer(asio::io_context& io, Handler handler, IsSandboxed sandboxed)
    : io_(io), handler_(std::move(handler)), sandboxed_(std::move(sandboxed)) {}

HttpServer::~HttpServer() = default;

absl::Status HttpServer::Listen(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) EGR_RETURN_IF_ERROR(MakeDirs(path.substr(0, slash), 0700));
  // A socket file left by a daemon that was killed; nothing listens there
  // (the instance lock says no other daemon runs).
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("unlink ", path));
  acceptor_ = std::make_unique<local::acceptor>(io_);
  boost::system::error_code ec;
  acceptor_->open(local(), ec);
  // Created 0600 (umask), then chmod'ed to be sure.
  const mode_t old = umask(0177);
  if (!ec) acceptor_->bind(local::endpoint(path), ec);
  umask(old);
  if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return absl::InternalError(absl::StrCat("listen on ", path, ": ", ec.message()));
  if (chmod(path.c_str(), 0600) != 0) return ErrnoStatus(errno, absl::StrCat("chmod ", path));
  path_ = path;
  accepting_ = true;
  Accept();
  return absl::OkStatus();
}

absl::Status HttpServer::Adopt(const std::string& path, int fd) {
  acceptor_ = std::make_unique<local::acceptor>(io_);
  boost::system::error_code ec;
  acceptor_->assign(local(), fd, ec);
  if (ec) {
    close(fd);
    return absl::InternalError(absl::StrCat("adopt the API listener on ", path, ": ", ec.message()));
  }
  path_ = path;
  // Not accepted on yet (StartAccepting): until this daemon serves, the one
  // that handed it over accepts, and a connection accepted here would die
  // with this daemon if it went first (Asio accepts speculatively).
  return absl::OkStatus();
}

void HttpServer::StartAccepting() {
  if (!acceptor_ || accepting_) return;
  accepting_ = true;
  Accept();
}

void HttpServer::StopAccepting() {
  if (!acceptor_) return;
  boost::system::error_code ec;
  acceptor_->cancel(ec);
}

void HttpServer::Accept() {
  acceptor_->async_accept([this](const boost::system::error_code& ec, local::socket socket) {
    if (ec) {
      if (ec != asio::error::operation_aborted) {
        spdlog::error("api: accept: {}", ec.message());
        Accept();
      }
      return;
    }
    absl::StatusOr<Peer> peer = CheckPeer(socket.native_handle(), sandboxed_);
    if (!peer.ok()) ++*refused_;
    std::make_shared<Session>(std::move(socket), handler_, std::move(peer))->Read();
    Accept();
  });
}

}  // namespace egressd::daemon
