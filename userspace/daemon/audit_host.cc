#include "userspace/daemon/audit_host.h"

#include <unistd.h>

#include <utility>

#include <spdlog/spdlog.h>

#include "userspace/audit/user_events.h"
#include "userspace/common/errors.h"

namespace egressd::daemon {

namespace asio = boost::asio;

AuditHost::AuditHost(asio::io_context& io, Paths paths, int window_ms)
    : io_(io), paths_(std::move(paths)), window_ms_(window_ms), timer_(io), drain_timer_(io) {}

AuditHost::~AuditHost() {
  // The last window, so what the ring holds now is in the spools and the
  // state; the next holder starts from there.
  if (exporter_) {
    if (absl::Status s = CloseWindow(); !s.ok()) spdlog::warn("audit: last window: {}", s.ToString());
  }
  if (readable_) readable_->release();  // the ring owns its fd
}

void AuditHost::Start() { Tick(); }

void AuditHost::Tick() {
  if (released_) return;
  absl::Status s = exporter_ ? CloseWindow() : TryHold();
  if (!s.ok()) Drop(s);
  if (on_written_) on_written_();
  timer_.expires_after(std::chrono::milliseconds(window_ms_));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) Tick();
  });
}

void AuditHost::Drop(const absl::Status& why) {
  if (!absl::IsUnavailable(why)) {
    spdlog::error("audit: {} (the reader lock is released; retried at the next window)", why.ToString());
  }
  last_error_ = why;
  if (readable_) {
    readable_->cancel();
    readable_->release();
    readable_.reset();
  }
  drain_timer_.cancel();
  exporter_.reset();
  ring_.reset();
  lock_.reset();
}

absl::Status AuditHost::TryHold() {
  EGR_ASSIGN_OR_RETURN(auto lock, audit::ReaderLock::TryAcquire(paths_));
  EGR_ASSIGN_OR_RETURN(auto ring, maps::EventRing::Open(paths_.pin_root));
  audit::ExporterOptions xo;
  xo.state_path = audit::StatePath(paths_);
  xo.spool_dir = audit::SpoolDir(paths_);
  // The daemon has no reader of its own: the spools are the output.
  EGR_ASSIGN_OR_RETURN(auto exporter,
                       audit::Exporter::Create(paths_, xo, [](const audit::LineMeta&, const std::string&) {}));
  lock_.emplace(std::move(lock));
  ring_.emplace(std::move(ring));
  exporter_ = std::move(exporter);
  readable_ = std::make_unique<asio::posix::stream_descriptor>(io_, ring_->ReadableFd());
  last_error_ = absl::OkStatus();
  spdlog::info("audit: reading the ring ({}), spools under {}", paths_.pin_root, audit::SpoolDir(paths_));
  WaitReadable();
  DrainSoon();
  return absl::OkStatus();
}

void AuditHost::WaitReadable() {
  readable_->async_wait(asio::posix::stream_descriptor::wait_read, [this](const boost::system::error_code& ec) {
    if (ec || !exporter_) return;
    if (absl::Status s = Drain().status(); !s.ok()) {
      Drop(s);
      return;
    }
    if (on_written_) on_written_();
    WaitReadable();
  });
}

// The records no wake-up announced (below the ring's threshold: most of
// them), within kRingDrainMs of their submission.
void AuditHost::DrainSoon() {
  drain_timer_.expires_after(std::chrono::milliseconds(maps::kRingDrainMs));
  drain_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !exporter_) return;
    absl::StatusOr<int> n = Drain();
    if (!n.ok()) {
      Drop(n.status());
      return;
    }
    if (*n > 0 && on_written_) on_written_();
    DrainSoon();
  });
}

absl::StatusOr<int> AuditHost::Drain() {
  auto on_event = [this](const egr_event& e) {
    if (failed_.ok()) failed_ = exporter_->OnEvent(e);
  };
  int total = 0;
  for (;;) {
    EGR_ASSIGN_OR_RETURN(int n, ring_->Poll(0, on_event));
    EGR_RETURN_IF_ERROR(std::exchange(failed_, absl::OkStatus()));
    EGR_RETURN_IF_ERROR(exporter_->Flush());
    total += n;
    if (n == 0) return total;
  }
}

absl::Status AuditHost::CloseWindow() {
  const uint64_t closing = audit::BootNowNs();
  EGR_ASSIGN_OR_RETURN(auto counts, ring_->CloseWindow());
  // Records put on the ring before the epoch moved are all there now.
  EGR_RETURN_IF_ERROR(Drain().status());
  // User-space sources' lines (the DNS proxy's, the lifecycle's).
  EGR_RETURN_IF_ERROR(audit::IngestPending(paths_, *exporter_));
  return exporter_->OnWindow(counts, closing);
}

absl::StatusOr<uint64_t> AuditHost::Release() {
  released_ = true;
  timer_.cancel();
  if (!exporter_) return uint64_t{0};
  absl::Status s = CloseWindow();
  const uint64_t seq = exporter_->seq();
  Drop(absl::UnavailableError("handed over"));
  if (!s.ok()) return s;
  return seq;
}

void AuditHost::TryNow() {
  if (exporter_ || released_) return;
  timer_.cancel();
  Tick();
}

}  // namespace egressd::daemon
