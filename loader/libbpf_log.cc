#include "loader/libbpf_log.h"

#include <bpf/libbpf.h>

#include <cstdarg>
#include <cstdio>
#include <string>

#include <spdlog/spdlog.h>

namespace egressd {
namespace {

int PrintToSpdlog(enum libbpf_print_level level, const char* fmt, va_list args) {
  char buf[1024];
  int n = std::vsnprintf(buf, sizeof(buf), fmt, args);
  std::string line(buf, n < 0 ? 0 : std::min<size_t>(n, sizeof(buf) - 1));
  while (!line.empty() && line.back() == '\n') line.pop_back();
  switch (level) {
    case LIBBPF_WARN: spdlog::warn("libbpf: {}", line); break;
    case LIBBPF_INFO: spdlog::debug("libbpf: {}", line); break;
    case LIBBPF_DEBUG: spdlog::trace("libbpf: {}", line); break;
  }
  return n;
}

}  // namespace

void BridgeLibbpfLogging() { libbpf_set_print(PrintToSpdlog); }

}  // namespace egressd
