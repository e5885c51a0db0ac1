#include "userspace/dns/udp_endpoint.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"

namespace egressd::dns::proxy_internal {

namespace asio = boost::asio;
using asio::ip::udp;

namespace {

// The loop thread's read buffers: kUdpBatch messages of any size a
// datagram can have.  One set per thread, not per endpoint (a node serves
// thousands): Pump handles every message of a batch before it reads again.
struct ReadBatch {
  std::array<mmsghdr, kUdpBatch> hdr{};
  std::array<iovec, kUdpBatch> iov{};
  std::array<Peer, kUdpBatch> peer{};
  std::vector<uint8_t> bufs = std::vector<uint8_t>(size_t{kUdpBatch} * kMaxMessage);
  bool in_use = false;

  ReadBatch() {
    for (int i = 0; i < kUdpBatch; ++i) {
      iov[i] = {bufs.data() + size_t(i) * kMaxMessage, kMaxMessage};
      hdr[i].msg_hdr.msg_name = &peer[i].addr;
      hdr[i].msg_hdr.msg_iov = &iov[i];
      hdr[i].msg_hdr.msg_iovlen = 1;
    }
  }
  // Messages read (0 < n <= kUdpBatch), or -1 with errno.  The kernel
  // writes back each address's length: reset to the room there is.
  int Read(int fd) {
    for (auto& h : hdr) h.msg_hdr.msg_namelen = sizeof(Peer::addr);
    return recvmmsg(fd, hdr.data(), kUdpBatch, MSG_DONTWAIT, nullptr);
  }
  std::span<const uint8_t> Message(int i) const { return {bufs.data() + size_t(i) * kMaxMessage, hdr[i].msg_len}; }
  Peer From(int i) const {
    Peer p = peer[i];
    p.len = hdr[i].msg_hdr.msg_namelen;
    return p;
  }
};

ReadBatch& ThreadReadBatch() {
  thread_local ReadBatch batch;
  return batch;
}

bool WouldBlock(int e) { return e == EAGAIN || e == EWOULDBLOCK; }

}  // namespace

UdpServer::UdpServer(asio::io_context& io, std::shared_ptr<Shared> sh, std::shared_ptr<Live> live)
    : sock_(io), sh_(std::move(sh)), live_(std::move(live)) {}

absl::Status UdpServer::Open(const udp::endpoint& ep, UniqueFd inherited) {
  boost::system::error_code ec;
  bool v6 = ep.address().is_v6();
  if (inherited.valid()) {
    // The previous daemon's socket, bound and sized: the endpoint never closed.
    sock_.assign(v6 ? udp::v6() : udp::v4(), inherited.release(), ec);
    if (ec) return FromAsio(ec, absl::StrCat("adopt UDP ", ep.address().to_string(), " port ", ep.port()));
    return absl::OkStatus();
  }
  sock_.open(v6 ? udp::v6() : udp::v4(), ec);
  if (!ec && v6) sock_.set_option(asio::ip::v6_only(true), ec);
  // No SO_REUSEADDR: on UDP it would let a second socket share the
  // endpoint and take its queries, and the socket is the identity.
  if (!ec) {
    FreeBind(sock_, v6);
    sock_.bind(ep, ec);
  }
  if (ec) return FromAsio(ec, absl::StrCat("bind UDP ", ep.address().to_string(), " port ", ep.port()));
  SetReceiveBuffer(sh_->opts.udp_receive_buffer);
  return absl::OkStatus();
}

int UdpServer::ReceiveBuffer() {
  int v = 0;
  socklen_t len = sizeof(v);
  if (getsockopt(sock_.native_handle(), SOL_SOCKET, SO_RCVBUF, &v, &len) != 0) return -1;
  return v;
}

uint16_t UdpServer::LocalPort() {
  boost::system::error_code ec;
  auto ep = sock_.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

// A burst of queries waits in this buffer while the loop is busy (an
// answer's map writes, another sandbox's burst): the default (about 208 KiB,
// a few hundred queries) drops them at a few thousand queries a second.
// SO_RCVBUFFORCE passes net.core.rmem_max, with CAP_NET_ADMIN; without it
// SO_RCVBUF, which the kernel caps at rmem_max.
void UdpServer::SetReceiveBuffer(int bytes) {
  if (bytes <= 0) return;
  const int fd = sock_.native_handle();
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0 &&
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) != 0) {
    spdlog::warn("dns: SO_RCVBUF {} on a proxy socket: {}", bytes, ErrnoStatus(errno, "setsockopt").ToString());
  }
}

// What waits already is read at once: an adopted socket may hold queries
// the previous daemon left, and the socket's readiness was reported (edge
// triggered) before anyone waited for it.
void UdpServer::Receive() { Pump(); }

