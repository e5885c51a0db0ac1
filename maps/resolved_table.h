// egr_resolved_v2: (sandbox, address) -> allowed until expiry, by which
// rules, written by the DNS proxy for the answers to names the policy allows,
// read by the programs' verdict; egr_resuse_v1 beside it: how flows use each
// address, written by the programs.  The proxy's LearnedAddressSink.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "maps/egressd_abi.h"
#include "maps/pinned_maps.h"
#include "userspace/dns/learner.h"
#include "userspace/net/ip.h"

namespace egressd::maps {

// One learned address as status shows it.
struct LearnedEntry {
  uint64_t sandbox;
  net::IpAddr addr;
  egr_resolved_val learned;
  std::optional<egr_resuse_val> use;
};

class ResolvedTable : public dns::LearnedAddressSink {
 public:
  // in_use_window_ns: how long after its last send an address counts as in
  // use (the lifetime's grace).
  explicit ResolvedTable(const PinnedMaps& maps, uint64_t in_use_window_ns = DefaultWindowNs())
      : fd_(maps.resolved()), use_fd_(maps.resuse()), window_ns_(in_use_window_ns) {}
  // Map fds the caller keeps open (tests); use_fd -1: no flow is ever in use.
  explicit ResolvedTable(int resolved_fd, int use_fd = -1, uint64_t in_use_window_ns = DefaultWindowNs())
      : fd_(resolved_fd), use_fd_(use_fd), window_ns_(in_use_window_ns) {}

  // Writes the entry, keeping a later expiry already held (a later answer
  // never shortens one) and adding name_id to the rules that allowed it;
  // the error names the map and errno (E2BIG: full).
  absl::Status Learn(uint64_t sandbox, const net::IpAddr& addr, uint64_t expires_boot_ns,
                     uint32_t name_id) override;
  // Learn, with the entry's qname_id set to `qname_id`.
  absl::Status LearnAnswer(uint64_t sandbox, const net::IpAddr& addr, uint64_t expires_boot_ns, uint32_t name_id,
                           uint32_t qname_id) override;
  // Deletes the entry (and its use record); NotFound when there was none.
  absl::Status Forget(uint64_t sandbox, const net::IpAddr& addr) override;
  // A connected socket holds it, or a send used it within the window.
  absl::StatusOr<bool> InUse(uint64_t sandbox, const net::IpAddr& addr) const override;
  // The same judgement of a use record read at `now_boot_ns`.
  static bool InUseAt(const egr_resuse_val& use, uint64_t now_boot_ns, uint64_t window_ns);

  absl::StatusOr<std::optional<egr_resolved_val>> Get(uint64_t sandbox, const net::IpAddr& addr) const;
  absl::StatusOr<std::optional<egr_resuse_val>> Use(uint64_t sandbox, const net::IpAddr& addr) const;
  // A policy change: deletes every entry of `sandbox` (and its use record)
  // that no rule of `rule_ids` (NameId() of the new policy's names and
  // wildcards) learned, at once, flows or not; keeps the others with their
  // expiries.  An entry learned by a removed rule is kept all the same when
  // its question name (its qname_id, keyed: dns/qname_key.h) is a key of
  // `by_question`, which maps the QnameId of each exact name of the new
  // policy to that name's NameId: the address was answered for that very
  // name, which is still allowed (narrowing `*.example.com` to
  // `api.example.com`); the entry is then re-labelled with that rule, its
  // expiry kept.  Returns how many went.
  absl::StatusOr<uint64_t> KeepRules(uint64_t sandbox, const std::vector<uint32_t>& rule_ids,
                                     const std::map<uint32_t, uint32_t>& by_question = {});
  // At most `max` entries (all sandboxes), with their use; `total` (may be
  // null) gets how many there are.
  absl::StatusOr<std::vector<LearnedEntry>> List(size_t max, uint64_t* total = nullptr) const;
  // The same for one sandbox's entries; `total` gets how many it has.
  absl::StatusOr<std::vector<LearnedEntry>> ListSandbox(uint64_t sandbox, size_t max, uint64_t* total = nullptr) const;
  // Every entry of `sandbox` (its cgroup went away).
  absl::Status RemoveSandbox(uint64_t sandbox);

  // Called on the writer's thread after each write with the entry's expiry
  // (the collector re-arms for an earlier deadline).
  void OnWrite(std::function<void(uint64_t)> f) { on_write_ = std::move(f); }

  static uint64_t DefaultWindowNs() { return uint64_t{dns::Lifetime{}.grace_s} * 1'000'000'000ull; }

 private:
  int fd_;
  int use_fd_;
  uint64_t window_ns_;
  std::function<void(uint64_t)> on_write_;
};

// CLOCK_BOOTTIME now (bpf_ktime_get_boot_ns()); maps/ does not link the proxy.
uint64_t BootClockNs();

// The key both maps use.
egr_resolved_key ResolvedKeyOf(uint64_t sandbox, const net::IpAddr& addr);

}  // namespace egressd::maps
