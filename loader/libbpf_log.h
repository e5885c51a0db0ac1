#pragma once

namespace egressd {
// Routes libbpf's own messages into spdlog (debug/info/warn by libbpf level).
void BridgeLibbpfLogging();
}  // namespace egressd
