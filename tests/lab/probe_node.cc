// Operations on the node's own objects, as root in a sandbox would try them:
// open a file for writing without writing it (core_pattern must never be
// written, only proven writable), and talk to a pathname unix socket.
#include <fcntl.h>
#include <poll.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

#include "probe_common.h"

namespace egressd::probe {

void OpOpenWrite(const Op& op) {
  Json j(op.name);
  j.Str("path", op.pos[0]);
  int fd = open(op.pos[0].c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return j.Err(errno, "open").Emit();
  close(fd);
  j.Ok().Emit();
}

void OpUnixPathConnect(const Op& op) {
  Json j(op.name);
  j.Str("path", op.pos[0]);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (op.pos[0].size() >= sizeof(sa.sun_path)) return j.Err(ENAMETOOLONG, "connect").Emit();
  std::memcpy(sa.sun_path, op.pos[0].data(), op.pos[0].size());
  Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0)
    return j.Err(errno, "connect").Emit();
  const std::string payload = op.Str("payload", kDefaultPayload);
  if (send(fd.get(), payload.data(), payload.size(), MSG_NOSIGNAL) < 0) return j.Err(errno, "send").Emit();
  // The listener answers with one line and closes: "reply" is what it said.
  std::string reply;
  const long long deadline = NowMs() + op.Int("timeout-ms", kDefaultTimeoutMs);
  for (;;) {
    long long left = deadline - NowMs();
    if (left < 0 || !WaitFd(fd.get(), POLLIN, static_cast<int>(left))) return j.Err(ETIMEDOUT, "recv").Emit();
    char buf[512];
    ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    if (n < 0) return j.Err(errno, "recv").Emit();
    if (n == 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  while (!reply.empty() && reply.back() == '\n') reply.pop_back();
  j.Ok().Str("reply", reply).Emit();
}

}  // namespace egressd::probe
