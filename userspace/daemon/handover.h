// The daemons' hand-over (issue 15, docs/operations.md "Upgrades"): a new
// egressd started beside a running one (a DaemonSet rolling update with
// maxSurge 1) takes over the running one's listening sockets, never closed
// and reopened, and then its audit reader.
//
// The running daemon listens on <runtime_dir>/handover.sock (SOCK_SEQPACKET,
// mode 0600; a caller inside a sandbox cgroup is refused, as on the API).  A
// new daemon that finds daemon.lock held connects there and is sent, with
// SCM_RIGHTS, the daemon.lock fd itself (flock belongs to the open file: the
// new holds the lock from then on, and the old keeps it too until it exits),
// the API listener and every DNS endpoint's UDP socket and TCP listener.  The
// new serves them, then says "serving"; only then does the old stop reading
// them (what it read it still answers), release the audit reader (its last
// window exported, the state file saved with the last sequence number) and
// answer "released" with that number; the new takes the reader at once.
// Should the new go before "serving", the old has changed nothing and serves
// on.  The old then exits once its queries waiting on the upstream are
// answered, unpinning and detaching nothing.
//
// Wire: seqpacket messages, each one JSON object.  Old to new: {"fds": [...]}
// (each entry naming the fd carried at the same index; at most kFdsPerMessage
// per message), then {"done": n}.  New to old: {"serving": pid}.  Old to new:
// {"released": true, "seq": n}.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "userspace/common/node.h"
#include "userspace/common/unique_fd.h"
#include "userspace/daemon/peer.h"

namespace egressd::daemon {

// <runtime_dir>/handover.sock
std::string HandoverSocketPath(const Paths& paths);

// One socket handed over: what it is ({"what": "lock"|"api"|"dns", ...}) and
// the fd (the sender's, which it keeps; the receiver gets its own).
struct HandoverFd {
  nlohmann::json what;
  int fd = -1;
};

struct ReceivedFd {
  nlohmann::json what;
  UniqueFd fd;
};

// The new daemon's side.
class HandoverClient {
 public:
  // NotFound when nothing listens at the hand-over socket (no daemon runs,
  // or one that cannot hand over); other codes: the exchange failed.
  static absl::StatusOr<std::unique_ptr<HandoverClient>> Connect(const Paths& paths, int timeout_ms);
  ~HandoverClient();

  std::vector<ReceivedFd>& fds() { return fds_; }
  // The first received fd whose "what" is `what` (invalid when none).
  UniqueFd Take(const std::string& what);
  pid_t old_pid() const { return old_pid_; }
  // Tells the old daemon this one serves every socket it was sent.
  absl::Status SendServing();
  // Waits on `io` for the old daemon's "released" (its last audit seq), or
  // its going: `done` gets the seq or why not.
  void AwaitReleased(boost::asio::io_context& io, std::function<void(absl::StatusOr<uint64_t>)> done);

 private:
  UniqueFd conn_;
  pid_t old_pid_ = 0;
  std::vector<ReceivedFd> fds_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> readable_;
};

// The running daemon's side, on its loop.
class HandoverServer {
 public:
  struct Hooks {
    // What to hand over, asked at each new daemon's connect.
    std::function<std::vector<HandoverFd>()> sockets;
    // The new daemon serves: stop reading, release the audit reader;
    // returns its last sequence number.  Called once.
    std::function<absl::StatusOr<uint64_t>()> superseded;
    IsSandboxed sandboxed;
  };
  // Binds `path` (a stale file there is replaced), mode 0600.
  static absl::StatusOr<std::unique_ptr<HandoverServer>> Listen(boost::asio::io_context& io, const std::string& path,
                                                               Hooks hooks);
  ~HandoverServer();
  // Hand-overs that failed because the new daemon went (or misbehaved)
  // before it said it serves.
  uint64_t aborted() const { return aborted_; }
  bool done() const { return done_; }

 private:
  HandoverServer(boost::asio::io_context& io, Hooks hooks) : io_(io), hooks_(std::move(hooks)) {}
  void AcceptNext();
  void OnConnect(UniqueFd conn);
  void AwaitServing();
  void Abort(const std::string& why);

  boost::asio::io_context& io_;
  Hooks hooks_;
  std::string path_;
  UniqueFd listener_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> accept_wait_;
  UniqueFd conn_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> conn_wait_;
  uint64_t aborted_ = 0;
  bool done_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace egressd::daemon
