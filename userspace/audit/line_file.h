// Audit lines to a file that rotates by size (spdlog's rotating sink: FILE,
// FILE.1 ... FILE.<files-1>), mode 0600.  Each line is one write of the whole
// line, flushed to the kernel at once; rotation happens between lines, so no
// line is ever split across files.  No fsync: a node crash can lose what the
// page cache held (docs/audit.md, "Durability").
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace spdlog {
class logger;
}

namespace egressd::audit {

inline constexpr size_t kDefaultRotateBytes = 10u << 20;
inline constexpr size_t kDefaultRotateFiles = 5;

class LineFile {
 public:
  static absl::StatusOr<LineFile> Open(const std::string& path, size_t max_bytes = kDefaultRotateBytes,
                                       size_t files = kDefaultRotateFiles);
  void Write(const std::string& line);

 private:
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace egressd::audit