void UdpServer::Pump() {
  if (quiesced_ || !sock_.is_open() || live_->stopped) return;
  auto self = shared_from_this();
  ReadBatch& batch = ThreadReadBatch();
  if (batch.in_use) {
    // Never expected (nothing a batch's handling calls reads an endpoint),
    // but the buffers hold messages still being handled: later.
    asio::post(sock_.get_executor(), [self] { self->Pump(); });
    return;
  }
  const int n = batch.Read(sock_.native_handle());
  if (n < 0) {
    if (errno == EINTR) {
      asio::post(sock_.get_executor(), [self] { self->Pump(); });
      return;
    }
    // A pending socket error (an ICMP report for an earlier reply) is
    // consumed by the read; readiness says when there is more.
    if (!WouldBlock(errno)) spdlog::debug("dns: recvmmsg on a proxy endpoint: {}", std::strerror(errno));
    return WaitReadable();
  }
  ++sh_->counters->udp_reads;
  batch.in_use = true;
  in_batch_ = true;
  for (int i = 0; i < n; ++i) {
    Handle(sh_, live_, batch.Message(i), false, [self, from = batch.From(i)](Bytes b) {
      if (b.empty() || !self->sock_.is_open()) return;
      self->SendNow(from, std::move(b));
    });
  }
  in_batch_ = false;
  batch.in_use = false;
  SendBatch();
  // Fewer than asked for: the buffer was empty when the read returned, and
  // what arrives after makes the socket readable again.
  if (n < kUdpBatch) return WaitReadable();
  // A full batch: more may wait, but one batch per turn, so upstream
  // answers and the other sandboxes' endpoints are served in between.
  asio::post(sock_.get_executor(), [self] { self->Pump(); });
}

void UdpServer::WaitReadable() {
  auto self = shared_from_this();
  receiving_ = true;
  sock_.async_wait(udp::socket::wait_read, [self](const boost::system::error_code& ec) {
    self->receiving_ = false;
    if (ec == asio::error::operation_aborted || !self->sock_.is_open() || self->live_->stopped) return;
    self->Pump();
  });
}

void UdpServer::SendNow(const Peer& to, Bytes msg) {
  if (in_batch_) {
    batch_out_.push_back({to, std::move(msg)});
    return;
  }
  if (sends_ == 0) {  // none waiting: this one cannot overtake them
    for (;;) {
      if (::sendto(sock_.native_handle(), msg.data(), msg.size(), MSG_DONTWAIT, &to.addr.sa, to.len) >= 0) {
        return;
      }
      if (errno != EINTR) break;
    }
    // Not sent and never will be (the client asks again), as an async send's
    // error was: only a full buffer waits.
    if (!WouldBlock(errno)) return;
  }
  SendLater(to, std::move(msg));
}

void UdpServer::SendBatch() {
  if (batch_out_.empty()) return;
  size_t i = 0;
  std::array<mmsghdr, kUdpBatch> hdr{};
  std::array<iovec, kUdpBatch> iov{};
  while (i < batch_out_.size() && sends_ == 0) {
    const size_t k = std::min(batch_out_.size() - i, size_t{kUdpBatch});
    for (size_t j = 0; j < k; ++j) {
      Outgoing& o = batch_out_[i + j];
      iov[j] = {o.msg.data(), o.msg.size()};
      hdr[j].msg_hdr = msghdr{};
      hdr[j].msg_hdr.msg_name = &o.to.addr;
      hdr[j].msg_hdr.msg_namelen = o.to.len;
      hdr[j].msg_hdr.msg_iov = &iov[j];
      hdr[j].msg_hdr.msg_iovlen = 1;
    }
    const int sent = sendmmsg(sock_.native_handle(), hdr.data(), static_cast<unsigned>(k), MSG_DONTWAIT);
    if (sent > 0) {
      i += static_cast<size_t>(sent);
    } else if (errno == EINTR) {
      continue;
    } else if (WouldBlock(errno)) {
      break;
    } else {
      ++i;  // this answer cannot be sent (the client asks again); the rest can
    }
  }
  for (; i < batch_out_.size(); ++i) SendLater(batch_out_[i].to, std::move(batch_out_[i].msg));
  batch_out_.clear();
}

void UdpServer::SendLater(const Peer& to, Bytes msg) {
  udp::endpoint ep;
  std::memcpy(ep.data(), &to.addr, std::min<size_t>(to.len, sizeof(to.addr)));
  ep.resize(to.len);
  auto p = std::make_shared<Bytes>(std::move(msg));
  auto self = shared_from_this();
  ++sends_;
  sock_.async_send_to(asio::buffer(*p), ep, [self, p](const boost::system::error_code&, size_t) {
    --self->sends_;
    self->MaybeCancel();
  });
}

void UdpServer::Quiesce() {
  quiesced_ = true;
  MaybeCancel();
}

void UdpServer::MaybeCancel() {
  if (!quiesced_ || sends_ > 0 || !receiving_) return;
  boost::system::error_code ec;
  sock_.cancel(ec);
}

void UdpServer::Close() {
  boost::system::error_code ec;
  sock_.close(ec);
}

}  // namespace egressd::dns::proxy_internal
