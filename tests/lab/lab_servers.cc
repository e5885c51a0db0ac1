// Lab servers (TCP echo, UDP echo with per-destination counts, the drain
// markers) and the AF_PACKET capture on the world's veth to the node. Both run
// on threads that joined the world namespace; sockets belong to the namespace
// they were created in.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <set>

#include "absl/strings/str_cat.h"
#include "lab_internal.h"
#include "spdlog/spdlog.h"

namespace egressd::lab {
namespace {

Addr16 FromIn6(const in6_addr& a) {
  Addr16 out;
  std::memcpy(out.data(), &a, 16);
  return out;
}

Addr16 FromIn4(const void* p) {
  Addr16 out{};
  out[10] = out[11] = 0xff;
  std::memcpy(out.data() + 12, p, 4);
  return out;
}

absl::Status JoinNetns(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(absl::StrCat("open ", path), errno);
  int rc = setns(fd, CLONE_NEWNET);
  int e = errno;
  close(fd);
  return rc == 0 ? absl::OkStatus() : ErrnoStatus("setns", e);
}

// ---- servers ------------------------------------------------------------------------

class Servers {
 public:
  Servers(Counters* c, int stop_fd) : counters_(c), stop_fd_(stop_fd) {}
  ~Servers() {
    for (int fd : all_) close(fd);
    if (ep_ >= 0) close(ep_);
  }

  absl::Status Open() {
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    if (ep_ < 0) return ErrnoStatus("epoll_create1", errno);
    Watch(stop_fd_, EPOLLIN);
    for (uint16_t port : kTcpPorts) {
      int fd = Bound(SOCK_STREAM, port);
      if (fd < 0) return ErrnoStatus(absl::StrCat("tcp listener :", port), errno);
      if (listen(fd, 128) != 0) return ErrnoStatus("listen", errno);
      listeners_.insert(fd);
      Watch(fd, EPOLLIN);
    }
    for (uint16_t port : kUdpPorts) {
      int fd = Bound(SOCK_DGRAM, port);
      if (fd < 0) return ErrnoStatus(absl::StrCat("udp socket :", port), errno);
      int one = 1;
      setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof(one));
      setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one));
      udp_port_[fd] = port;
      Watch(fd, EPOLLIN);
    }
    marker_fd_ = Bound(SOCK_DGRAM, kMarkerPort);
    if (marker_fd_ < 0) return ErrnoStatus(absl::StrCat("udp socket :", kMarkerPort), errno);
    Watch(marker_fd_, EPOLLIN);
    return absl::OkStatus();
  }

  void Loop() {
    epoll_event evs[64];
    for (;;) {
      int n = epoll_wait(ep_, evs, 64, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return;
      for (int i = 0; i < n; ++i) {
        int fd = evs[i].data.fd;
        if (fd == stop_fd_) return;
        if (listeners_.count(fd)) Accept(fd);
        else if (fd == marker_fd_) Markers();
        else if (udp_port_.count(fd)) Datagrams(fd);
        else if (conns_.count(fd)) Echo(fd, evs[i].events);
      }
    }
  }

 private:
  int Bound(int type, uint16_t port) {
    int fd = socket(AF_INET6, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    all_.insert(fd);
    int zero = 0, one = 1;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(port);
    sa.sin6_addr = in6addr_any;
    if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return -1;
    return fd;
  }

  void Watch(int fd, uint32_t events, int op = EPOLL_CTL_ADD) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    epoll_ctl(ep_, op, fd, &ev);
  }

  void Accept(int lfd) {
    for (;;) {
      int fd = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      sockaddr_in6 local{};
      socklen_t len = sizeof(local);
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
      counters_->TcpAccept(FromIn6(local.sin6_addr), ntohs(local.sin6_port));
      all_.insert(fd);
      conns_[fd];
      Watch(fd, EPOLLIN | EPOLLRDHUP);
    }
  }

  void Close(int fd) {
    epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
    all_.erase(fd);
    conns_.erase(fd);
  }

  void Echo(int fd, uint32_t events) {
    std::string& pending = conns_[fd];
    bool eof = false;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
      char buf[65536];
      while (pending.size() < (1 << 20)) {
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
          pending.append(buf, n);
          continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) eof = true;
        break;
      }
    }
    while (!pending.empty()) {
      ssize_t n = send(fd, pending.data(), pending.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        pending.erase(0, n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
      eof = true;  // peer gone
      pending.clear();
      break;
    }
    if (eof && pending.empty()) return Close(fd);
    Watch(fd, (pending.empty() ? EPOLLIN | EPOLLRDHUP : EPOLLOUT), EPOLL_CTL_MOD);
  }

  void Datagrams(int fd) {
    const uint16_t port = udp_port_[fd];
    for (;;) {
      char buf[65536];
      alignas(cmsghdr) char ctl[512];
      sockaddr_in6 from{};
      iovec iov{buf, sizeof(buf)};
      msghdr m{};
      m.msg_name = &from;
      m.msg_namelen = sizeof(from);
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      m.msg_control = ctl;
      m.msg_controllen = sizeof(ctl);
      ssize_t n = recvmsg(fd, &m, MSG_DONTWAIT);
      if (n < 0) return;
      Addr16 dst{};
      bool have_dst = false;
      for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
          in6_pktinfo pi;
          std::memcpy(&pi, CMSG_DATA(c), sizeof(pi));
          dst = FromIn6(pi.ipi6_addr);
          have_dst = true;
        } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO && !have_dst) {
          in_pktinfo pi;
          std::memcpy(&pi, CMSG_DATA(c), sizeof(pi));
          dst = FromIn4(&pi.ipi_addr);
          have_dst = true;
        }
      }
      if (!have_dst) continue;
      counters_->UdpDatagram(dst, port);
      Reply(fd, buf, n, from, dst);
    }
  }

  void Markers() {
    char buf[256];
    for (;;) {
      ssize_t n = recv(marker_fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n < 0) return;
      counters_->Marker(std::string(buf, n));
    }
  }

  // Echo from the address the datagram was sent to, so connected clients accept it.
  void Reply(int fd, const char* data, size_t len, const sockaddr_in6& to, const Addr16& src) {
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(in6_pktinfo))] = {};
    iovec iov{const_cast<char*>(data), len};
    msghdr m{};
    m.msg_name = const_cast<sockaddr_in6*>(&to);
    m.msg_namelen = sizeof(to);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof(ctl);
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = IPPROTO_IPV6;
    c->cmsg_type = IPV6_PKTINFO;
    c->cmsg_len = CMSG_LEN(sizeof(in6_pktinfo));
    in6_pktinfo pi{};
    std::memcpy(&pi.ipi6_addr, src.data(), 16);
    std::memcpy(CMSG_DATA(c), &pi, sizeof(pi));
    if (sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
      spdlog::debug("lab udp echo to {} failed: {}", AddressToString(FromIn6(to.sin6_addr)),
                    strerror(errno));
    }
  }

  Counters* counters_;
  int stop_fd_;
  int ep_ = -1;
  int marker_fd_ = -1;
  std::set<int> all_, listeners_;
  std::map<int, uint16_t> udp_port_;
  std::map<int, std::string> conns_;
};

