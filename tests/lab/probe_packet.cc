// Socket-family operations: packet sockets (every way to send on one),
// AF_XDP, AF_VSOCK, any family by number, and abstract unix sockets.  None of
// these pass the cgroup sock_addr or cgroup_skb hooks; only the BPF LSM sees
// them.  Every line says whether the socket was created ("socket":"created")
// before the send's own result, so a test can tell a refused socket() from a
// refused send.
#include <arpa/inet.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/vm_sockets.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "probe_common.h"

#ifndef AF_XDP
#define AF_XDP 44
#endif

namespace egressd::probe {
namespace {

uint16_t Checksum(const uint8_t* p, size_t n) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < n; i += 2) sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
  if (n & 1) sum += static_cast<uint32_t>(p[n - 1] << 8);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return htons(static_cast<uint16_t>(~sum));
}

bool ParseMac(const std::string& s, uint8_t mac[6]) {
  unsigned v[6];
  if (sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) return false;
  for (int i = 0; i < 6; ++i) mac[i] = static_cast<uint8_t>(v[i]);
  return true;
}

struct Iface {
  int index = 0;
  uint8_t mac[6] = {};
  in_addr addr{};
};

// The interface's index, MAC and IPv4 address (the pod's own, as source).
int LookupIface(int fd, const std::string& name, Iface* out) {
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (ioctl(fd, SIOCGIFINDEX, &ifr) != 0) return errno;
  out->index = ifr.ifr_ifindex;
  if (ioctl(fd, SIOCGIFHWADDR, &ifr) != 0) return errno;
  std::memcpy(out->mac, ifr.ifr_hwaddr.sa_data, 6);
  if (ioctl(fd, SIOCGIFADDR, &ifr) != 0) return errno;
  out->addr = reinterpret_cast<sockaddr_in*>(&ifr.ifr_addr)->sin_addr;
  return 0;
}

// Ethernet + IPv4 + UDP, checksummed, as the kernel would have built it.
std::vector<uint8_t> UdpFrame(const uint8_t dst_mac[6], const Iface& ifc, in_addr dst, uint16_t port,
                              const std::string& payload) {
  std::vector<uint8_t> f(14 + 20 + 8 + payload.size());
  std::memcpy(&f[0], dst_mac, 6);
  std::memcpy(&f[6], ifc.mac, 6);
  f[12] = 0x08;
  f[13] = 0x00;
  iphdr ip{};
  ip.version = 4;
  ip.ihl = 5;
  ip.ttl = 64;
  ip.protocol = IPPROTO_UDP;
  ip.tot_len = htons(static_cast<uint16_t>(f.size() - 14));
  ip.id = htons(static_cast<uint16_t>(getpid()));
  ip.saddr = ifc.addr.s_addr;
  ip.daddr = dst.s_addr;
  ip.check = Checksum(reinterpret_cast<uint8_t*>(&ip), sizeof(ip));
  std::memcpy(&f[14], &ip, sizeof(ip));
  udphdr u{};
  u.source = htons(static_cast<uint16_t>(40000 + getpid() % 20000));
  u.dest = htons(port);
  u.len = htons(static_cast<uint16_t>(8 + payload.size()));
  u.check = 0;  // optional over IPv4
  std::memcpy(&f[34], &u, sizeof(u));
  std::memcpy(&f[42], payload.data(), payload.size());
  return f;
}

// Submits the one prepared SQE and waits for its completion: 0 with the
// result in *res, or the errno of the submit, the wait or the operation.
// SEND_ZC posts a notification CQE when the buffer is released: consumed too.
int SubmitOne(io_uring* ring, int* res) {
  if (int r = io_uring_submit(ring); r < 0) return -r;
  io_uring_cqe* cqe = nullptr;
  if (int w = io_uring_wait_cqe(ring, &cqe); w < 0) return -w;
  const int result = cqe->res;
  const bool more = cqe->flags & IORING_CQE_F_MORE;
  io_uring_cqe_seen(ring, cqe);
  if (more && io_uring_wait_cqe(ring, &cqe) == 0) io_uring_cqe_seen(ring, cqe);
  if (result < 0) return -result;
  *res = result;
  return 0;
}

