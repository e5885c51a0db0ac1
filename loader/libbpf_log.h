#pragma once

#include <cstdarg>
#include <string>

namespace egressd {
// Routes libbpf's own messages into spdlog (warn/debug/trace by libbpf
// level), one record per line and never truncated.
void BridgeLibbpfLogging();

// printf-style formatting into a string of exactly the message's size (the
// bridge's formatter, exposed for its unit test).
std::string FormatLibbpfMessage(const char* fmt, va_list args);
}  // namespace egressd
