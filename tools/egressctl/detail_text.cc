#include "tools/egressctl/detail_text.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace egressd::cli {

void PrintSandboxDetail(const nlohmann::json& s) {
  if (s.contains("caps") && s["caps"].is_object()) {
    std::string line;
    for (const auto& [what, c] : s["caps"].items()) {
      absl::StrAppend(&line, " ", what, " ", c.contains("count") ? std::to_string(c["count"].get<uint64_t>()) : "?",
                      "/", c.value("limit", uint64_t{0}));
    }
    std::printf("caps:%s\n", line.c_str());
  }
  if (s.contains("counters") && s["counters"].is_object()) {
    const auto& c = s["counters"];
    if (!c.value("reading", false)) {
      std::printf("counters: none (the daemon does not hold the audit reader)\n");
    } else {
      std::string line;
      for (const auto& [kind, verdicts] : c["occurrences"].items()) {
        absl::StrAppend(&line, " ", kind, " allow ", verdicts.value("allow", uint64_t{0}), " deny ",
                        verdicts.value("deny", uint64_t{0}), " would-deny ", verdicts.value("would-deny", uint64_t{0}),
                        ";");
      }
      std::printf("counters (audit, since the daemon's reader started):%s lost %llu\n", line.c_str(),
                  static_cast<unsigned long long>(c.value("lost", uint64_t{0})));
    }
  }
  if (s.contains("learned") && s["learned"].contains("entries")) {
    const auto& l = s["learned"];
    std::printf("learned addresses: %llu\n", static_cast<unsigned long long>(l.value("total", uint64_t{0})));
    for (const auto& e : l["entries"]) {
      const int64_t left = e.value("expires_in_s", int64_t{0});
      std::string use = e.value("in_use", false) ? " in use" : "";
      if (e.value("socks", 0u)) absl::StrAppend(&use, " held by ", e.value("socks", 0u), " sockets");
      if (e.contains("last_used_s_ago")) absl::StrAppend(&use, " last used ", e["last_used_s_ago"].get<int64_t>(), "s ago");
      std::printf("  %-39s %s (%s) via %s%s\n", e.value("address", "").c_str(),
                  left > 0 ? absl::StrCat("expires in ", left, "s").c_str()
                           : absl::StrCat("expired ", -left, "s ago").c_str(),
                  e.value("expires_at", "").c_str(),
                  absl::StrJoin(e.value("rules", std::vector<std::string>{}), ",").c_str(), use.c_str());
    }
  }
}

}  // namespace egressd::cli