int UringSend(int fd, const std::vector<uint8_t>& f, const std::string& via, sockaddr_ll* to) {
  io_uring ring;
  if (int r = io_uring_queue_init(4, &ring, 0); r < 0) return -r;
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  iovec iov{const_cast<uint8_t*>(f.data()), f.size()};
  msghdr msg{};
  msg.msg_name = to;
  msg.msg_namelen = sizeof(*to);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (via == "uring-send") io_uring_prep_send(sqe, fd, f.data(), f.size(), 0);
  else if (via == "uring-sendmsg") io_uring_prep_sendmsg(sqe, fd, &msg, 0);
  else io_uring_prep_send_zc(sqe, fd, f.data(), f.size(), 0, 0);
  int res = 0;
  const int err = SubmitOne(&ring, &res);
  io_uring_queue_exit(&ring);
  return err;
}

// PACKET_TX_RING: the frame goes into a mapped slot; send() flushes the ring.
int TxRingSend(int fd, const std::vector<uint8_t>& f, std::string* stage) {
  int v = TPACKET_V2;
  *stage = "setsockopt";
  if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof(v)) != 0) return errno;
  tpacket_req req{};
  req.tp_block_size = 4096;
  req.tp_block_nr = 1;
  req.tp_frame_size = 2048;
  req.tp_frame_nr = 2;
  if (setsockopt(fd, SOL_PACKET, PACKET_TX_RING, &req, sizeof(req)) != 0) return errno;
  *stage = "mmap";
  void* ring = mmap(nullptr, req.tp_block_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (ring == MAP_FAILED) return errno;
  auto* hdr = static_cast<tpacket2_hdr*>(ring);
  uint8_t* data = static_cast<uint8_t*>(ring) + TPACKET2_HDRLEN - sizeof(sockaddr_ll);
  std::memcpy(data, f.data(), f.size());
  hdr->tp_len = static_cast<uint32_t>(f.size());
  __atomic_store_n(&hdr->tp_status, TP_STATUS_SEND_REQUEST, __ATOMIC_RELEASE);
  *stage = "send";
  int err = send(fd, nullptr, 0, 0) < 0 ? errno : 0;
  munmap(ring, req.tp_block_size);
  return err;
}

// One send of `f` on packet socket `fd` by `via`; 0 or an errno value.
int SendVia(int fd, const std::vector<uint8_t>& f, const std::string& via, sockaddr_ll* to,
            std::string* stage) {
  *stage = via;
  if (via == "sendto") {
    return sendto(fd, f.data(), f.size(), 0, reinterpret_cast<sockaddr*>(to), sizeof(*to)) < 0 ? errno : 0;
  }
  if (via == "send") return send(fd, f.data(), f.size(), 0) < 0 ? errno : 0;
  if (via == "write") return write(fd, f.data(), f.size()) < 0 ? errno : 0;
  iovec iov{const_cast<uint8_t*>(f.data()), f.size()};
  msghdr msg{};
  msg.msg_name = to;
  msg.msg_namelen = sizeof(*to);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (via == "sendmsg") return sendmsg(fd, &msg, 0) < 0 ? errno : 0;
  if (via == "sendmmsg") {
    mmsghdr m{};
    m.msg_hdr = msg;
    return sendmmsg(fd, &m, 1, 0) < 0 ? errno : 0;
  }
  if (via.rfind("uring-", 0) == 0) return UringSend(fd, f, via, to);
  if (via == "txring") return TxRingSend(fd, f, stage);
  if (via == "sendfile" || via == "splice") {
    int mem = memfd_create("frame", MFD_CLOEXEC);
    if (mem < 0 || write(mem, f.data(), f.size()) != static_cast<ssize_t>(f.size())) return errno;
    lseek(mem, 0, SEEK_SET);
    int err = 0;
    if (via == "sendfile") {
      if (sendfile(fd, mem, nullptr, f.size()) < 0) err = errno;
    } else {
      int p[2];
      if (pipe(p) != 0) return errno;
      if (splice(mem, nullptr, p[1], nullptr, f.size(), 0) < 0 ||
          splice(p[0], nullptr, fd, nullptr, f.size(), 0) < 0)
        err = errno;
      close(p[0]);
      close(p[1]);
    }
    close(mem);
    return err;
  }
  return EINVAL;
}

std::string UnixName(const std::string& name, sockaddr_un* sa, socklen_t* len) {
  *sa = {};
  sa->sun_family = AF_UNIX;
  std::memcpy(sa->sun_path + 1, name.data(), std::min(name.size(), sizeof(sa->sun_path) - 2));
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return "@" + name;
}

}  // namespace

