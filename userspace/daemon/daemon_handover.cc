// The daemon's part of the hand-over (handover.h): as the new daemon, what
// it takes from the old one at start-up; as the running one, what it hands
// over and how it leaves.
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "userspace/common/errors.h"
#include "userspace/daemon/daemon.h"

namespace egressd::daemon {

// For tests only (docs/operations.md "Upgrade"): with
// EGRESSD_TEST_HANDOVER_HOLD=<point>[,<point>...] a new daemon stops itself
// (SIGSTOP) at each named point of its hand-over: "after-take" (the sockets
// and the lock received, nothing served yet), "before-serving" (every socket
// served by its proxy, "serving" not said), "after-serving" ("serving" said,
// "released" not awaited).  It prints "handover-hold: <point>" on stdout
// first; a test then kills it there (SIGKILL), at the moment a crash would be
// worst, instead of racing a log line, or lets it go on (SIGCONT).  Unset in
// production; an unknown point holds nowhere.
static void HoldForTest(const char* point) {
  const char* want = std::getenv("EGRESSD_TEST_HANDOVER_HOLD");
  if (want == nullptr) return;
  bool named = false;
  for (absl::string_view p : absl::StrSplit(want, ',')) named = named || p == point;
  if (!named) return;
  spdlog::warn("hand-over: EGRESSD_TEST_HANDOVER_HOLD: stopped at {} (SIGCONT goes on)", point);
  std::printf("handover-hold: %s\n", point);
  std::fflush(stdout);
  raise(SIGSTOP);
}

absl::Status Daemon::TakeOver() {
  const std::string lock_path = options_.paths.runtime_dir + "/daemon.lock";
  auto client = HandoverClient::Connect(options_.paths, options_.handover_timeout_ms);
  if (absl::IsNotFound(client.status())) {
    return absl::UnavailableError(absl::StrCat("another egressd serves this instance (", lock_path,
                                               " is held) and hands nothing over: ", client.status().message()));
  }
  if (!client.ok()) {
    return absl::UnavailableError(absl::StrCat("another egressd serves this instance (", lock_path,
                                               " is held); taking over from it failed: ", client.status().message()));
  }
  UniqueFd lock = (*client)->Take("lock");
  // The same open file as the old daemon's: the lock is this one's too.
  if (!lock.valid() || flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    return absl::UnavailableError(absl::StrCat("another egressd serves this instance (", lock_path,
                                               " is held) and handed over no lock on it"));
  }
  daemon_lock_ = std::move(lock);
  spdlog::info("hand-over: took {} socket(s) from pid {}", (*client)->fds().size(), (*client)->old_pid());
  taking_over_ = std::move(*client);
  HoldForTest("after-take");
  return absl::OkStatus();
}

void Daemon::InheritDnsSockets() {
  if (!taking_over_) return;
  for (ReceivedFd& f : taking_over_->fds()) {
    if (!f.fd.valid() || f.what.value("what", "") != "dns") continue;
    auto addr = net::IpAddr::Parse(f.what.value("addr", ""));
    if (!addr.ok()) continue;
    proxy_->Inherit(f.what.value("tcp", false), *addr, f.what.value("port", uint16_t{0}), std::move(f.fd));
  }
}

absl::Status Daemon::ServeApi() {
  if (taking_over_) {
    for (ReceivedFd& f : taking_over_->fds()) {
      if (f.fd.valid() && f.what.value("what", "") == "api" && f.what.value("path", "") == socket_path_) {
        return server_->Adopt(socket_path_, f.fd.release());
      }
    }
    // The old daemon served another path: this one's is new.
  }
  return server_->Listen(socket_path_);
}

absl::Status Daemon::FinishStart() {
  HandoverServer::Hooks hooks{[this] { return HandoverSockets(); }, [this] { return Superseded(); },
                              [this](const std::string& path) { return IsSandboxedPath(path); }};
  if (!taking_over_) {
    EGR_ASSIGN_OR_RETURN(handover_, HandoverServer::Listen(io_, HandoverSocketPath(options_.paths), std::move(hooks)));
    return absl::OkStatus();
  }
  // Every socket handed over is served (those of sandboxes gone meanwhile
  // close here, the old daemon's copies with it).
  size_t unused = 0;
  for (ReceivedFd& f : taking_over_->fds()) unused += f.fd.valid() ? 1 : 0;
  if (unused > 0) spdlog::info("hand-over: {} socket(s) served by no sandbox of this daemon", unused);
  HoldForTest("before-serving");
  EGR_RETURN_IF_ERROR(taking_over_->SendServing());
  // Only now read them (DnsProxy::Inherit, HttpServer::Adopt,
  // MetricsServer::Adopt): until "serving" the old daemon reads every query
  // and accepts every call, and one this daemon took would die with it.
  if (proxy_) proxy_->ReadInherited();
  server_->StartAccepting();
  if (metrics_) metrics_->StartAccepting();
  HoldForTest("after-serving");
  taking_over_->AwaitReleased(io_, [this, hooks = std::move(hooks)](absl::StatusOr<uint64_t> seq) mutable {
    if (seq.ok()) {
      spdlog::info("hand-over: the old daemon released the audit reader at seq {}", *seq);
    } else {
      spdlog::warn("hand-over: {}: the audit reader is taken at the next window", seq.status().ToString());
    }
    audit_host_->TryNow();
    taking_over_.reset();
    auto server = HandoverServer::Listen(io_, HandoverSocketPath(options_.paths), std::move(hooks));
    if (!server.ok()) {
      spdlog::error("hand-over: {}: the next daemon cannot take over from this one", server.status().ToString());
      return;
    }
    handover_ = std::move(*server);
  });
  return absl::OkStatus();
}

std::vector<HandoverFd> Daemon::HandoverSockets() {
  std::vector<HandoverFd> out;
  out.push_back({{{"what", "lock"}}, daemon_lock_.get()});
  if (server_ && server_->listener_fd() >= 0) out.push_back({{{"what", "api"}, {"path", socket_path_}}, server_->listener_fd()});
  if (metrics_ && metrics_->listener_fd() >= 0) {
    out.push_back({{{"what", "metrics"}, {"addr", metrics_->ip().ToString()}, {"port", metrics_->port()}},
                   metrics_->listener_fd()});
  }
  if (proxy_) {
    for (const auto& s : proxy_->ListeningSockets()) {
      out.push_back({{{"what", "dns"},
                      {"tcp", s.tcp},
                      {"addr", s.addr.ToString()},
                      {"port", s.port},
                      {"sandbox", s.sandbox_id}},
                     s.fd});
    }
  }
  return out;
}

absl::StatusOr<uint64_t> Daemon::Superseded() {
  superseded_ = true;
  // Nothing here acts on the node any more: no record followed, no cgroup
  // collected, no PUT accepted.  Enforcement stays as pinned.
  server_->StopAccepting();
  if (metrics_) metrics_->Stop();
  if (proxy_) proxy_->Quiesce();
  watcher_.reset();
  gone_watch_.reset();
  cgroup_watch_.reset();
  absl::StatusOr<uint64_t> seq = audit_host_->Release();
  drain_timer_ = std::make_unique<boost::asio::steady_timer>(io_);
  ExitWhenDrained(std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.handover_drain_ms));
  return seq;
}

void Daemon::ExitWhenDrained(std::chrono::steady_clock::time_point deadline) {
  const size_t busy = proxy_ ? proxy_->Busy() : 0;
  if (busy == 0 || std::chrono::steady_clock::now() >= deadline) {
    if (busy > 0) {
      spdlog::warn("hand-over: {} query(ies) or TCP connection(s) still open after {} ms: closed", busy,
                   options_.handover_drain_ms);
      proxy_->CloseConnections();
    }
    spdlog::info("hand-over: superseded, every query read answered: exiting (enforcement stays as pinned)");
    if (options_.on_superseded) options_.on_superseded();
    return;
  }
  drain_timer_->expires_after(std::chrono::milliseconds(2));
  drain_timer_->async_wait([this, deadline](const boost::system::error_code& ec) {
    if (!ec) ExitWhenDrained(deadline);
  });
}

}  // namespace egressd::daemon