// ---- capture ------------------------------------------------------------------------

// Each parser reports where the upper-layer header starts (`*l4`, 0 when there
// is none), so the capture can read a drain marker's payload.
CapturedPacket ParseIPv6(const uint8_t* p, size_t len, size_t* l4) {
  *l4 = 0;
  CapturedPacket c;
  c.v6 = true;
  c.length = len;
  std::memcpy(c.src.data(), p + 8, 16);
  std::memcpy(c.dst.data(), p + 24, 16);
  int nh = p[6];
  c.first_header = nh;
  size_t off = 40;
  bool upper = true;
  for (int hops = 0; hops < 16; ++hops) {
    if (nh == 0 || nh == 43 || nh == 60) {  // hop-by-hop, routing, destination options
      if (off + 2 > len) break;
      int next = p[off];
      off += (p[off + 1] + 1) * 8;
      nh = next;
    } else if (nh == 44) {  // fragment
      if (off + 8 > len) break;
      int next = p[off];
      uint16_t frag = static_cast<uint16_t>(p[off + 2] << 8 | p[off + 3]) & 0xfff8;
      off += 8;
      nh = next;
      if (frag != 0) {  // not the first fragment: no upper-layer header here
        upper = false;
        break;
      }
    } else if (nh == 51) {  // AH
      if (off + 2 > len) break;
      int next = p[off];
      off += (p[off + 1] + 2) * 4;
      nh = next;
    } else {
      break;
    }
  }
  c.proto = nh;
  if (upper && off < len) *l4 = off;
  // TCP flags are byte 13 of the TCP header: SYN 0x02, ACK 0x10.
  c.opens_flow = nh != 6 || (off + 14 <= len && (p[off + 13] & 0x12) == 0x02);
  return c;
}

