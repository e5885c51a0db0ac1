#include "maps/resolved_table.h"

#include <bpf/bpf.h>

#include <time.h>

#include <algorithm>
#include <array>
#include <vector>

#include "absl/strings/str_cat.h"
#include "maps/map_iter.h"
#include "userspace/common/errors.h"

namespace egressd::maps {

uint64_t BootClockNs() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

egr_resolved_key ResolvedKeyOf(uint64_t sandbox, const net::IpAddr& addr) {
  egr_resolved_key k{};
  k.sandbox_id = sandbox;
  auto b = addr.ToMapped16();
  std::copy(b.begin(), b.end(), k.addr);
  return k;
}

namespace {

// name_id first, the others after it in their order, the oldest falling off.
bool WithName(egr_resolved_val& v, uint32_t name_id) {
  if (v.name_ids[0] == name_id) return false;
  uint32_t next[EGR_RESOLVED_NAMES] = {name_id};
  size_t n = 1;
  for (uint32_t id : v.name_ids) {
    if (id != 0 && id != name_id && n < EGR_RESOLVED_NAMES) next[n++] = id;
  }
  std::copy(std::begin(next), std::end(next), v.name_ids);
  return true;
}

}  // namespace

absl::Status ResolvedTable::Learn(uint64_t sandbox, const net::IpAddr& addr, uint64_t expires_boot_ns,
                                  uint32_t name_id) {
  return LearnAnswer(sandbox, addr, expires_boot_ns, name_id, 0);
}

absl::Status ResolvedTable::LearnAnswer(uint64_t sandbox, const net::IpAddr& addr, uint64_t expires_boot_ns,
                                        uint32_t name_id, uint32_t qname_id) {
  egr_resolved_key k = ResolvedKeyOf(sandbox, addr);
  egr_resolved_val v{};
  bool changed = true;
  if (bpf_map_lookup_elem(fd_, &k, &v) == 0) {
    changed = WithName(v, name_id);
    if (expires_boot_ns > v.expires_boot_ns) {
      v.expires_boot_ns = expires_boot_ns;
      changed = true;
    }
  } else {
    v = {};
    v.expires_boot_ns = expires_boot_ns;
    v.name_ids[0] = name_id;
  }
  if (qname_id != 0 && v.qname_id != qname_id) {
    v.qname_id = qname_id;
    changed = true;
  }
  const uint32_t keep_s = static_cast<uint32_t>(window_ns_ / 1'000'000'000ull);
  if (v.keep_s != keep_s) {
    v.keep_s = keep_s;  // the lifetime in force now (a config change)
    changed = true;
  }
  if (!changed) return absl::OkStatus();
  if (bpf_map_update_elem(fd_, &k, &v, BPF_ANY) != 0) {
    return ErrnoStatus(errno, absl::StrCat("learn ", addr.ToString(), " for sandbox ", sandbox, " in ", EGR_MAP_RESOLVED));
  }
  if (on_write_) on_write_(v.expires_boot_ns);
  return absl::OkStatus();
}

absl::Status ResolvedTable::Forget(uint64_t sandbox, const net::IpAddr& addr) {
  egr_resolved_key k = ResolvedKeyOf(sandbox, addr);
  if (bpf_map_delete_elem(fd_, &k) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(addr.ToString(), " for sandbox ", sandbox, " not in ", EGR_MAP_RESOLVED));
    }
    return ErrnoStatus(errno, absl::StrCat("forget ", addr.ToString(), " for sandbox ", sandbox, " in ", EGR_MAP_RESOLVED));
  }
  // The use record goes with it; a flow still holding the address keeps
  // counting into a fresh one.
  if (use_fd_ >= 0 && bpf_map_delete_elem(use_fd_, &k) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("forget ", addr.ToString(), " for sandbox ", sandbox, " in ", EGR_MAP_RESUSE));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ResolvedTable::InUse(uint64_t sandbox, const net::IpAddr& addr) const {
  auto u = Use(sandbox, addr);
  if (!u.ok()) return u.status();
  if (!*u) return false;
  return InUseAt(**u, BootClockNs(), window_ns_);
}

bool ResolvedTable::InUseAt(const egr_resuse_val& use, uint64_t now_boot_ns, uint64_t window_ns) {
  if (use.socks > 0) return true;
  return egr_sends_keep_until(use.last_used_ns, window_ns) > now_boot_ns;
}

absl::StatusOr<std::optional<egr_resolved_val>> ResolvedTable::Get(uint64_t sandbox, const net::IpAddr& addr) const {
  egr_resolved_key k = ResolvedKeyOf(sandbox, addr);
  egr_resolved_val v{};
  if (bpf_map_lookup_elem(fd_, &k, &v) == 0) return v;
  if (errno == ENOENT) return std::nullopt;
  return ErrnoStatus(errno, absl::StrCat("lookup ", addr.ToString(), " for sandbox ", sandbox, " in ", EGR_MAP_RESOLVED));
}

absl::StatusOr<std::optional<egr_resuse_val>> ResolvedTable::Use(uint64_t sandbox, const net::IpAddr& addr) const {
  if (use_fd_ < 0) return std::nullopt;
  egr_resolved_key k = ResolvedKeyOf(sandbox, addr);
  egr_resuse_val v{};
  if (bpf_map_lookup_elem(use_fd_, &k, &v) == 0) return v;
  if (errno == ENOENT) return std::nullopt;
  return ErrnoStatus(errno, absl::StrCat("lookup ", addr.ToString(), " for sandbox ", sandbox, " in ", EGR_MAP_RESUSE));
}

absl::StatusOr<uint64_t> ResolvedTable::KeepRules(uint64_t sandbox, const std::vector<uint32_t>& rule_ids,
                                                  const std::map<uint32_t, uint32_t>& by_question) {
  auto allowed = [&](uint32_t id) {
    return id != 0 && std::find(rule_ids.begin(), rule_ids.end(), id) != rule_ids.end();
  };
  uint64_t dropped = 0;
  for (auto [k, v] : AllEntries<egr_resolved_key, egr_resolved_val>(fd_)) {
    if (k.sandbox_id != sandbox || std::any_of(std::begin(v.name_ids), std::end(v.name_ids), allowed)) continue;
    if (auto q = v.qname_id == 0 ? by_question.end() : by_question.find(v.qname_id); q != by_question.end()) {
      // Answered for an exact name the new policy allows: kept under it.
      // Read again just before the write (the proxy may have extended its
      // expiry since the walk read it); BPF_EXIST: an entry collected
      // meanwhile stays gone.
      if (bpf_map_lookup_elem(fd_, &k, &v) != 0) continue;
      std::fill(std::begin(v.name_ids), std::end(v.name_ids), 0u);
      v.name_ids[0] = q->second;
      if (bpf_map_update_elem(fd_, &k, &v, BPF_EXIST) != 0 && errno != ENOENT) {
        return ErrnoStatus(errno, absl::StrCat("keep an address of a still-allowed name of sandbox ", sandbox,
                                               " in ", EGR_MAP_RESOLVED));
      }
      continue;
    }
    if (bpf_map_delete_elem(fd_, &k) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, absl::StrCat("drop the addresses of removed names of sandbox ", sandbox, " in ",
                                             EGR_MAP_RESOLVED));
    }
    if (use_fd_ >= 0 && bpf_map_delete_elem(use_fd_, &k) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, absl::StrCat("drop the addresses of removed names of sandbox ", sandbox, " in ",
                                             EGR_MAP_RESUSE));
    }
    ++dropped;
  }
  return dropped;
}

