#include "userspace/dns/learner.h"

#include <ctime>

namespace egressd::dns {

uint64_t BootTimeNs() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace egressd::dns
