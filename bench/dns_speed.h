// The DNS speed rows (issue 12, "Speed"): the added latency of egressd's
// proxy and of the incumbent's forwarder over asking the upstream directly,
// p50/p99 at fixed open-loop rates (1k and 5k queries/s, dnsperf -Q with
// every answer's latency from -v), allowed and denied (local NXDOMAIN) names
// apart; the highest rate each path sustains with under 1% loss (a step
// search of open-loop rates); and the time from the upstream's answer in the
// enforcer's hands to the address held by the kernel, from the enforcers' own
// timestamps (egressd: the audit record's learn_latency_ns; the forwarder:
// its SIGUSR1 dump).  Interleaved with the order rotated, as every row is.
#pragma once

#include "dns_rows.h"

namespace egressd::bench {

json DnsSpeed(DnsLab& d, bool quick, bool& all_ran);

}  // namespace egressd::bench
