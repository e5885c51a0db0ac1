#include "userspace/control/learned_view.h"

#include <time.h>

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "maps/resolved_table.h"
#include "userspace/common/errors.h"
#include "userspace/dns/scope.h"

namespace egressd::control {
namespace {

int64_t Seconds(uint64_t a, uint64_t b) {
  return static_cast<int64_t>((static_cast<__int128>(a) - b) / 1'000'000'000);
}

// A CLOCK_BOOTTIME deadline as wall-clock time.
std::string WallClock(uint64_t boot_ns, uint64_t now_boot_ns) {
  timespec rt{};
  clock_gettime(CLOCK_REALTIME, &rt);
  const absl::Time now = absl::TimeFromTimespec(rt);
  const absl::Time at = now + absl::Nanoseconds(static_cast<int64_t>(static_cast<__int128>(boot_ns) - now_boot_ns));
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", at, absl::UTCTimeZone());
}

}  // namespace

absl::StatusOr<nlohmann::json> LearnedJson(const maps::PinnedMaps& m, const std::vector<SandboxRecord>& records,
                                           const LearnedQuery& q) {
  std::map<std::pair<uint64_t, uint32_t>, std::string> rule_names;
  for (const auto& r : records) {
    if (q.sandbox && r.cgroup_id != *q.sandbox) continue;
    for (const auto* ref : {&r.current.policy, r.previous ? &r.previous->policy : nullptr}) {
      if (!ref || !*ref) continue;
      for (const auto& n : (*ref)->names) rule_names[{r.cgroup_id, dns::NameId(n.name)}] = n.name;
      for (const auto& w : (*ref)->wildcard_suffixes) {
        rule_names[{r.cgroup_id, dns::NameId("*." + w.name)}] = "*." + w.name;
      }
    }
  }
  uint64_t total = 0;
  maps::ResolvedTable table(m, q.in_use_window_ns);
  EGR_ASSIGN_OR_RETURN(auto entries,
                       q.sandbox ? table.ListSandbox(*q.sandbox, q.max, &total) : table.List(q.max, &total));
  const uint64_t now = maps::BootClockNs();
  nlohmann::json list = nlohmann::json::array();
  for (const auto& e : entries) {
    std::vector<std::string> rules;
    for (uint32_t id : e.learned.name_ids) {
      if (id == 0) continue;
      auto it = rule_names.find({e.sandbox, id});
      rules.push_back(it != rule_names.end() ? it->second : absl::StrCat("#", id));
    }
    // As the collector judges it: a connected socket holds it, or a send
    // used it within the window.
    const bool in_use = e.use && maps::ResolvedTable::InUseAt(*e.use, now, q.in_use_window_ns);
    nlohmann::json x = {{"sandbox", e.sandbox},
                        {"address", e.addr.ToString()},
                        {"expires_in_s", Seconds(e.learned.expires_boot_ns, now)},
                        {"expires_at", WallClock(e.learned.expires_boot_ns, now)},
                        {"keep_s", e.learned.keep_s},
                        {"rules", rules},
                        {"socks", e.use ? e.use->socks : 0},
                        {"in_use", in_use}};
    if (e.use && e.use->last_used_ns) x["last_used_s_ago"] = Seconds(now, e.use->last_used_ns);
    list.push_back(std::move(x));
  }
  return nlohmann::json{{"total", total}, {"shown", list.size()}, {"entries", std::move(list)}};
}

}  // namespace egressd::control
