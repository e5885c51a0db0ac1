#include "userspace/daemon/handover.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"

namespace egressd::daemon {

namespace asio = boost::asio;

namespace {

// SCM_MAX_FD is 253; a round number below it.
constexpr size_t kFdsPerMessage = 200;
// One message's JSON: 200 endpoint descriptions fit with room.
constexpr size_t kMaxMessage = 64 << 10;

absl::Status SendMessage(int fd, const nlohmann::json& j, const std::vector<int>& fds) {
  const std::string text = j.dump();
  iovec iov{const_cast<char*>(text.data()), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  if (sendmsg(fd, &msg, MSG_NOSIGNAL) < 0) return ErrnoStatus(errno, "hand-over: sendmsg");
  return absl::OkStatus();
}

struct Message {
  nlohmann::json j;
  std::vector<UniqueFd> fds;
};

// One message, waiting up to timeout_ms (-1: as long as it takes).
absl::StatusOr<Message> RecvMessage(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  int r = poll(&p, 1, timeout_ms);
  if (r < 0) return ErrnoStatus(errno, "hand-over: poll");
  if (r == 0) return absl::DeadlineExceededError(absl::StrCat("hand-over: no message within ", timeout_ms, " ms"));
  std::string buf(kMaxMessage, '\0');
  iovec iov{buf.data(), buf.size()};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * kFdsPerMessage));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  if (n < 0) return ErrnoStatus(errno, "hand-over: recvmsg");
  Message m;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      m.fds.emplace_back(f);
    }
  }
  if (n == 0) return absl::UnavailableError("hand-over: the other daemon closed the connection");
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) return absl::DataLossError("hand-over: a message was truncated");
  m.j = nlohmann::json::parse(buf.substr(0, static_cast<size_t>(n)), nullptr, false);
  if (m.j.is_discarded() || !m.j.is_object()) return absl::DataLossError("hand-over: a message is no JSON object");
  return m;
}

}  // namespace

std::string HandoverSocketPath(const Paths& paths) { return paths.runtime_dir + "/handover.sock"; }

// ---- the new daemon's side

absl::StatusOr<std::unique_ptr<HandoverClient>> HandoverClient::Connect(const Paths& paths, int timeout_ms) {
  const std::string path = HandoverSocketPath(paths);
  auto c = std::unique_ptr<HandoverClient>(new HandoverClient());
  c->conn_.reset(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!c->conn_.valid()) return ErrnoStatus(errno, "hand-over: socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return absl::InvalidArgumentError(absl::StrCat("hand-over socket path too long: ", path));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (connect(c->conn_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno == ENOENT || errno == ECONNREFUSED) {
      return absl::NotFoundError(absl::StrCat("no daemon hands over at ", path, " (", std::strerror(errno), ")"));
    }
    return ErrnoStatus(errno, absl::StrCat("hand-over: connect ", path));
  }
  size_t expected = SIZE_MAX;
  while (c->fds_.size() < expected) {
    EGR_ASSIGN_OR_RETURN(Message m, RecvMessage(c->conn_.get(), timeout_ms));
    if (m.j.contains("refused")) {
      return absl::PermissionDeniedError(absl::StrCat("hand-over refused: ", m.j["refused"].get<std::string>()));
    }
    if (m.j.contains("done")) {
      expected = m.j["done"].get<size_t>();
      c->old_pid_ = m.j.value("pid", 0);
      if (c->fds_.size() != expected) {
        return absl::DataLossError(absl::StrCat("hand-over: ", c->fds_.size(), " fd(s) received, ", expected, " sent"));
      }
      break;
    }
    const auto& what = m.j["fds"];
    if (!what.is_array() || what.size() != m.fds.size()) {
      return absl::DataLossError(absl::StrCat("hand-over: a message names ", what.size(), " fd(s) and carries ",
                                              m.fds.size()));
    }
    for (size_t i = 0; i < m.fds.size(); ++i) c->fds_.push_back(ReceivedFd{what[i], std::move(m.fds[i])});
  }
  return c;
}

HandoverClient::~HandoverClient() {
  if (readable_) readable_->release();
}

UniqueFd HandoverClient::Take(const std::string& what) {
  for (auto& f : fds_) {
    if (f.fd.valid() && f.what.value("what", "") == what) return std::move(f.fd);
  }
  return UniqueFd();
}

absl::Status HandoverClient::SendServing() {
  return SendMessage(conn_.get(), {{"serving", getpid()}}, {});
}

void HandoverClient::AwaitReleased(asio::io_context& io, std::function<void(absl::StatusOr<uint64_t>)> done) {
  readable_ = std::make_unique<asio::posix::stream_descriptor>(io, conn_.get());
  readable_->async_wait(asio::posix::stream_descriptor::wait_read,
                        [this, done = std::move(done)](const boost::system::error_code& ec) {
                          if (ec) return done(absl::CancelledError("hand-over: " + ec.message()));
                          auto m = RecvMessage(conn_.get(), 0);
                          if (!m.ok()) return done(m.status());
                          if (!m->j.value("released", false)) {
                            return done(absl::DataLossError("hand-over: the old daemon did not release the audit reader: " +
                                                            m->j.dump()));
                          }
                          done(m->j.value("seq", uint64_t{0}));
                        });
}

// ---- the running daemon's side

