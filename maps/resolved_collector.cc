#include "maps/resolved_collector.h"

#include <bpf/bpf.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "maps/egressd_abi.h"
#include "maps/map_iter.h"
#include "spdlog/spdlog.h"
#include "userspace/common/errors.h"
#include "maps/resolved_table.h"

namespace egressd::maps {
namespace {

struct KeyHash {
  size_t operator()(const egr_resolved_key& k) const {
    return absl::HashOf(k.sandbox_id, absl::string_view(reinterpret_cast<const char*>(k.addr), sizeof(k.addr)));
  }
};
struct KeyEq {
  bool operator()(const egr_resolved_key& a, const egr_resolved_key& b) const {
    return a.sandbox_id == b.sandbox_id && std::equal(a.addr, a.addr + 16, b.addr);
  }
};

// Deletes `keys` from `fd` in batches; a key already gone is no error.
absl::Status DeleteAll(int fd, std::vector<egr_resolved_key>& keys, const char* map) {
  constexpr size_t kBatch = 4096;
  for (size_t i = 0; i < keys.size(); i += kBatch) {
    __u32 n = static_cast<__u32>(std::min(kBatch, keys.size() - i));
    if (bpf_map_delete_batch(fd, &keys[i], &n, nullptr) == 0) continue;
    // The batch stops at the first key that is gone (ENOENT): the rest one
    // by one.
    for (size_t j = i + n; j < std::min(keys.size(), i + kBatch); ++j) {
      if (bpf_map_delete_elem(fd, &keys[j]) != 0 && errno != ENOENT) {
        return ErrnoStatus(errno, absl::StrCat("collect expired entries of ", map));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SweepResult> SweepResolved(int resolved_fd, int use_fd, uint64_t now) {
  SweepResult r;
  absl::flat_hash_map<egr_resolved_key, egr_resuse_val, KeyHash, KeyEq> use;
  for (const auto& [k, u] : AllEntries<egr_resolved_key, egr_resuse_val>(use_fd)) use.emplace(k, u);

  std::vector<egr_resolved_key> doomed, doomed_use;
  auto earliest = [&](uint64_t t) {
    if (!r.next_deadline_ns || t < *r.next_deadline_ns) r.next_deadline_ns = t;
  };
  for (const auto& [k, v] : AllEntries<egr_resolved_key, egr_resolved_val>(resolved_fd)) {
    auto u = use.find(k);
    // As the programs judge it (verdict.h).  A send between this sweep's
    // clock and its read of the map stamps the record after `now`.
    const uint64_t sends_keep_until =
        u == use.end() ? 0 : egr_sends_keep_until(u->second.last_used_ns, uint64_t{v.keep_s} * 1'000'000'000ull);
    if (v.expires_boot_ns > now) {
      earliest(v.expires_boot_ns);
      ++r.live;
    } else if (u != use.end() && u->second.socks > 0) {
      r.held_expired = true;  // until the last holder is released
      ++r.kept_in_use;
      ++r.live;
    } else if (sends_keep_until > now) {
      earliest(sends_keep_until);
      ++r.kept_in_use;
      ++r.live;
    } else {
      doomed.push_back(k);
      if (u != use.end()) doomed_use.push_back(k);
    }
    if (u != use.end()) use.erase(u);
  }
  // A use record whose entry is gone (forgotten, or a sandbox removed) and
  // that no socket holds.
  for (const auto& [k, u] : use) {
    if (u.socks == 0) {
      doomed_use.push_back(k);
      ++r.use_orphans;
    }
  }
  r.collected = doomed.size();
  EGR_RETURN_IF_ERROR(DeleteAll(resolved_fd, doomed, EGR_MAP_RESOLVED));
  EGR_RETURN_IF_ERROR(DeleteAll(use_fd, doomed_use, EGR_MAP_RESUSE));
  return r;
}

ResolvedCollector::ResolvedCollector(boost::asio::io_context& io, int resolved_fd, int use_fd, Options opts,
                                     std::function<void(const absl::StatusOr<SweepResult>&)> on_sweep)
    : timer_(io), resolved_fd_(resolved_fd), use_fd_(use_fd), opts_(opts), on_sweep_(std::move(on_sweep)) {}

ResolvedCollector::~ResolvedCollector() { Stop(); }

void ResolvedCollector::Start() {
  stopped_ = false;
  SweepAndArm();
}

void ResolvedCollector::Stop() {
  stopped_ = true;
  wake_boot_ns_ = 0;
  timer_.cancel();
}

void ResolvedCollector::SweepAndArm() {
  if (stopped_) return;
  const uint64_t now = BootClockNs();
  auto r = SweepResolved(resolved_fd_, use_fd_, now);
  ++sweeps_;
  uint64_t wait = opts_.max_interval_ns;
  if (r.ok()) {
    collected_ += r->collected;
    if (r->collected) spdlog::debug("collected {} expired learned addresses ({} in use kept)", r->collected, r->kept_in_use);
    // An entry learned after this sweep may expire before the deadline
    // found here: it is collected at the latest max_interval after (the
    // programs deny new flows to it at its expiry whatever the collector).
    if (r->next_deadline_ns) wait = std::min(wait, *r->next_deadline_ns - now);
  } else {
    spdlog::warn("collecting expired learned addresses: {}", r.status().ToString());
  }
  last_sweep_ns_ = now;
  if (on_sweep_) on_sweep_(r);
  Arm(now + std::max(wait, opts_.min_interval_ns));
}

void ResolvedCollector::Expect(uint64_t deadline_ns) {
  if (stopped_ || (wake_boot_ns_ != 0 && deadline_ns >= wake_boot_ns_)) return;
  Arm(std::max(deadline_ns, last_sweep_ns_ + opts_.min_interval_ns));
}

void ResolvedCollector::Arm(uint64_t wake_boot_ns) {
  const uint64_t now = BootClockNs();
  wake_boot_ns_ = wake_boot_ns;
  const uint64_t gen = ++arms_;
  timer_.expires_after(std::chrono::nanoseconds(wake_boot_ns > now ? wake_boot_ns - now : 0));
  // A re-arm cancels the wait it replaces, or, if that one already fired
  // and is queued, makes it a no-op: one chain of sweeps.
  timer_.async_wait([this, gen](const boost::system::error_code& ec) {
    if (!ec && gen == arms_) SweepAndArm();
  });
}

}  // namespace egressd::maps
