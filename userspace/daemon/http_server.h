// The control API's transport: HTTP/1.1 on a unix stream socket (Boost.Beast
// over Asio local sockets), on the caller's io_context.  Each connection's
// peer is judged at accept (peer.h) before any request of it is acted on; a
// refused peer's requests are read (so it gets an answer) and answered 403.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "userspace/daemon/peer.h"

namespace egressd::daemon {

struct Request {
  std::string method;  // "GET", "PUT", ...
  std::string target;  // "/v1/sandboxes/x"
  std::string body;
};

struct Response {
  int status = 200;
  nlohmann::json body;
};

// An error body: {"error": {"code": ..., "message": first line, "reasons": [every line]}}.
Response ErrorResponse(int status, const std::string& code, const std::string& message);
// 400 for InvalidArgument, 404 NotFound, 409 FailedPrecondition/AlreadyExists,
// 403 PermissionDenied, 503 Unavailable, 500 otherwise.
Response FromStatus(const absl::Status& s);

class HttpServer {
 public:
  using Handler = std::function<Response(const Request&, const Peer&)>;
  HttpServer(boost::asio::io_context& io, Handler handler, IsSandboxed sandboxed);
  ~HttpServer();
  // Binds `path` (a stale socket file there is replaced), mode 0600.
  absl::Status Listen(const std::string& path);
  uint64_t refused() const { return *refused_; }

 private:
  void Accept();

  boost::asio::io_context& io_;
  Handler handler_;
  IsSandboxed sandboxed_;
  std::unique_ptr<boost::asio::local::stream_protocol::acceptor> acceptor_;
  std::shared_ptr<uint64_t> refused_ = std::make_shared<uint64_t>(0);
  std::string path_;
};

}  // namespace egressd::daemon
