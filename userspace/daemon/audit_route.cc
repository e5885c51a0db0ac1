#include "userspace/daemon/audit_route.h"

#include <time.h>

#include <utility>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "userspace/audit/reader_lock.h"
#include "userspace/audit/record.h"
#include "userspace/audit/spool.h"

namespace egressd::daemon {

std::optional<std::string> PercentDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%') {
      int v = 0;
      if (i + 2 >= s.size() + 0 || !absl::SimpleHexAtoi(s.substr(i + 1, 2), &v)) return std::nullopt;
      out += static_cast<char>(v);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct AuditRoute::Follower {
  Follower(std::string path, audit::Filter f, bool follow) : tail(std::move(path)), filter(std::move(f)), follow(follow) {}

  // Writes what the spool has now when no chunk is in flight.
  void Pump() {
    if (!stream || done || stream->closed()) {
      done = true;
      return;
    }
    if (stream->busy()) return;
    std::string out;
    absl::Status s = tail.Open(false);
    if (s.ok()) {
      s = tail.Read([&](const std::string& line) {
        if (!filter.empty()) {
          nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
          if (r.is_discarded() || !audit::Matches(r, filter)) return;
        }
        out += line;
        out += '\n';
      });
    }
    if (!s.ok()) {
      spdlog::warn("api: GET /v1/audit: {}", s.ToString());
      stream->Write(std::move(out));
      stream->Write(LossLine("spool-unreadable", std::string(s.message())));
      return Cut();
    }
    if (tail.overrun() > 0) {
      stream->Write(std::move(out));
      stream->Write(LossLine("reader-behind",
                             absl::StrCat("the spool rotated past this reader ", tail.overrun(),
                                          " time(s): the lines in between are not in this stream")));
      return Cut();
    }
    stream->Write(std::move(out));
    if (!follow) Cut();
  }

  void Cut() {
    stream->Finish();
    done = true;
  }

  static std::string LossLine(const std::string& why, const std::string& detail) {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    nlohmann::json j = {{"schema", audit::kSchema},
                        {"time", audit::FormatTime(uint64_t(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec)},
                        {"type", "loss"},
                        {"reader", why},
                        {"message", detail}};
    return j.dump() + "\n";
  }

  audit::SpoolTail tail;
  audit::Filter filter;
  bool follow;
  bool done = false;
  std::shared_ptr<ChunkedStream> stream;
};

AuditRoute::AuditRoute(Paths paths, AuditHost& host, IdOf sandbox_id_of)
    : paths_(std::move(paths)),
      sandbox_id_of_(std::move(sandbox_id_of)),
      followers_(std::make_shared<std::vector<std::shared_ptr<Follower>>>()) {
  host.OnWritten([this] { Kick(); });
}

AuditRoute::~AuditRoute() = default;

size_t AuditRoute::streams() const { return followers_->size(); }

void AuditRoute::Kick() {
  auto& all = *followers_;
  for (auto& f : all) f->Pump();
  std::erase_if(all, [](const std::shared_ptr<Follower>& f) { return f->done && (!f->stream || f->stream->closed()); });
}

Response AuditRoute::Get(const std::string& target) {
  const size_t q = target.find('?');
  std::string sandbox, verdict, type, since;
  bool follow = false;
  if (q != std::string::npos) {
    for (absl::string_view kv : absl::StrSplit(absl::string_view(target).substr(q + 1), '&', absl::SkipEmpty())) {
      const size_t eq = kv.find('=');
      const std::string key(kv.substr(0, eq));
      auto value = PercentDecode(eq == absl::string_view::npos ? "" : std::string(kv.substr(eq + 1)));
      if (!value) return ErrorResponse(400, "invalid_input", absl::StrCat("query parameter ", key, ": a bad %-escape"));
      if (key == "follow") {
        if (*value != "1" && *value != "0" && *value != "true" && *value != "false") {
          return ErrorResponse(400, "invalid_input", absl::StrCat("follow \"", *value, "\": 1 or 0"));
        }
        follow = *value == "1" || *value == "true";
      } else if (key == "sandbox") {
        sandbox = *value;
      } else if (key == "verdict") {
        verdict = *value;
      } else if (key == "type") {
        type = *value;
      } else if (key == "since") {
        since = *value;
      } else {
        return ErrorResponse(400, "invalid_input",
                             absl::StrCat("query parameter \"", key, "\": follow, sandbox, verdict, type or since"));
      }
    }
  }
  // An API id names its cgroup's id.
  uint64_t numeric = 0;
  if (!sandbox.empty() && !absl::SimpleAtoi(sandbox, &numeric)) {
    auto id = sandbox_id_of_(sandbox);
    if (!id) return ErrorResponse(404, "not_found", absl::StrCat("sandbox \"", sandbox, "\": none registered"));
    sandbox = absl::StrCat(*id);
  }
  auto filter = audit::ParseFilter(sandbox, verdict, type, since);
  if (!filter.ok()) return FromStatus(filter.status());
  auto f = std::make_shared<Follower>(audit::SpoolPath(paths_, filter->sandbox.value_or(0)), *filter, follow);
  Response r;
  r.status = 200;
  r.content_type = "application/x-ndjson";
  r.stream = [f, all = followers_](std::shared_ptr<ChunkedStream> stream) {
    f->stream = stream;
    all->push_back(f);
    std::weak_ptr<std::vector<std::shared_ptr<Follower>>> weak_all = all;
    stream->Start([f, weak_all] {
      f->Pump();
      if (f->done && f->stream->closed()) {
        if (auto v = weak_all.lock()) std::erase(*v, f);
      }
    });
  };
  return r;
}

}  // namespace egressd::daemon