absl::StatusOr<std::unique_ptr<HandoverServer>> HandoverServer::Listen(asio::io_context& io, const std::string& path,
                                                                     Hooks hooks) {
  std::unique_ptr<HandoverServer> s(new HandoverServer(io, std::move(hooks)));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return absl::InvalidArgumentError(absl::StrCat("hand-over socket path too long: ", path));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  s->listener_.reset(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s->listener_.valid()) return ErrnoStatus(errno, "hand-over: socket");
  // Bound beside a new name, then renamed over: a hand-over socket is at
  // `path` at every moment (the previous daemon's until the rename).
  const std::string temp = absl::StrCat(path, ".", getpid());
  unlink(temp.c_str());
  std::memcpy(addr.sun_path, temp.c_str(), temp.size() + 1);
  const mode_t old = umask(0177);
  int r = bind(s->listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  umask(old);
  if (r != 0) return ErrnoStatus(errno, absl::StrCat("hand-over: bind ", temp));
  if (chmod(temp.c_str(), 0600) != 0 || listen(s->listener_.get(), 4) != 0 || rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(temp.c_str());
    return ErrnoStatus(err, absl::StrCat("hand-over: listen on ", path));
  }
  s->path_ = path;
  s->accept_wait_ = std::make_unique<asio::posix::stream_descriptor>(io, s->listener_.get());
  s->AcceptNext();
  return s;
}

HandoverServer::~HandoverServer() {
  *alive_ = false;
  if (accept_wait_) accept_wait_->release();
  if (conn_wait_) conn_wait_->release();
}

void HandoverServer::AcceptNext() {
  std::weak_ptr<bool> alive = alive_;
  accept_wait_->async_wait(asio::posix::stream_descriptor::wait_read, [this, alive](const boost::system::error_code& ec) {
    if (ec || alive.expired() || done_) return;
    UniqueFd conn(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.valid()) OnConnect(std::move(conn));
    if (!done_) AcceptNext();
  });
}

void HandoverServer::OnConnect(UniqueFd conn) {
  absl::StatusOr<Peer> peer = CheckPeer(conn.get(), hooks_.sandboxed);
  if (!peer.ok()) {
    spdlog::warn("hand-over: refused: {}", std::string(peer.status().message()));
    (void)SendMessage(conn.get(), {{"refused", std::string(peer.status().message())}}, {});
    return;
  }
  if (conn_.valid()) {
    (void)SendMessage(conn.get(), {{"refused", "a hand-over is already in progress"}}, {});
    return;
  }
  spdlog::info("hand-over: a new daemon (pid {}) asks for this one's sockets", peer->pid);
  const std::vector<HandoverFd> all = hooks_.sockets();
  for (size_t at = 0; at < all.size(); at += kFdsPerMessage) {
    nlohmann::json what = nlohmann::json::array();
    std::vector<int> fds;
    for (size_t i = at; i < all.size() && i < at + kFdsPerMessage; ++i) {
      what.push_back(all[i].what);
      fds.push_back(all[i].fd);
    }
    if (absl::Status s = SendMessage(conn.get(), {{"fds", what}}, fds); !s.ok()) {
      ++aborted_;
      spdlog::warn("hand-over: to pid {}: {}; serving on", peer->pid, s.ToString());
      return;
    }
  }
  if (absl::Status s = SendMessage(conn.get(), {{"done", all.size()}, {"pid", getpid()}}, {}); !s.ok()) {
    ++aborted_;
    spdlog::warn("hand-over: to pid {}: {}; serving on", peer->pid, s.ToString());
    return;
  }
  conn_ = std::move(conn);
  AwaitServing();
}

void HandoverServer::AwaitServing() {
  conn_wait_ = std::make_unique<asio::posix::stream_descriptor>(io_, conn_.get());
  std::weak_ptr<bool> alive = alive_;
  conn_wait_->async_wait(asio::posix::stream_descriptor::wait_read, [this, alive](const boost::system::error_code& ec) {
    if (ec || alive.expired()) return;
    auto m = RecvMessage(conn_.get(), 0);
    if (!m.ok()) return Abort(std::string(m.status().message()));
    if (!m->j.contains("serving")) return Abort("it sent " + m->j.dump() + ", not \"serving\"");
    done_ = true;
    spdlog::info("hand-over: pid {} serves every socket: this daemon stops reading them",
                 m->j["serving"].get<int64_t>());
    absl::StatusOr<uint64_t> seq = hooks_.superseded();
    nlohmann::json released = {{"released", true}, {"seq", seq.ok() ? *seq : 0}};
    if (!seq.ok()) {
      // The ring's reader is released all the same; the new one reads on
      // from the last saved state.
      spdlog::error("hand-over: the audit reader's last window: {}", seq.status().ToString());
      released["error"] = std::string(seq.status().message());
    }
    if (absl::Status s = SendMessage(conn_.get(), released, {}); !s.ok()) {
      spdlog::warn("hand-over: {} (the new daemon takes the audit reader at its next window)", s.ToString());
    }
    conn_wait_->release();
    conn_wait_.reset();
    conn_.reset();
    accept_wait_->cancel();
  });
}

void HandoverServer::Abort(const std::string& why) {
  ++aborted_;
  spdlog::warn("hand-over: the new daemon went before it served ({}): this daemon serves on, nothing changed", why);
  conn_wait_->release();
  conn_wait_.reset();
  conn_.reset();
}

}  // namespace egressd::daemon
