// egressctl audit: the audit trail as JSON lines (docs/audit.md), from a file
// (--input) or from the kernel, reading the ring itself when no other reader
// does and tailing the reader's spool otherwise.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cctype>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/egressctl/commands.h"
#include "tools/egressctl/policy_flags.h"
#include "userspace/daemon/metrics_text.h"
#include "userspace/audit/record.h"
#include "userspace/audit/trail.h"
#include "userspace/daemon/audit_client.h"
#include "userspace/daemon/client.h"

namespace egressd::cli {
namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop = true; }

// Prints the lines that pass the filter, in the form asked.
class Printer {
 public:
  Printer(const audit::Filter& filter, bool compact) : filter_(filter), compact_(compact) {}

  void operator()(const std::string& line) {
    if (filter_.empty() && !compact_) {
      // Nothing to decide: the line as it is (a trail's lines are JSON).
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fputc('\n', stdout);
      return;  // flushed between polls (CmdAudit's done)
    }
    nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
    if (r.is_discarded()) {
      ++bad_;
      return;
    }
    if (!audit::Matches(r, filter_)) return;
    const std::string text = compact_ ? audit::Compact(r) : line;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
  }
  int bad() const { return bad_; }

 private:
  audit::Filter filter_;
  bool compact_;
  int bad_ = 0;
};

int FromFile(const AuditFlags& flags, Printer& print) {
  std::ifstream in(flags.input);
  if (!in) {
    std::fprintf(stderr, "egressctl: --input %s: cannot open\n", flags.input.c_str());
    return kExitBadInput;
  }
  std::string line, partial;
  for (;;) {
    while (std::getline(in, line)) {
      if (in.eof()) {  // no newline yet: a line still being written
        partial += line;
        break;
      }
      print(partial + line);
      partial.clear();
    }
    std::fflush(stdout);
    if (!flags.follow || g_stop) break;
    in.clear();
    usleep(100 * 1000);  // tail -f: the writer gives no signal to wait on
  }
  if (print.bad()) {
    std::fprintf(stderr, "egressctl: --input %s: %d lines were not JSON\n", flags.input.c_str(), print.bad());
    return kExitBadInput;
  }
  return kExitOk;
}

// The trail through the daemon's GET /v1/audit (docs/api.md), when its
// socket answers.  nullopt: no daemon (the caller reads the trail itself).
std::optional<int> ThroughDaemon(const Paths& paths, const AuditFlags& flags, Printer& print) {
  const std::string socket = daemon::DefaultSocketPath(paths);
  std::string target = "/v1/audit?follow=";
  target += flags.follow ? "1" : "0";
  auto param = [&](const char* key, const std::string& v) {
    if (v.empty()) return;
    absl::StrAppend(&target, "&", key, "=");
    for (unsigned char c : v) {
      if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == ':') {
        target += static_cast<char>(c);
      } else {
        absl::StrAppend(&target, absl::StrFormat("%%%02X", c));
      }
    }
  };
  param("sandbox", flags.sandbox);
  param("verdict", flags.verdict);
  param("type", flags.type);
  param("since", flags.since);
  bool opened = false;
  absl::Status s = daemon::StreamAudit(
      socket, target,
      [&](const std::string& line) {
        print(line);
        std::fflush(stdout);
        return true;
      },
      [&] { opened = true; });
  if (!opened && absl::IsUnavailable(s)) {
    spdlog::debug("audit: no daemon answers at {} ({}): reading the trail directly", socket, std::string(s.message()));
    return std::nullopt;
  }
  spdlog::debug("audit: read through the daemon at {}", socket);
  if (absl::IsInvalidArgument(s)) {
    std::fprintf(stderr, "egressctl: audit: %s\n", std::string(s.message()).c_str());
    return kExitBadInput;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "egressctl: audit: %s\n", s.ToString().c_str());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

int CmdAudit(const Paths& paths, const AuditFlags& flags) {
  auto parsed = audit::ParseFilter(flags.sandbox, flags.verdict, flags.type, flags.since);
  if (!parsed.ok()) {
    std::fprintf(stderr, "egressctl: --%s\n", std::string(parsed.status().message()).c_str());
    return kExitBadInput;
  }
  const audit::Filter filter = *parsed;
  if (flags.output != "json" && flags.output != "compact") {
    std::fprintf(stderr, "egressctl: -o \"%s\": json or compact\n", flags.output.c_str());
    return kExitBadInput;
  }
  if (flags.window_ms <= 0) {
    std::fprintf(stderr, "egressctl: --window-ms %d: must be positive\n", flags.window_ms);
    return kExitBadInput;
  }
  if (!flags.metrics.empty() && !flags.input.empty()) {
    std::fprintf(stderr, "egressctl: --metrics %s: only while reading the kernel's trail, not with --input\n",
                 flags.metrics.c_str());
    return kExitBadInput;
  }
  Printer print(filter, flags.output == "compact");
  // A daemon holds the ring: ask it (--metrics writes a file from this
  // process's reading, so it keeps the direct path).
  if (flags.input.empty() && flags.metrics.empty()) {
    if (auto code = ThroughDaemon(paths, flags, print)) return *code;
  }
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  if (!flags.input.empty()) return FromFile(flags, print);

  audit::TrailOptions o;
  o.window_ms = flags.window_ms;
  o.sandbox_id = filter.sandbox.value_or(0);
  // Without --follow: what the kernel holds now, then exit.
  bool once = false;
  auto last_metrics = std::chrono::steady_clock::now();
  absl::Status metrics_status;
  auto done = [&] {
    // Between two polls of the trail: what was printed goes out in one write.
    std::fflush(stdout);
    if (!flags.metrics.empty() && metrics_status.ok() &&
        std::chrono::steady_clock::now() - last_metrics >= std::chrono::seconds(10)) {
      metrics_status = audit::WriteMetricsFile(paths, flags.metrics);
      last_metrics = std::chrono::steady_clock::now();
    }
    if (flags.follow) return g_stop.load() || !metrics_status.ok();
    return std::exchange(once, true);
  };
  absl::Status s = audit::ReadTrail(paths, o, [&](const std::string& line) { print(line); }, done);
  if (s.ok() && metrics_status.ok() && !flags.metrics.empty()) {
    metrics_status = audit::WriteMetricsFile(paths, flags.metrics);
  }
  if (s.ok()) s = metrics_status;
  if (!s.ok()) {
    std::fprintf(stderr, "egressctl: audit: %s\n", s.ToString().c_str());
    return kExitFailure;
  }
  return kExitOk;
}

int CmdMetrics(const Paths& paths, const std::string& file) {
  if (file.empty()) {
    auto text = audit::RenderMetrics(paths);
    if (!text.ok()) return Report(text.status());
    std::fwrite(text->data(), 1, text->size(), stdout);
    return kExitOk;
  }
  const size_t slash = file.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : file.substr(0, slash + 1);
  if (access(dir.c_str(), W_OK) != 0) {
    std::fprintf(stderr, "egressctl: -o %s: directory %s is not writable (%s)\n", file.c_str(), dir.c_str(),
                 std::strerror(errno));
    return kExitBadInput;
  }
  return Report(audit::WriteMetricsFile(paths, file));
}

}  // namespace egressd::cli
