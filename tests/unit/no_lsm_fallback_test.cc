// The seccomp filter of egressctl run's no-LSM fallback, judged syscall by
// syscall in a child process (a filter cannot be removed once installed).
// Needs no privileges: the child sets no_new_privs first. The raw-syscall
// cases are what a hostile command would try that a libc wrapper never does:
// a family with high bits set, SOCK_PACKET with flags, socketpair, io_uring.
#include <linux/io_uring.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "userspace/sandbox/no_lsm_fallback.h"

namespace egressd::sandbox {
namespace {

// The errno `call` leaves in a filtered child (0: it succeeded), or -1 if
// the child could not install the filter.
int ErrnoUnderFilter(const std::function<long()>& call) {
  pid_t pid = fork();
  if (pid == 0) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || !InstallSocketFamilyFilter().ok()) _exit(255);
    long r = call();
    _exit(r >= 0 ? 0 : (errno & 0x7f));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 255) return -1;
  return WEXITSTATUS(status);
}

long Socket(uint64_t family, uint64_t type) { return syscall(SYS_socket, family, type, 0); }

TEST(NoLsmFallback, TheFourAllowedFamiliesPass) {
  EXPECT_EQ(ErrnoUnderFilter([] { return Socket(AF_INET, SOCK_DGRAM); }), 0);
  EXPECT_EQ(ErrnoUnderFilter([] { return Socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC); }), 0);
  EXPECT_EQ(ErrnoUnderFilter([] { return Socket(AF_UNIX, SOCK_STREAM); }), 0);
  EXPECT_EQ(ErrnoUnderFilter([] { return Socket(AF_NETLINK, SOCK_RAW); }), 0);
  EXPECT_EQ(ErrnoUnderFilter([] {
              int sv[2];
              return static_cast<long>(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
            }),
            0);
}

TEST(NoLsmFallback, EveryOtherFamilyIsEperm) {
  // Every value up to past AF_MAX, then values the kernel would truncate to
  // an allowed family or reject: all refused by the filter before the kernel.
  for (uint64_t family = 0; family < 64; ++family) {
    if (family == AF_UNIX || family == AF_INET || family == AF_INET6 || family == AF_NETLINK) continue;
    EXPECT_EQ(ErrnoUnderFilter([family] { return Socket(family, SOCK_DGRAM); }), EPERM) << "family " << family;
    EXPECT_EQ(ErrnoUnderFilter([family] { return syscall(SYS_socketpair, family, SOCK_DGRAM, 0, nullptr); }), EPERM)
        << "socketpair family " << family;
  }
  for (uint64_t family : {uint64_t{1} << 32 | AF_INET, uint64_t{0xffffffff}, ~uint64_t{0}}) {
    EXPECT_EQ(ErrnoUnderFilter([family] { return Socket(family, SOCK_DGRAM); }), EPERM) << std::hex << family;
  }
}

TEST(NoLsmFallback, SockPacketIsRefusedWhateverItsFlags) {
  for (int flags : {0, int{SOCK_CLOEXEC}, int{SOCK_NONBLOCK}, SOCK_CLOEXEC | SOCK_NONBLOCK}) {
    EXPECT_EQ(ErrnoUnderFilter([flags] { return Socket(AF_INET, static_cast<uint64_t>(SOCK_PACKET | flags)); }), EPERM) << flags;
  }
}

TEST(NoLsmFallback, IoUringIsRefused) {
  EXPECT_EQ(ErrnoUnderFilter([] {
              io_uring_params p{};
              return syscall(SYS_io_uring_setup, 4, &p);
            }),
            EPERM);
  EXPECT_EQ(ErrnoUnderFilter([] { return syscall(SYS_io_uring_enter, -1, 0, 0, 0, nullptr, 0); }), EPERM);
  EXPECT_EQ(ErrnoUnderFilter([] { return syscall(SYS_io_uring_register, -1, 0, nullptr, 0); }), EPERM);
}

TEST(NoLsmFallback, OtherSyscallsAreUntouched) {
  EXPECT_EQ(ErrnoUnderFilter([] { return static_cast<long>(getpid()); }), 0);
  // EBADF, not EPERM: the kernel, not the filter, answered.
  EXPECT_EQ(ErrnoUnderFilter([] { return static_cast<long>(close(-1)); }), EBADF);
}

#if defined(__x86_64__)
// i386's int 0x80 reaches socketcall(2), whose family seccomp cannot read
// (it sits in memory): another architecture's syscalls kill the process.
long I386Syscall(long nr, long a, long b) {
  long ret;
  asm volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(a), "c"(b) : "memory");
  return ret;
}
constexpr long kI386Getpid = 20, kI386Socketcall = 102, kSysSocket = 1;

TEST(NoLsmFallback, I386SyscallsKillTheProcess) {
  // Without the filter, where the kernel runs i386 syscalls at all.
  pid_t probe = fork();
  if (probe == 0) _exit(I386Syscall(kI386Getpid, 0, 0) == getpid() ? 0 : 1);
  int status = 0;
  waitpid(probe, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) GTEST_SKIP() << "this kernel runs no i386 syscalls";
  pid_t pid = fork();
  if (pid == 0) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || !InstallSocketFamilyFilter().ok()) _exit(255);
    unsigned int args[3] = {AF_PACKET, SOCK_RAW, 0};
    I386Syscall(kI386Socketcall, kSysSocket, static_cast<long>(reinterpret_cast<uintptr_t>(args)));
    _exit(0);
  }
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) << "status " << status;
}
#endif

}  // namespace
}  // namespace egressd::sandbox
