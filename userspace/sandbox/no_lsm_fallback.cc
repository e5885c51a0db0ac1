#include "userspace/sandbox/no_lsm_fallback.h"

#include <seccomp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"
#include "userspace/common/unique_fd.h"

namespace egressd::sandbox {
namespace {

// The families a sandbox may create, as bpf/lib/lsm_socket.h allows them
// (bar AF_PACKET, which seccomp cannot make receive-only).
constexpr uint64_t kAllowedFamilies[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};
constexpr uint64_t kHighestAllowed = AF_NETLINK;
constexpr uint64_t kSockTypeMask = 0xf;  // SOCK_TYPE_MASK: the type without SOCK_CLOEXEC/NONBLOCK

bool Allowed(uint64_t family) {
  for (uint64_t f : kAllowedFamilies) {
    if (f == family) return true;
  }
  return false;
}

struct FilterDeleter {
  void operator()(scmp_filter_ctx ctx) const { seccomp_release(ctx); }
};
using Filter = std::unique_ptr<void, FilterDeleter>;

absl::Status RuleStatus(int rc, const std::string& what) {
  if (rc == 0) return absl::OkStatus();
  return ErrnoStatus(-rc, "seccomp: " + what);
}

// EPERM for `syscall` whenever its first argument (the family) is not
// allowed. A rule compares one argument once, so the complement of the
// allowlist is spelled out: each refused value below the highest allowed
// one, then everything above it (compared as 64 bits, so a family with
// high bits set is refused too, whatever the kernel would truncate it to).
absl::Status RefuseOtherFamilies(scmp_filter_ctx ctx, int syscall, const char* name) {
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  for (uint64_t family = 0; family < kHighestAllowed; ++family) {
    if (Allowed(family)) continue;
    EGR_RETURN_IF_ERROR(RuleStatus(seccomp_rule_add(ctx, eperm, syscall, 1, SCMP_A0(SCMP_CMP_EQ, family)),
                                   absl::StrCat(name, " family ", family)));
  }
  return RuleStatus(seccomp_rule_add(ctx, eperm, syscall, 1, SCMP_A0(SCMP_CMP_GT, kHighestAllowed)),
                    absl::StrCat(name, " families above ", kHighestAllowed));
}

// Landlock's uapi as of ABI 6 (Linux 6.12); Debian 12's headers predate it.
struct LandlockRulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};
constexpr uint32_t kLandlockCreateRulesetVersion = 1u << 0;
constexpr uint64_t kLandlockScopeAbstractUnixSocket = 1ull << 0;
constexpr long kLandlockAbiWithScopes = 6;

long LandlockAbi() {
#ifdef SYS_landlock_create_ruleset
  return syscall(SYS_landlock_create_ruleset, nullptr, 0, kLandlockCreateRulesetVersion);
#else
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

absl::Status InstallSocketFamilyFilter() {
  Filter ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return absl::InternalError("seccomp_init failed");
  EGR_RETURN_IF_ERROR(RuleStatus(seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS),
                                 "kill other architectures' syscalls"));
  EGR_RETURN_IF_ERROR(RefuseOtherFamilies(ctx.get(), SCMP_SYS(socket), "socket"));
  EGR_RETURN_IF_ERROR(RefuseOtherFamilies(ctx.get(), SCMP_SYS(socketpair), "socketpair"));
  // socket(AF_INET, SOCK_PACKET) is an AF_PACKET socket to the kernel.
  EGR_RETURN_IF_ERROR(RuleStatus(
      seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 2, SCMP_A0(SCMP_CMP_EQ, AF_INET),
                       SCMP_A1(SCMP_CMP_MASKED_EQ, kSockTypeMask, SOCK_PACKET)),
      "socket AF_INET SOCK_PACKET"));
  for (int sys : {SCMP_SYS(io_uring_setup), SCMP_SYS(io_uring_enter), SCMP_SYS(io_uring_register)}) {
    EGR_RETURN_IF_ERROR(RuleStatus(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), sys, 0), "io_uring"));
  }
  return RuleStatus(seccomp_load(ctx.get()), "load the filter");
}

bool AbstractUnixScopeAvailable() { return LandlockAbi() >= kLandlockAbiWithScopes; }

absl::Status ScopeAbstractUnixSockets() {
#ifdef SYS_landlock_create_ruleset
  LandlockRulesetAttr attr{};
  attr.scoped = kLandlockScopeAbstractUnixSocket;
  UniqueFd ruleset(static_cast<int>(syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0)));
  if (!ruleset.valid()) return ErrnoStatus(errno, "landlock_create_ruleset (abstract unix scope)");
  if (syscall(SYS_landlock_restrict_self, ruleset.get(), 0) != 0) return ErrnoStatus(errno, "landlock_restrict_self");
  return absl::OkStatus();
#else
  return ErrnoStatus(ENOSYS, "landlock_create_ruleset");
#endif
}

}  // namespace egressd::sandbox