CapturedPacket ParseIPv4(const uint8_t* p, size_t len, size_t* l4) {
  *l4 = 0;
  CapturedPacket c;
  c.length = len;
  c.src = FromIn4(p + 12);
  c.dst = FromIn4(p + 16);
  c.proto = c.first_header = p[9];
  c.ip_options = (p[0] & 0x0f) > 5;
  const size_t off = (p[0] & 0x0f) * 4;
  const bool first_fragment = (((p[6] << 8) | p[7]) & 0x1fff) == 0;
  c.opens_flow = c.proto != 6 || (first_fragment && off + 14 <= len &&
                                  (p[off + 13] & 0x12) == 0x02);
  if (first_fragment && off < len) *l4 = off;
  return c;
}

// The token of a drain marker (a UDP datagram to kMarkerPort), or "".
std::string MarkerToken(const CapturedPacket& c, const uint8_t* p, size_t len, size_t l4) {
  if (c.proto != IPPROTO_UDP || l4 == 0 || l4 + 8 > len) return "";
  if ((p[l4 + 2] << 8 | p[l4 + 3]) != kMarkerPort) return "";
  return std::string(reinterpret_cast<const char*>(p + l4 + 8), len - l4 - 8);
}

void CaptureLoop(Counters* counters, int fd, int stop_fd) {
  std::vector<uint8_t> buf(1 << 16);
  for (;;) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents) return;
    for (;;) {
      sockaddr_ll sll{};
      socklen_t sl = sizeof(sll);
      ssize_t n = recvfrom(fd, buf.data(), buf.size(), MSG_DONTWAIT,
                           reinterpret_cast<sockaddr*>(&sll), &sl);
      if (n < 0) break;
      if (sll.sll_pkttype == PACKET_OUTGOING) continue;  // replies from the lab hosts
      const uint16_t proto = ntohs(sll.sll_protocol);
      size_t l4 = 0;
      CapturedPacket c;
      if (proto == ETH_P_IP && n >= 20 && (buf[0] >> 4) == 4) {
        c = ParseIPv4(buf.data(), n, &l4);
      } else if (proto == ETH_P_IPV6 && n >= 40 && (buf[0] >> 4) == 6) {
        c = ParseIPv6(buf.data(), n, &l4);
      } else {
        continue;
      }
      counters->Packet(c);
      // After the packet is counted: a drain waiting on this marker then
      // knows the capture has seen everything that arrived before it.
      std::string token = MarkerToken(c, buf.data(), n, l4);
      if (!token.empty()) counters->CapturedMarker(std::move(token));
    }
  }
}

}  // namespace

// ---- Counters -----------------------------------------------------------------------

void Counters::TcpAccept(const Addr16& local, uint16_t port) {
  std::lock_guard<std::mutex> l(mu_);
  ++tcp_[{local, port}];
}

void Counters::UdpDatagram(const Addr16& dst, uint16_t port) {
  std::lock_guard<std::mutex> l(mu_);
  ++udp_[{dst, port}];
}

void Counters::Packet(const CapturedPacket& p) {
  std::lock_guard<std::mutex> l(mu_);
  ++packets_[{p.dst, p.proto, p.first_header, p.ip_options}];
  if (p.opens_flow) ++flows_opened_[p.dst];
  log_.push_back(p);
  if (log_.size() > 4096) log_.pop_front();
}

void Counters::Marker(std::string token) {
  std::lock_guard<std::mutex> l(mu_);
  markers_.insert(std::move(token));
  marker_cv_.notify_all();
}

void Counters::CapturedMarker(std::string token) {
  std::lock_guard<std::mutex> l(mu_);
  captured_markers_.insert(std::move(token));
  marker_cv_.notify_all();
}

bool Counters::WaitMarker(const std::string& token, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> l(mu_);
  return marker_cv_.wait_for(l, timeout, [&] {
    return markers_.count(token) > 0 && captured_markers_.count(token) > 0;
  });
}

uint64_t Counters::FlowsOpened(const Addr16& a) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = flows_opened_.find(a);
  return it == flows_opened_.end() ? 0 : it->second;
}

void Counters::Reset() {
  std::lock_guard<std::mutex> l(mu_);
  tcp_.clear();
  udp_.clear();
  packets_.clear();
  flows_opened_.clear();
  log_.clear();
}