// packet-udp DST PORT MAC [--via V] [--ifname IF]: a hand-built frame to MAC
// (the router's), bound to IF (default eth0).
void OpPacketUdp(const Op& op) {
  const std::string via = op.Str("via", "sendto");
  const std::string ifname = op.Str("ifname", "eth0");
  Json j(op.name);
  j.Str("dst", op.pos[0]).Str("port", op.pos[1]).Str("via", via);
  uint8_t mac[6];
  in_addr dst{};
  uint16_t port = 0;
  if (!ParseMac(op.pos[2], mac) || inet_pton(AF_INET, op.pos[0].c_str(), &dst) != 1 ||
      !ParsePort(op.pos[1], &port))
    return j.Err(EINVAL, "args").Emit();
  // sendto/sendmsg name the interface; the others need the socket bound to it.
  Fd fd(socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, via == "txring" ? 0 : htons(ETH_P_ALL)));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  j.Str("socket", "created");
  Iface ifc;
  if (int e = LookupIface(fd.get(), ifname, &ifc)) return j.Err(e, "ioctl").Emit();
  // A forged source (--source ADDR, --source-mac MAC): what a pod would
  // send to impersonate another.
  if (const std::string src = op.Str("source", ""); !src.empty()) {
    if (inet_pton(AF_INET, src.c_str(), &ifc.addr) != 1) return j.Err(EINVAL, "source").Emit();
    j.Str("source", src);
  }
  if (const std::string smac = op.Str("source-mac", ""); !smac.empty()) {
    if (!ParseMac(smac, ifc.mac)) return j.Err(EINVAL, "source-mac").Emit();
    j.Str("source_mac", smac);
  }
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_protocol = htons(ETH_P_IP);
  ll.sll_ifindex = ifc.index;
  ll.sll_halen = 6;
  std::memcpy(ll.sll_addr, mac, 6);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&ll), sizeof(ll)) != 0) return j.Err(errno, "bind").Emit();
  std::string stage;
  int err = SendVia(fd.get(), UdpFrame(mac, ifc, dst, port, op.Str("payload", kDefaultPayload)), via, &ll, &stage);
  if (err) return j.Err(err, stage).Emit();
  j.Ok().Emit();
}

// packet-sniff DST PORT: a packet socket, then an ordinary UDP datagram to
// DST:PORT; "captured": whether the packet socket saw it leave.
void OpPacketSniff(const Op& op) {
  Json j(op.name);
  j.Str("dst", op.pos[0]).Str("port", op.pos[1]);
  Target t;
  uint16_t port = 0;
  ParsePort(op.pos[1], &port);
  MakeTarget(op.pos[0], port, false, &t);
  // ETH_P_ALL: only "all protocols" taps see outgoing frames.
  Fd fd(socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, htons(ETH_P_ALL)));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  j.Str("socket", "created");
  Fd udp(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  const std::string payload = op.Str("payload", kDefaultPayload);
  if (sendto(udp.get(), payload.data(), payload.size(), 0, reinterpret_cast<sockaddr*>(&t.sa), t.len) < 0)
    return j.Err(errno, "sendto").Emit();
  const long long deadline = NowMs() + op.Int("wait-ms", kDefaultWaitMs);
  bool captured = false;
  while (!captured) {
    long long left = deadline - NowMs();
    if (left < 0 || !WaitFd(fd.get(), POLLIN, static_cast<int>(left))) break;
    uint8_t buf[2048];
    sockaddr_ll from{};
    socklen_t fl = sizeof(from);
    ssize_t n = recvfrom(fd.get(), buf, sizeof(buf), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &fl);
    if (n < 28 || from.sll_protocol != htons(ETH_P_IP)) continue;
    const auto* ip = reinterpret_cast<const iphdr*>(buf);
    const auto* u = reinterpret_cast<const udphdr*>(buf + ip->ihl * 4);
    captured = ip->protocol == IPPROTO_UDP &&
               ip->daddr == reinterpret_cast<sockaddr_in*>(&t.sa)->sin_addr.s_addr && ntohs(u->dest) == port;
  }
  j.Ok().Bool("captured", captured).Emit();
}

