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

class ChunkedStream;

struct Response {
  int status = 200;
  nlohmann::json body;
  // Set: the body is not `body` but a chunked stream (`content_type`): the
  // header goes out, then `stream` gets the connection (GET /v1/audit).
  std::function<void(std::shared_ptr<ChunkedStream>)> stream;
  std::string content_type;
};

// A response body written as it comes (HTTP/1.1 chunked), on the loop: never
// blocks.  One chunk in flight at a time; what is written meanwhile waits in
// memory, so a producer asks busy() and writes again when `ready` runs (its
// own source is the buffer, not this).  The connection is the stream's
// alone: no request after it.
class ChunkedStream : public std::enable_shared_from_this<ChunkedStream> {
 public:
  explicit ChunkedStream(boost::asio::local::stream_protocol::socket socket);
  ~ChunkedStream();
  // Starts watching for the peer's hang-up; `ready` runs after each write
  // that leaves nothing queued, and once when the stream closes.
  void Start(std::function<void()> ready);
  // Queues one chunk (nothing when empty or closed).
  void Write(std::string data);
  // The last chunk after what is queued, then the connection is shut down.
  void Finish();
  bool busy() const { return in_flight_; }
  bool closed() const { return closed_; }
  size_t written() const { return written_; }

 private:
  void Flush();
  void Close();

  boost::asio::local::stream_protocol::socket socket_;
  std::function<void()> ready_;
  std::string queued_, sending_;
  bool in_flight_ = false, finishing_ = false, finished_ = false, closed_ = false;
  size_t written_ = 0;
  char peek_ = 0;
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
  // The hand-over (handover.h): serve a listener the previous daemon bound
  // at `path` (never unlinked nor rebound), accepting from StartAccepting()
  // (once this daemon said it serves); the listener's fd; accept no more
  // (the connections accepted are answered).
  absl::Status Adopt(const std::string& path, int fd);
  void StartAccepting();
  int listener_fd() const { return acceptor_ ? acceptor_->native_handle() : -1; }
  void StopAccepting();

 private:
  void Accept();

  boost::asio::io_context& io_;
  Handler handler_;
  IsSandboxed sandboxed_;
  std::unique_ptr<boost::asio::local::stream_protocol::acceptor> acceptor_;
  std::shared_ptr<uint64_t> refused_ = std::make_shared<uint64_t>(0);
  std::string path_;
  bool accepting_ = false;
};

}  // namespace egressd::daemon
