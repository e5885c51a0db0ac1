#include "userspace/daemon/client.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace egressd::daemon {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

std::string DefaultSocketPath(const Paths& paths) {
  const char* env = std::getenv("EGRESSD_SOCKET");
  if (env != nullptr && *env != '\0') return env;
  return paths.runtime_dir + "/egressd.sock";
}

absl::StatusOr<ClientResponse> Call(const std::string& socket_path, const std::string& method,
                                    const std::string& target, const std::string& body) {
  asio::io_context io;
  asio::local::stream_protocol::socket sock(io);
  boost::system::error_code ec;
  sock.connect(asio::local::stream_protocol::endpoint(socket_path), ec);
  if (ec) {
    // No socket, or one nothing listens on: no daemon runs.  Anything else
    // (EACCES, ...) is a daemon this caller cannot talk to, not its absence.
    if (ec == boost::system::errc::no_such_file_or_directory || ec == boost::system::errc::connection_refused) {
      return absl::UnavailableError(
          absl::StrCat("no egressd answers at ", socket_path, " (", ec.message(), "): is the daemon running?"));
    }
    return absl::InternalError(absl::StrCat("connect to ", socket_path, ": ", ec.message()));
  }
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, "egressd");
  req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  http::write(sock, req, ec);
  if (ec) return absl::InternalError(absl::StrCat("write to ", socket_path, ": ", ec.message()));
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  http::read(sock, buf, parser, ec);
  if (ec) return absl::InternalError(absl::StrCat("read from ", socket_path, ": ", ec.message()));
  ClientResponse r;
  r.status = static_cast<int>(parser.get().result_int());
  r.body = nlohmann::json::parse(parser.get().body(), nullptr, false);
  return r;
}

}  // namespace egressd::daemon
