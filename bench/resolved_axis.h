// The resolved-address axis: 10, 1k, 100k resolved addresses held for one
// sandbox (egressd: its entries of egr_resolved_v1, written through the maps
// layer as the proxy writes them; the incumbent: as many elements in the
// pod's nft timeout set), and at each size:
//   - connect + accept + close to a resolved address (row 1's loop), rate and
//     CPU per connection as ratios to no filter;
//   - adding one resolved address: one map write (ResolvedTable::Learn) vs one
//     nft transaction (libnftables, as the forwarder commits an answer);
//   - from DNS answer to connection allowed: a client asks a name no enforcer
//     has learned and connects to its answer at once; the query-to-connected
//     time, and the time from the answer to the connect's success (a connect
//     refused there would be an answer released before its address).
#pragma once

#include <vector>

#include "bench_stats.h"
#include "dns_rows.h"
#include "egressd_env.h"

namespace egressd::bench {

json ResolvedAxis(test::Egressd& e, DnsLab& d, const std::vector<int>& sizes, bool quick, bool& all_ran);

// The entries axis's combined cell (100k CIDRs + 10k resolved, names on): n
// addresses of 198.18.0.0/15 held for `sandbox` under the name rule `scope`,
// egressd's written one by one through maps::ResolvedTable (as the proxy
// learns), the incumbent's as n elements of its resolved4 timeout set in
// nft_netns (one libnftables transaction).  Never connected to.  Writes the
// fill times into out; an error names the side that failed.
absl::Status FillResolvedBoth(test::Egressd& e, uint64_t sandbox, const std::string& scope,
                              const std::string& nft_netns, int n, json& out);

}  // namespace egressd::bench
