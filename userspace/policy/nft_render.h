// A compiled policy rendered as the nftables ruleset an expert would write for
// the incumbent (an nftables table in each sandbox pod's network namespace),
// so the benchmarks and the differential test compare egressd against the
// same policy, not against a strawman.  Pure text: nothing here runs nft.
//
// The ruleset judges what egressd judges, in the same order:
//   established/related flows first (egressd judges a flow at connect()),
//   loopback destinations of the pod's own netns (127/8, ::1) allowed,
//   protected ranges (v4, v6, and v4 behind the NAT64 prefix 64:ff9b::/96)
//   denied, allowed CIDRs (every port: interval sets; with ports: one
//   `addr . inet_service` interval set per family, its elements split so no
//   two overlap, because the union of every matching entry's ports is what
//   egressd allows), resolved addresses (timeout sets, every port), and the
//   default verdict as the chain's policy.
// An IPv4-mapped destination needs no rule: the kernel sends it as an IPv4
// packet, which the `ip` rules judge, as egressd judges it as IPv4.
#ifndef EGRESSD_USERSPACE_POLICY_NFT_RENDER_H_
#define EGRESSD_USERSPACE_POLICY_NFT_RENDER_H_

#include <string>

#include "userspace/net/ip.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::policy {

inline constexpr const char* kNftDefaultTable = "egressd_sandbox";

// Set names, for callers that add elements later (the DNS forwarder half).
inline constexpr const char* kNftResolved4Set = "resolved4";
inline constexpr const char* kNftResolved6Set = "resolved6";

// One `nft -f` transaction: declares the table (so the delete cannot fail on
// a first apply), deletes it, and creates it whole, so a re-apply replaces
// the previous ruleset atomically.  `table` must be a valid nft identifier
// (letters, digits, '_'); the caller chooses it.
std::string RenderNft(const CompiledPolicy& policy, const std::string& table = kNftDefaultTable);

// One `nft -f` transaction adding a resolved address for `timeout_s` seconds.
std::string RenderNftAddResolved(const net::IpAddr& addr, unsigned timeout_s,
                                 const std::string& table = kNftDefaultTable);

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_NFT_RENDER_H_
