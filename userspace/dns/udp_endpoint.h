// One sandbox endpoint's UDP socket: queries read in batches, answers sent
// without a round through the event loop.
//
// Under load several queries wait in the socket's buffer, and each cost its
// own read: a recvfrom per query, and after the last one a speculative read
// that found the buffer empty (EAGAIN), then the loop's epoll_wait.  Here
// one recvmmsg takes up to kUdpBatch of them; a read that returns fewer
// than it asked for found the buffer empty, so the server waits for the
// socket to become readable again without another read.  The answers given
// at once (a local NXDOMAIN, REFUSED, FORMERR) leave together in one
// sendmmsg after the batch; answers that waited on the upstream leave in one
// sendto when ready.  A send the socket's buffer cannot take now (EAGAIN)
// waits for it through the loop, in order, as before.
//
// The batch's buffers are the loop thread's (one set however many
// endpoints): a query is read out of them before Handle returns.
#ifndef EGRESSD_USERSPACE_DNS_UDP_ENDPOINT_H_
#define EGRESSD_USERSPACE_DNS_UDP_ENDPOINT_H_

#include <netinet/in.h>
#include <sys/socket.h>

#include <memory>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/udp.hpp>

#include "absl/status/status.h"
#include "userspace/common/unique_fd.h"
#include "userspace/dns/proxy_internal.h"

namespace egressd::dns::proxy_internal {

// Queries one read takes at most (and answers one send carries).
inline constexpr int kUdpBatch = 16;

// A client's address: an endpoint socket is IPv4 or IPv6-only, so it fits
// (a reply's closure copies 32 bytes, not a sockaddr_storage's 128).
struct Peer {
  union {
    sockaddr sa;
    sockaddr_in v4;
    sockaddr_in6 v6;
  } addr;
  socklen_t len;
};

class UdpServer : public std::enable_shared_from_this<UdpServer> {
 public:
  UdpServer(boost::asio::io_context& io, std::shared_ptr<Shared> sh, std::shared_ptr<Live> live);

  // Binds `ep`, or adopts `inherited` (the previous daemon's socket, bound
  // and sized: the endpoint never closed).
  absl::Status Open(const boost::asio::ip::udp::endpoint& ep, UniqueFd inherited = {});
  // What the kernel holds for the socket's receive buffer (getsockopt).
  int ReceiveBuffer();
  // The port bound (the self-test's, chosen by the kernel); 0 on error.
  uint16_t LocalPort();
  // Reads what waits now, then whatever arrives, until Quiesce or Close.
  void Receive();
  // Reads no more (the socket is another daemon's now); what was read is
  // still answered.  cancel() would also abort a send in progress: it waits
  // for the sends to complete.
  void Quiesce();
  int fd() { return sock_.native_handle(); }
  void Close();

 private:
  struct Outgoing {
    Peer to;
    Bytes msg;
  };
  void SetReceiveBuffer(int bytes);
  // Reads and handles batches until one finds the buffer empty (then waits
  // for the socket) or a few full ones were handled (then yields to the
  // loop's other work and goes on).
  void Pump();
  void WaitReadable();
  // Sends now what the socket takes; the rest waits through the loop.
  void SendNow(const Peer& to, Bytes msg);
  void SendBatch();
  void SendLater(const Peer& to, Bytes msg);
  void MaybeCancel();

  boost::asio::ip::udp::socket sock_;
  std::shared_ptr<Shared> sh_;
  std::shared_ptr<Live> live_;
  // The answers given while a batch is handled, sent after it.
  std::vector<Outgoing> batch_out_;
  bool in_batch_ = false;
  bool receiving_ = false, quiesced_ = false;
  size_t sends_ = 0;  // waiting through the loop
};

}  // namespace egressd::dns::proxy_internal

#endif  // EGRESSD_USERSPACE_DNS_UDP_ENDPOINT_H_
