#include "userspace/dns/learner.h"

#include <ctime>

namespace egressd::dns {

Lifetime LifetimeOf(const policy::DnsSettings& d) {
  Lifetime l;
  if (d.min_ttl_s) l.min_ttl_s = *d.min_ttl_s;
  if (d.grace_s) l.grace_s = *d.grace_s;
  return l;
}

uint64_t BootTimeNs() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace egressd::dns
