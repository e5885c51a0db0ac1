#include "userspace/daemon/peer.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "userspace/common/unique_fd.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5 (asm-generic/socket.h)
#endif

namespace egressd::daemon {
namespace {

absl::Status Refuse(const std::string& why) { return absl::PermissionDeniedError(why); }

}  // namespace

std::string Cgroup2PathOf(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

absl::StatusOr<Peer> CheckPeer(int fd, const IsSandboxed& sandboxed) {
  Peer p;
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid <= 0) {
    return Refuse(absl::StrCat("the caller's credentials cannot be read (SO_PEERCRED: ", std::strerror(errno), ")"));
  }
  p.pid = cred.pid;
  p.uid = cred.uid;
  UniqueFd pidfd;
  int pfd = -1;
  len = sizeof(pfd);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pfd, &len) == 0 && pfd >= 0) {
    pidfd.reset(pfd);
    p.pidfd_from_socket = true;
  } else {
    pfd = static_cast<int>(syscall(SYS_pidfd_open, cred.pid, 0));
    if (pfd < 0) {
      return Refuse(absl::StrCat("the caller (pid ", cred.pid, ") is gone or cannot be opened (pidfd_open: ",
                                 std::strerror(errno), "): it cannot be verified"));
    }
    pidfd.reset(pfd);
  }
  std::ifstream in(absl::StrCat("/proc/", cred.pid, "/cgroup"));
  std::stringstream text;
  text << in.rdbuf();
  p.cgroup = Cgroup2PathOf(text.str());
  // Still the process the pidfd names: what we read was its cgroup, not a
  // successor's under a reused pid.
  if (syscall(SYS_pidfd_send_signal, pidfd.get(), 0, nullptr, 0) != 0) {
    return Refuse(absl::StrCat("the caller (pid ", cred.pid, ") exited before its request was read (",
                               std::strerror(errno), "): it cannot be verified"));
  }
  if (p.cgroup.empty()) {
    return Refuse(absl::StrCat("the caller's cgroup (pid ", cred.pid, ") cannot be read"));
  }
  if (sandboxed(p.cgroup)) {
    return Refuse(absl::StrCat("the caller (pid ", cred.pid, ", uid ", cred.uid, ") runs in cgroup ", p.cgroup,
                               ", inside a sandbox: sandboxes may not use egressd's control API"));
  }
  return p;
}

}  // namespace egressd::daemon