// socket-family N [--type T]: socket(N, T (default SOCK_RAW), 0).
void OpSocketFamily(const Op& op) {
  const int family = std::stoi(op.pos[0]);
  const int type = op.Int("type", SOCK_RAW);
  Json j(op.name);
  j.Int("family", family).Int("type", type);
  if (op.Flag("pair")) {
    int sv[2];
    if (socketpair(family, type | SOCK_CLOEXEC, 0, sv) != 0) return j.Err(errno, "socketpair").Emit();
    Fd a(sv[0]), b(sv[1]);
    return j.Str("socket", "created").Ok().Emit();
  }
  Fd fd(socket(family, type | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  j.Str("socket", "created").Ok().Emit();
}

// uring-socket N [--type T]: IORING_OP_SOCKET, a socket made by io_uring
// without socket(2): a filter on the socket syscall alone never sees it.
// "stage" io_uring_setup when the ring itself is refused.
void OpUringSocket(const Op& op) {
  const int family = std::stoi(op.pos[0]);
  const int type = op.Int("type", SOCK_RAW);
  Json j(op.name);
  j.Int("family", family).Int("type", type);
  io_uring ring;
  if (int r = io_uring_queue_init(2, &ring, 0); r < 0) return j.Err(-r, "io_uring_setup").Emit();
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  io_uring_prep_socket(sqe, family, type | SOCK_CLOEXEC, 0, 0);
  int made = -1;
  const int err = SubmitOne(&ring, &made);
  io_uring_queue_exit(&ring);
  if (err != 0) return j.Err(err, "uring-socket").Emit();
  Fd fd(made);
  j.Str("socket", "created").Ok().Emit();
}

// xdp-socket: socket(AF_XDP).  With a socket, bind() to a queue and TX need
// a UMEM; the family is refused before any of that matters.
void OpXdpSocket(const Op& op) {
  Json j(op.name);
  Fd fd(socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  j.Str("socket", "created").Ok().Emit();
}

// vsock-connect PORT: AF_VSOCK stream to this VM's own local CID (never the
// hypervisor's: its ports belong to the machine's own agents).
void OpVsockConnect(const Op& op) {
  Json j(op.name);
  Fd fd(socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  j.Str("socket", "created");
  sockaddr_vm vm{};
  vm.svm_family = AF_VSOCK;
  vm.svm_cid = VMADDR_CID_LOCAL;
  vm.svm_port = static_cast<unsigned>(std::stoul(op.pos[0]));
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&vm), sizeof(vm)) != 0) {
    j.Str("connect_errno", ErrName(errno));
  } else {
    j.Str("connect_errno", "");
  }
  j.Ok().Emit();
}

// unix-listen NAME [--dgram]: abstract @NAME; prints {"state":"listening"},
// then one line per connection (with what it sent) or datagram, until killed.
void OpUnixListen(const Op& op) {
  const bool dgram = op.Flag("dgram");
  sockaddr_un sa;
  socklen_t len;
  std::string shown = UnixName(op.pos[0], &sa, &len);
  Json j(op.name);
  j.Str("name", shown);
  Fd fd(socket(AF_UNIX, (dgram ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), len) != 0) return j.Err(errno, "bind").Emit();
  if (!dgram && listen(fd.get(), 16) != 0) return j.Err(errno, "listen").Emit();
  Json(op.name).Str("name", shown).Str("state", "listening").Emit();
  for (;;) {
    char buf[512];
    ssize_t n;
    if (dgram) {
      n = recv(fd.get(), buf, sizeof(buf), 0);
    } else {
      Fd c(accept4(fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c.ok()) continue;
      n = recv(c.get(), buf, sizeof(buf), 0);
    }
    Json(op.name).Str("name", shown).Str("got", n > 0 ? std::string(buf, n) : "").Emit();
  }
}

// unix-connect NAME [--dgram]: connect to abstract @NAME and send the payload.
void OpUnixConnect(const Op& op) {
  const bool dgram = op.Flag("dgram");
  sockaddr_un sa;
  socklen_t len;
  Json j(op.name);
  j.Str("name", UnixName(op.pos[0], &sa, &len)).Str("type", dgram ? "dgram" : "stream");
  Fd fd(socket(AF_UNIX, (dgram ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  const std::string payload = op.Str("payload", kDefaultPayload);
  if (dgram) {
    // sendto (unconnected): unix_may_send runs on every datagram.
    if (sendto(fd.get(), payload.data(), payload.size(), 0, reinterpret_cast<sockaddr*>(&sa), len) < 0)
      return j.Err(errno, "sendto").Emit();
  } else {
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), len) != 0) return j.Err(errno, "connect").Emit();
    if (send(fd.get(), payload.data(), payload.size(), 0) < 0) return j.Err(errno, "send").Emit();
  }
  j.Ok().Emit();
}

}  // namespace egressd::probe
