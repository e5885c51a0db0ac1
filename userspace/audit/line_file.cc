#include "userspace/audit/line_file.h"

#include <sys/stat.h>

#include <cstdio>

#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"

namespace egressd::audit {

absl::StatusOr<LineFile> LineFile::Open(const std::string& path, size_t max_bytes, size_t files) {
  if (files < 1) return absl::InvalidArgumentError("audit file rotation: at least one file");
  spdlog::file_event_handlers handlers;
  // Before the first line is written to a new file (the first, or after a
  // rotation), it is made private.
  handlers.after_open = [](const spdlog::filename_t&, std::FILE* f) { fchmod(fileno(f), 0600); };
  LineFile lf;
  try {
    auto sink = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(path, max_bytes, files - 1, false,
                                                                      handlers);
    lf.logger_ = std::make_shared<spdlog::logger>("egressd-audit", sink);
  } catch (const spdlog::spdlog_ex& e) {
    return absl::InvalidArgumentError(absl::StrCat("audit file ", path, ": ", e.what()));
  }
  lf.logger_->set_pattern("%v");
  lf.logger_->set_level(spdlog::level::info);
  lf.logger_->flush_on(spdlog::level::info);
  return lf;
}

void LineFile::Write(const std::string& line) { logger_->info(line); }

}  // namespace egressd::audit
