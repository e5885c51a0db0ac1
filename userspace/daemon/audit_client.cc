#include "userspace/daemon/audit_client.h"

#include <cstdint>
#include <limits>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace egressd::daemon {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

absl::Status StreamAudit(const std::string& socket_path, const std::string& target,
                         const std::function<bool(const std::string& line)>& line,
                         const std::function<void()>& on_open) {
  asio::io_context io;
  asio::local::stream_protocol::socket sock(io);
  boost::system::error_code ec;
  sock.connect(asio::local::stream_protocol::endpoint(socket_path), ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("no egressd answers at ", socket_path, " (", ec.message(), "): is the daemon running?"));
  }
  http::request<http::empty_body> req(http::verb::get, target, 11);
  req.set(http::field::host, "egressd");
  http::write(sock, req, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("write to ", socket_path, ": ", ec.message()));
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  http::read_header(sock, buf, parser, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("read from ", socket_path, ": ", ec.message()));
  const int status = static_cast<int>(parser.get().result_int());
  if (status != 200) {
    http::read(sock, buf, parser, ec);
    nlohmann::json j = nlohmann::json::parse(parser.get().body(), nullptr, false);
    std::string why = absl::StrCat("the daemon answered ", status);
    if (j.is_object() && j.contains("error")) {
      std::vector<std::string> reasons;
      for (const auto& r : j["error"].value("reasons", nlohmann::json::array())) reasons.push_back(r.get<std::string>());
      absl::StrAppend(&why, ": ", absl::StrJoin(reasons, "\n"));
    }
    return status >= 400 && status < 500 ? absl::InvalidArgumentError(why) : absl::InternalError(why);
  }
  if (on_open) on_open();
  // Whole lines from the chunks as they come; a chunk need not end a line.
  std::string partial;
  bool stop = false;
  auto on_chunk = [&](uint64_t, beast::string_view body, beast::error_code&) -> size_t {
    partial.append(body.data(), body.size());
    size_t start = 0, nl;
    while (!stop && (nl = partial.find('\n', start)) != std::string::npos) {
      if (!line(partial.substr(start, nl - start))) stop = true;
      start = nl + 1;
    }
    partial.erase(0, start);
    return body.size();
  };
  parser.on_chunk_body(on_chunk);
  while (!stop && !parser.is_done()) {
    http::read_some(sock, buf, parser, ec);
    if (ec == http::error::end_of_stream) break;
    if (ec) return absl::UnavailableError(absl::StrCat("read from ", socket_path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace egressd::daemon
