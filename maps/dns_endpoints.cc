#include "maps/dns_endpoints.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "maps/egressd_abi.h"
#include "maps/map_iter.h"
#include "maps/pinned_maps.h"
#include "userspace/common/errors.h"

namespace egressd::maps {
namespace {

egr_dnsep_key KeyOf(const net::IpAddr& a, uint16_t port) {
  egr_dnsep_key k{};
  auto b = a.ToMapped16();
  std::memcpy(k.addr, b.data(), 16);
  k.port = htons(port);
  return k;
}

std::vector<egr_dnsep_key> KeysOf(const DnsEndpoint& ep) {
  std::vector<egr_dnsep_key> keys;
  if (ep.addr4) keys.push_back(KeyOf(*ep.addr4, ep.port));
  if (ep.addr6) keys.push_back(KeyOf(*ep.addr6, ep.port));
  return keys;
}

bool SameKey(const egr_dnsep_key& a, const egr_dnsep_key& b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

std::string Describe(const egr_dnsep_key& k) {
  std::array<uint8_t, 16> b;
  std::memcpy(b.data(), k.addr, 16);
  net::IpAddr a = net::IpAddr::V6(b);
  return a.is_v4() ? absl::StrCat(a.ToString(), ":", ntohs(k.port))
                   : absl::StrCat("[", a.ToString(), "]:", ntohs(k.port));
}

DnsEndpoint FromValue(const egr_dns_val& v) {
  DnsEndpoint ep;
  ep.port = ntohs(v.port);
  if (v.addr4) {
    std::array<uint8_t, 4> b;
    std::memcpy(b.data(), &v.addr4, 4);
    ep.addr4 = net::IpAddr::V4(b);
  }
  std::array<uint8_t, 16> b6;
  std::memcpy(b6.data(), v.addr6, 16);
  if (b6 != std::array<uint8_t, 16>{}) ep.addr6 = net::IpAddr::V6(b6);
  return ep;
}

}  // namespace

absl::StatusOr<DnsEndpoints> DnsEndpoints::Open(const std::string& pin_root) {
  DnsEndpoints d;
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_DNS, d.dns_));
  EGR_RETURN_IF_ERROR(OpenPinnedMap(pin_root, EGR_MAP_DNSEP, d.dnsep_));
  return d;
}