uint64_t Counters::Tcp(const Addr16& a, uint16_t port) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = tcp_.find({a, port});
  return it == tcp_.end() ? 0 : it->second;
}

uint64_t Counters::Udp(const Addr16& a, uint16_t port) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = udp_.find({a, port});
  return it == udp_.end() ? 0 : it->second;
}

uint64_t Counters::Packets(const Addr16& a, int proto, int first_header,
                           bool options_only) const {
  std::lock_guard<std::mutex> l(mu_);
  uint64_t sum = 0;
  for (auto it = packets_.lower_bound({a, INT32_MIN, INT32_MIN, false});
       it != packets_.end() && std::get<0>(it->first) == a; ++it) {
    const auto& [dst, p, fh, opts] = it->first;
    if ((proto < 0 || p == proto) && (first_header < 0 || fh == first_header) &&
        (!options_only || opts))
      sum += it->second;
  }
  return sum;
}

std::vector<CapturedPacket> Counters::Log() const {
  std::lock_guard<std::mutex> l(mu_);
  return {log_.begin(), log_.end()};
}

std::string Counters::Summary() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string s = "tcp accepts:";
  for (const auto& [k, v] : tcp_) absl::StrAppend(&s, " ", AddressToString(k.first), ":", k.second, "=", v);
  absl::StrAppend(&s, "\nudp datagrams:");
  for (const auto& [k, v] : udp_) absl::StrAppend(&s, " ", AddressToString(k.first), ":", k.second, "=", v);
  absl::StrAppend(&s, "\npackets (dst/proto/first/options):");
  for (const auto& [k, v] : packets_) {
    const auto& [dst, p, fh, opts] = k;
    absl::StrAppend(&s, " ", AddressToString(dst), "/", p, "/", fh, opts ? "/opt" : "", "=", v);
  }
  return s;
}

// ---- start / stop -------------------------------------------------------------------

absl::Status StartLabServers(Lab::Impl* impl, const std::string& world_netns,
                             const std::string& capture_ifname) {
  impl->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl->stop_fd < 0) return ErrnoStatus("eventfd", errno);
  Counters* counters = &impl->counters;
  const int stop_fd = impl->stop_fd;

  std::promise<absl::Status> servers_ready;
  auto servers_status = servers_ready.get_future();
  impl->threads.emplace_back([=, ready = std::move(servers_ready)]() mutable {
    Servers s(counters, stop_fd);
    absl::Status st = JoinNetns(world_netns);
    if (st.ok()) st = s.Open();
    bool ok = st.ok();
    ready.set_value(st);
    if (ok) s.Loop();
  });

  std::promise<absl::Status> capture_ready;
  auto capture_status = capture_ready.get_future();
  impl->threads.emplace_back([=, ready = std::move(capture_ready)]() mutable {
    absl::Status st = JoinNetns(world_netns);
    int fd = -1;
    if (st.ok()) {
      // Protocol 0: receive nothing until bind() names the interface and ETH_P_ALL.
      fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (fd < 0) st = ErrnoStatus("socket(AF_PACKET)", errno);
    }
    if (st.ok()) {
      int size = 8 << 20;
      setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size));
      sockaddr_ll sll{};
      sll.sll_family = AF_PACKET;
      sll.sll_protocol = htons(ETH_P_ALL);
      sll.sll_ifindex = static_cast<int>(if_nametoindex(capture_ifname.c_str()));
      if (sll.sll_ifindex == 0) st = ErrnoStatus("if_nametoindex " + capture_ifname, errno);
      else if (bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof(sll)) != 0)
        st = ErrnoStatus("bind(AF_PACKET)", errno);
    }
    bool ok = st.ok();
    if (ok) impl->capture_fd = fd;  // read by Lab::SetCapture once Start returned
    ready.set_value(st);
    if (ok) CaptureLoop(counters, fd, stop_fd);
    if (fd >= 0) close(fd);
  });

  absl::Status a = servers_status.get(), b = capture_status.get();
  return a.ok() ? b : a;
}

void StopLabServers(Lab::Impl* impl) {
  if (impl->stop_fd >= 0) {
    uint64_t one = 1;
    (void)!write(impl->stop_fd, &one, sizeof(one));
  }
  for (auto& t : impl->threads) {
    if (t.joinable()) t.join();
  }
  impl->threads.clear();
  impl->capture_fd = -1;  // closed by its thread
  if (impl->stop_fd >= 0) close(impl->stop_fd);
  impl->stop_fd = -1;
}

}  // namespace egressd::lab
