// The incumbent's half of "map first": resolved addresses written into the
// pod's nftables timeout sets (`egressctl policy compile -o nft`'s resolved4
// and resolved6) with libnftables, in the caller's network namespace.  Every
// Commit() is one transaction (one netlink batch: all of it or none), which is
// what an expert forwarder does per answer; the seeds do not say whether their
// sidecar links libnftables or runs `nft`, and the library is the faster of
// the two (no fork, no exec, no ruleset parse of its own).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "userspace/dns/learner.h"
#include "userspace/net/ip.h"

struct nft_ctx;

namespace egressd::bench {

class NftResolvedSet {
 public:
  // A libnftables context for `table` (family inet) in the calling thread's
  // network namespace.
  static absl::StatusOr<std::unique_ptr<NftResolvedSet>> Open(const std::string& table);
  ~NftResolvedSet();
  NftResolvedSet(const NftResolvedSet&) = delete;
  NftResolvedSet& operator=(const NftResolvedSet&) = delete;

  // Queues `addr` with its own timeout (at least 1 s).
  void Add(const net::IpAddr& addr, uint64_t timeout_s);
  size_t pending() const { return v4_.size() + v6_.size(); }
  // One transaction adding every queued element (nothing when none is
  // queued); the queue is empty afterwards, whatever the outcome.  The error
  // carries nft's own message.
  absl::Status Commit();
  // Runs `commands` as one transaction (the benchmark's fills).
  absl::Status Run(const std::string& commands);

 private:
  NftResolvedSet(nft_ctx* ctx, std::string table) : ctx_(ctx), table_(std::move(table)) {}
  nft_ctx* ctx_;
  std::string table_;
  std::vector<std::string> v4_, v6_;
};

// The forwarder's sink: Learn() queues into the set and always succeeds;
// Commit() is the answer's one transaction, and the answer is released only
// after it returned OK (SERVFAIL otherwise, as egressd's proxy answers when
// no address could be allowed).
class NftLearnedSink : public dns::LearnedAddressSink {
 public:
  explicit NftLearnedSink(NftResolvedSet& set) : set_(set) {}
  absl::Status Learn(uint64_t sandbox, const net::IpAddr& addr, uint64_t expires_boot_ns,
                     uint32_t name_id) override;
  // The incumbent's set has no eviction but its elements' own timeouts.
  absl::Status Forget(uint64_t, const net::IpAddr& addr) override {
    return absl::UnimplementedError("the incumbent's timeout set does not evict " + addr.ToString());
  }
  // The incumbent knows nothing of flows.
  absl::StatusOr<bool> InUse(uint64_t, const net::IpAddr&) const override { return false; }
  absl::Status Commit() { return set_.Commit(); }
  size_t pending() const { return set_.pending(); }

 private:
  NftResolvedSet& set_;
};

// The incumbent's DNS plumbing added to a pod's `compile -o nft` ruleset, in
// the same transaction: a first rule accepting packets with the forwarder's
// mark (its own upstream queries, also exempt from conntrack), and a
// `nat output` chain (table
// egr_dns_redirect) sending every other port-53 packet of the pod to the
// forwarder's port on loopback; nat runs before the filter, which then sees
// a loopback destination.  `mark`: hex without 0x.
inline constexpr const char* kNftRedirectTable = "egr_dns_redirect";
std::string WithDnsRedirect(const std::string& ruleset, const std::string& mark, uint16_t port,
                            const std::string& table = "egressd_sandbox");

}  // namespace egressd::bench