absl::Status DnsEndpoints::Set(uint64_t sandbox_id, const DnsEndpoint& ep) {
  if (ep.port == 0 || ep.port == 53) {
    return absl::InvalidArgumentError(absl::StrCat("DNS endpoint port ", ep.port, " of sandbox ", sandbox_id,
                                                   ": must be 1-65535 and not 53"));
  }
  if (!ep.addr4 && !ep.addr6) {
    return absl::InvalidArgumentError(absl::StrCat("DNS endpoint of sandbox ", sandbox_id, " has no address"));
  }
  if ((ep.addr4 && !ep.addr4->is_v4()) || (ep.addr6 && ep.addr6->is_v4())) {
    return absl::InvalidArgumentError(
        absl::StrCat("DNS endpoint of sandbox ", sandbox_id, ": addr4 must be IPv4 and addr6 IPv6"));
  }
  const std::vector<egr_dnsep_key> keys = KeysOf(ep);
  for (const auto& k : keys) {
    egr_dnsep_val owner{};
    if (bpf_map_lookup_elem(dnsep_.get(), &k, &owner) == 0) {
      if (owner.sandbox_id != sandbox_id) {
        return absl::AlreadyExistsError(absl::StrCat("DNS endpoint ", Describe(k), " is sandbox ",
                                                     owner.sandbox_id, "'s (", EGR_MAP_DNSEP, ")"));
      }
    } else if (errno != ENOENT) {
      return ErrnoStatus(errno, absl::StrCat("lookup ", Describe(k), " in ", EGR_MAP_DNSEP));
    }
  }
  EGR_ASSIGN_OR_RETURN(std::optional<DnsEndpoint> old, Get(sandbox_id));

  // 1. The guards.
  egr_dnsep_val owner{.sandbox_id = sandbox_id};
  for (const auto& k : keys) {
    if (bpf_map_update_elem(dnsep_.get(), &k, &owner, BPF_ANY) != 0) {
      return ErrnoStatus(errno, absl::StrCat("write ", Describe(k), " of sandbox ", sandbox_id, " to ", EGR_MAP_DNSEP));
    }
  }
  // 2. The redirect target.
  egr_dns_val v{};
  if (ep.addr4) std::memcpy(&v.addr4, ep.addr4->bytes().data(), 4);
  if (ep.addr6) std::memcpy(v.addr6, ep.addr6->bytes().data(), 16);
  v.port = htons(ep.port);
  if (bpf_map_update_elem(dns_.get(), &sandbox_id, &v, BPF_ANY) != 0) {
    return ErrnoStatus(errno, absl::StrCat("write the DNS endpoint of sandbox ", sandbox_id, " to ", EGR_MAP_DNS));
  }
  // 3. The old endpoint's guards that the new one does not reuse.
  if (old) {
    for (const auto& k : KeysOf(*old)) {
      bool kept = false;
      for (const auto& n : keys) kept = kept || SameKey(k, n);
      if (!kept && bpf_map_delete_elem(dnsep_.get(), &k) != 0 && errno != ENOENT) {
        return ErrnoStatus(errno, absl::StrCat("remove ", Describe(k), " from ", EGR_MAP_DNSEP));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status DnsEndpoints::Remove(uint64_t sandbox_id) {
  EGR_ASSIGN_OR_RETURN(std::optional<DnsEndpoint> old, Get(sandbox_id));
  if (!old) return absl::OkStatus();
  if (bpf_map_delete_elem(dns_.get(), &sandbox_id) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("remove the DNS endpoint of sandbox ", sandbox_id, " from ", EGR_MAP_DNS));
  }
  for (const auto& k : KeysOf(*old)) {
    egr_dnsep_val owner{};
    if (bpf_map_lookup_elem(dnsep_.get(), &k, &owner) != 0 || owner.sandbox_id != sandbox_id) continue;
    if (bpf_map_delete_elem(dnsep_.get(), &k) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, absl::StrCat("remove ", Describe(k), " from ", EGR_MAP_DNSEP));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<DnsEndpoint>> DnsEndpoints::Get(uint64_t sandbox_id) const {
  egr_dns_val v{};
  if (bpf_map_lookup_elem(dns_.get(), &sandbox_id, &v) == 0) return FromValue(v);
  if (errno == ENOENT) return std::nullopt;
  return ErrnoStatus(errno, absl::StrCat("lookup sandbox ", sandbox_id, " in ", EGR_MAP_DNS));
}

absl::StatusOr<std::vector<DnsEndpointEntry>> DnsEndpoints::List() const {
  std::vector<DnsEndpointEntry> out;
  for (const auto& [id, v] : AllEntries<uint64_t, egr_dns_val>(dns_.get())) out.push_back({id, FromValue(v)});
  return out;
}

absl::Status DnsEndpoints::RemoveOrphanGuards() {
  for (const auto& [k, owner] : AllEntries<egr_dnsep_key, egr_dnsep_val>(dnsep_.get())) {
    // egressd's own (SetOwnGuards, the upstream sockets'): no forward entry.
    if (owner.sandbox_id == 0 || owner.sandbox_id == kUpstreamGuardOwner) continue;
    EGR_ASSIGN_OR_RETURN(std::optional<DnsEndpoint> ep, Get(owner.sandbox_id));
    bool named = false;
    if (ep) {
      for (const auto& n : KeysOf(*ep)) named = named || SameKey(k, n);
    }
    if (named) continue;
    if (bpf_map_delete_elem(dnsep_.get(), &k) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, absl::StrCat("remove orphan ", Describe(k), " from ", EGR_MAP_DNSEP));
    }
  }
  return absl::OkStatus();
}

absl::Status DnsEndpoints::SetOwnGuards(const std::vector<std::pair<net::IpAddr, uint16_t>>& own) {
  std::vector<egr_dnsep_key> keys;
  for (const auto& [addr, port] : own) keys.push_back(KeyOf(addr, port));
  const egr_dnsep_val none{.sandbox_id = 0};
  for (const auto& k : keys) {
    egr_dnsep_val owner{};
    if (bpf_map_lookup_elem(dnsep_.get(), &k, &owner) == 0 && owner.sandbox_id != 0) {
      return absl::AlreadyExistsError(absl::StrCat(Describe(k), " is sandbox ", owner.sandbox_id,
                                                   "'s DNS endpoint (", EGR_MAP_DNSEP, ")"));
    }
    if (bpf_map_update_elem(dnsep_.get(), &k, &none, BPF_ANY) != 0) {
      return ErrnoStatus(errno, absl::StrCat("write egressd's own ", Describe(k), " to ", EGR_MAP_DNSEP));
    }
  }
  for (const auto& [k, owner] : AllEntries<egr_dnsep_key, egr_dnsep_val>(dnsep_.get())) {
    if (owner.sandbox_id != 0) continue;
    bool kept = false;
    for (const auto& n : keys) kept = kept || SameKey(k, n);
    if (!kept && bpf_map_delete_elem(dnsep_.get(), &k) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, absl::StrCat("remove egressd's old ", Describe(k), " from ", EGR_MAP_DNSEP));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<net::IpAddr, uint16_t>>> DnsEndpoints::OwnGuards() const {
  std::vector<std::pair<net::IpAddr, uint16_t>> out;
  for (const auto& [k, owner] : AllEntries<egr_dnsep_key, egr_dnsep_val>(dnsep_.get())) {
    if (owner.sandbox_id != 0) continue;
    std::array<uint8_t, 16> b;
    std::memcpy(b.data(), k.addr, 16);
    out.emplace_back(net::IpAddr::V6(b), ntohs(k.port));
  }
  return out;
}

absl::Status DnsEndpoints::AddUpstreamGuard(const net::IpAddr& addr, uint16_t port) {
  const egr_dnsep_key k = KeyOf(addr, port);
  const egr_dnsep_val owner{.sandbox_id = kUpstreamGuardOwner};
  if (bpf_map_update_elem(dnsep_.get(), &k, &owner, BPF_NOEXIST) == 0) return absl::OkStatus();
  if (errno == EEXIST) {
    egr_dnsep_val held{};
    const uint64_t by = bpf_map_lookup_elem(dnsep_.get(), &k, &held) == 0 ? held.sandbox_id : 0;
    return absl::AlreadyExistsError(absl::StrCat(Describe(k), " is guarded already (owner ", by, ") in ", EGR_MAP_DNSEP));
  }
  return ErrnoStatus(errno, absl::StrCat("write the upstream socket's guard ", Describe(k), " to ", EGR_MAP_DNSEP));
}

absl::Status DnsEndpoints::RemoveUpstreamGuard(const net::IpAddr& addr, uint16_t port) {
  const egr_dnsep_key k = KeyOf(addr, port);
  egr_dnsep_val owner{};
  if (bpf_map_lookup_elem(dnsep_.get(), &k, &owner) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, absl::StrCat("lookup ", Describe(k), " in ", EGR_MAP_DNSEP));
  }
  if (owner.sandbox_id != kUpstreamGuardOwner) return absl::OkStatus();
  if (bpf_map_delete_elem(dnsep_.get(), &k) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("remove the upstream socket's guard ", Describe(k), " from ", EGR_MAP_DNSEP));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<net::IpAddr, uint16_t>>> DnsEndpoints::UpstreamGuards() const {
  std::vector<std::pair<net::IpAddr, uint16_t>> out;
  for (const auto& [k, owner] : AllEntries<egr_dnsep_key, egr_dnsep_val>(dnsep_.get())) {
    if (owner.sandbox_id != kUpstreamGuardOwner) continue;
    std::array<uint8_t, 16> b;
    std::memcpy(b.data(), k.addr, 16);
    out.emplace_back(net::IpAddr::V6(b), ntohs(k.port));
  }
  return out;
}

namespace {

// Whether some socket holds addr:port in `type` (a bind there is EADDRINUSE).
bool PortHeld(const net::IpAddr& addr, uint16_t port, int type) {
  sockaddr_storage ss{};
  socklen_t len;
  if (addr.is_v4()) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    std::memcpy(&a->sin_addr, addr.bytes().data(), 4);
    len = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    std::memcpy(&a->sin6_addr, addr.bytes().data(), 16);
    len = sizeof(*a);
  }
  UniqueFd fd(socket(ss.ss_family, type | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return true;  // cannot tell: kept
  const int one = 1;
  // The address may be gone from the node (a socket bound to it may live).
  setsockopt(fd.get(), SOL_IP, IP_FREEBIND, &one, sizeof(one));
  return bind(fd.get(), reinterpret_cast<const sockaddr*>(&ss), len) != 0 && errno == EADDRINUSE;
}

}  // namespace

absl::StatusOr<int> DnsEndpoints::RemoveStaleUpstreamGuards() {
  EGR_ASSIGN_OR_RETURN(auto guards, UpstreamGuards());
  int removed = 0;
  for (const auto& [addr, port] : guards) {
    if (PortHeld(addr, port, SOCK_DGRAM) || PortHeld(addr, port, SOCK_STREAM)) continue;
    EGR_RETURN_IF_ERROR(RemoveUpstreamGuard(addr, port));
    ++removed;
  }
  return removed;
}

}  // namespace egressd::maps
