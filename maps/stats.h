// egr_stats_v3: the programs' decision counters, summed over CPUs.
#pragma once

#include <array>
#include <cstdint>

#include "maps/egressd_abi.h"
#include "maps/pinned_maps.h"
#include "userspace/common/enum_names.h"

namespace egressd::maps {

using Counters = std::array<uint64_t, EGR_STAT_MAX>;

Counters ReadCounters(const PinnedMaps& maps);

// Stable names for enum egr_stat (status output, later metrics), in the
// enum's order: row i names counter i.
inline constexpr EnumNames<egr_stat, EGR_STAT_MAX> kCounterNames{{{
    {EGR_STAT_CONNECT_ALLOW, "connect_allow"},
    {EGR_STAT_CONNECT_DENY, "connect_deny"},
    {EGR_STAT_SENDMSG_ALLOW, "sendmsg_allow"},
    {EGR_STAT_SENDMSG_DENY, "sendmsg_deny"},
    {EGR_STAT_SKB_PASS, "skb_pass"},
    {EGR_STAT_SKB_DROP, "skb_drop"},
    {EGR_STAT_CONTAINED_DENY, "contained_deny"},
    {EGR_STAT_LSM_DENY, "lsm_deny"},
    {EGR_STAT_SOCKOPT_DENY, "sockopt_deny"},
    {EGR_STAT_DNS_REDIRECT, "dns_redirect"},
    {EGR_STAT_DNS_DENY, "dns_deny"},
    {EGR_STAT_EVENT_SUBMITTED, "event_submitted"},
    {EGR_STAT_EVENT_FOLDED, "event_folded"},
    {EGR_STAT_EVENT_LOST, "event_lost"},
    {EGR_STAT_WOULD_DENY, "would_deny"},
    {EGR_STAT_STRICT_DENY, "strict_deny"},
}}};
static_assert(kCounterNames.Unique());

// A counter added to enum egr_stat without a row here fails the build: the
// table's size is EGR_STAT_MAX, so the missing row is {0, ""}, out of order.
constexpr bool CounterRowsInEnumOrder() {
  for (size_t i = 0; i < kCounterNames.rows.size(); ++i) {
    if (kCounterNames.rows[i].value != static_cast<egr_stat>(i)) return false;
  }
  return true;
}
static_assert(CounterRowsInEnumOrder());

// kCounterNames' name of `stat`, "unknown" outside the enum.
const char* CounterName(int stat);

}  // namespace egressd::maps