namespace {

// The entries of `keys` still there, at most `max`, with their use.
std::vector<LearnedEntry> ReadEntries(int fd, int use_fd, const std::vector<egr_resolved_key>& keys, size_t max) {
  std::vector<LearnedEntry> out;
  for (const auto& k : keys) {
    if (out.size() >= max) break;
    egr_resolved_val v{};
    if (bpf_map_lookup_elem(fd, &k, &v) != 0) continue;  // collected meanwhile
    std::array<uint8_t, 16> b;
    std::copy(k.addr, k.addr + 16, b.begin());
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const net::IpAddr a = std::equal(kMapped, kMapped + 12, b.begin())
                              ? net::IpAddr::V4({b[12], b[13], b[14], b[15]})
                              : net::IpAddr::V6(b);
    LearnedEntry e{k.sandbox_id, a, v, std::nullopt};
    egr_resuse_val u{};
    if (use_fd >= 0 && bpf_map_lookup_elem(use_fd, &k, &u) == 0) e.use = u;
    out.push_back(e);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<LearnedEntry>> ResolvedTable::List(size_t max, uint64_t* total) const {
  const auto keys = AllKeys<egr_resolved_key>(fd_);
  if (total) *total = keys.size();
  return ReadEntries(fd_, use_fd_, keys, max);
}

absl::StatusOr<std::vector<LearnedEntry>> ResolvedTable::ListSandbox(uint64_t sandbox, size_t max,
                                                                     uint64_t* total) const {
  auto keys = AllKeys<egr_resolved_key>(fd_);
  std::erase_if(keys, [&](const egr_resolved_key& k) { return k.sandbox_id != sandbox; });
  if (total) *total = keys.size();
  return ReadEntries(fd_, use_fd_, keys, max);
}

absl::Status ResolvedTable::RemoveSandbox(uint64_t sandbox) {
  for (int fd : {fd_, use_fd_}) {
    if (fd < 0) continue;
    std::vector<egr_resolved_key> doomed;
    for (const auto& k : AllKeys<egr_resolved_key>(fd)) {
      if (k.sandbox_id == sandbox) doomed.push_back(k);
    }
    for (const auto& k : doomed) {
      if (bpf_map_delete_elem(fd, &k) != 0 && errno != ENOENT) {
        return ErrnoStatus(errno, absl::StrCat("forget sandbox ", sandbox, " in ",
                                               fd == fd_ ? EGR_MAP_RESOLVED : EGR_MAP_RESUSE));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace egressd::maps
