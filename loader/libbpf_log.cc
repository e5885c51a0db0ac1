#include "loader/libbpf_log.h"

#include <bpf/libbpf.h>

#include <cstdarg>
#include <cstdio>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

namespace egressd {

std::string FormatLibbpfMessage(const char* fmt, va_list args) {
  // libbpf hands the verifier's whole log over as one message, and the reason
  // for a rejection is at its end: size the buffer to the message.
  va_list probe;
  va_copy(probe, args);
  int n = std::vsnprintf(nullptr, 0, fmt, probe);
  va_end(probe);
  if (n <= 0) return {};
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(out.data(), out.size(), fmt, args);
  out.resize(static_cast<size_t>(n));
  return out;
}

namespace {

int PrintToSpdlog(enum libbpf_print_level level, const char* fmt, va_list args) {
  std::string msg = FormatLibbpfMessage(fmt, args);
  // One log record per line, so a multi-line verifier log stays readable in
  // any sink (and no sink-side line limit cuts the rejection reason).
  std::string_view rest(msg);
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    switch (level) {
      case LIBBPF_WARN: spdlog::warn("libbpf: {}", line); break;
      case LIBBPF_INFO: spdlog::debug("libbpf: {}", line); break;
      case LIBBPF_DEBUG: spdlog::trace("libbpf: {}", line); break;
    }
  }
  return static_cast<int>(msg.size());
}

}  // namespace

void BridgeLibbpfLogging() { libbpf_set_print(PrintToSpdlog); }

}  // namespace egressd
