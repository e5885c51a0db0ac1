#include "userspace/dns/upstream.h"

#include <ares.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>

#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "userspace/dns/upstream_socket.h"

namespace egressd::dns {

namespace asio = boost::asio;

std::string UpstreamServer::ToString() const {
  return addr.is_v4() ? absl::StrCat(addr.ToString(), ":", port) : absl::StrCat("[", addr.ToString(), "]:", port);
}

absl::StatusOr<UpstreamServer> ParseUpstreamServer(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("upstream DNS server ", net::Quote(text), ": ", std::string(why)));
  };
  std::string_view host = text, port_text;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return bad("no closing ]");
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return bad("expected :PORT after ]");
      port_text = rest.substr(1);
      if (port_text.empty()) return bad("empty port");
    }
  } else if (std::count(text.begin(), text.end(), ':') == 1) {
    size_t colon = text.find(':');
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
    if (port_text.empty()) return bad("empty port");
  }
  auto ip = net::IpAddr::Parse(host);
  if (!ip.ok()) return bad("not an IP address (IP[:PORT] or [IPv6]:PORT)");
  UpstreamServer s{*ip, 53};
  if (!port_text.empty()) {
    uint32_t p = 0;
    if (!absl::SimpleAtoi(std::string(port_text), &p) || p == 0 || p > 65535) return bad("port is not 1-65535");
    s.port = static_cast<uint16_t>(p);
  }
  return s;
}

namespace {

struct Watch {
  explicit Watch(asio::io_context& io, int fd) : sd(io, fd) {}
  asio::posix::stream_descriptor sd;
  bool want_read = false, want_write = false;
  bool reading = false, writing = false;
  bool alive = true;
};

struct Pending {
  Upstream::Callback done;
};

// c-ares calls this for every socket it opens, before connect().
int MarkSocket(ares_socket_t fd, int /*type*/, void* mark) {
  const uint32_t m = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(mark));
  return setsockopt(fd, SOL_SOCKET, SO_MARK, &m, sizeof(m)) == 0 ? 0 : -1;
}

void OnAnswer(void* arg, int status, int /*timeouts*/, unsigned char* abuf, int alen) {
  std::unique_ptr<Pending> p(static_cast<Pending*>(arg));
  if (status == ARES_EDESTRUCTION) return;  // the proxy is going away
  if (status == ARES_SUCCESS && abuf != nullptr && alen > 0) {
    p->done(Bytes(abuf, abuf + alen));
  } else {
    p->done(absl::UnavailableError(absl::StrCat("upstream: ", ares_strerror(status))));
  }
}

// The server's address as c-ares 1.18 hands it to connect() (zeroed, then
// family, port and address: ares_process.c open_socket).
sockaddr_storage ServerAddress(const UpstreamServer& s, socklen_t& len) {
  sockaddr_storage ss;
  std::memset(&ss, 0, sizeof(ss));
  const auto& b = s.addr.bytes();
  if (s.addr.is_v4()) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(s.port);
    std::memcpy(&a->sin_addr, b.data(), 4);
    len = sizeof(sockaddr_in);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(s.port);
    std::memcpy(&a->sin6_addr, b.data(), 16);
    len = sizeof(sockaddr_in6);
  }
  return ss;
}

}  // namespace

struct Upstream::Channel : std::enable_shared_from_this<Upstream::Channel> {
  explicit Channel(asio::io_context& io) : io(io), timer(io) {}

  asio::io_context& io;
  ares_channel ch = nullptr;
  asio::steady_timer timer;
  bool armed = false;  // a wait is pending on `timer`, due at armed_due
  std::chrono::steady_clock::time_point armed_due;
  std::map<int, std::shared_ptr<Watch>> watches;
  std::shared_ptr<UpstreamGuard> guard;  // kept alive while c-ares may close a socket
  GuardedSockets guarded;                // the socket functions' user data
  bool refill_posted = false;            // a Refill() is waiting on the loop

  static void SockState(void* data, ares_socket_t fd, int readable, int writable) {
    auto* c = static_cast<Channel*>(data);
    auto it = c->watches.find(fd);
    if (!readable && !writable) {
      if (it != c->watches.end()) {
        it->second->alive = false;
        boost::system::error_code ec;
        it->second->sd.cancel(ec);
        it->second->sd.release();  // c-ares closes its own fd
        c->watches.erase(it);
      }
      return;
    }
    if (it == c->watches.end()) it = c->watches.emplace(fd, std::make_shared<Watch>(c->io, fd)).first;
    it->second->want_read = readable != 0;
    it->second->want_write = writable != 0;
    c->Arm(it->second, fd);
  }

  void Arm(const std::shared_ptr<Watch>& w, int fd) {
    auto self = shared_from_this();
    if (w->want_read && !w->reading) {
      w->reading = true;
      w->sd.async_wait(asio::posix::descriptor_base::wait_read, [self, w, fd](const boost::system::error_code& ec) {
        w->reading = false;
        if (ec || !w->alive || self->ch == nullptr) return;
        ares_process_fd(self->ch, fd, ARES_SOCKET_BAD);
        if (w->alive) self->Arm(w, fd);
        self->ResetTimer();
      });
    }
    if (w->want_write && !w->writing) {
      w->writing = true;
      w->sd.async_wait(asio::posix::descriptor_base::wait_write, [self, w, fd](const boost::system::error_code& ec) {
        w->writing = false;
        if (ec || !w->alive || self->ch == nullptr) return;
        ares_process_fd(self->ch, ARES_SOCKET_BAD, fd);
        if (w->alive) self->Arm(w, fd);
        self->ResetTimer();
      });
    }
  }

  // Keeps the timer at or before c-ares' next deadline.  Re-armed only when
  // that deadline moves earlier than the one armed (a cancel and a new wait
  // per query were a fifth of the upstream's instructions, bench/dns_ir.sh):
  // a wait that fires early finds nothing timed out and re-arms for what is
  // left; one with nothing left to time out is left to fire once.
  void ResetTimer() {
    if (ch == nullptr) return;
    timeval tv{};
    timeval* t = ares_timeout(ch, nullptr, &tv);
    if (t == nullptr) return;
    const auto due = std::chrono::steady_clock::now() + std::chrono::seconds(t->tv_sec) +
                     std::chrono::microseconds(t->tv_usec);
    if (armed && due >= armed_due) return;
    armed = true;
    armed_due = due;
    timer.expires_at(due);
    auto self = shared_from_this();
    timer.async_wait([self](const boost::system::error_code& ec) {
      if (ec == asio::error::operation_aborted) return;  // re-armed earlier, or destroyed
      self->armed = false;
      if (ec || self->ch == nullptr) return;
      ares_process_fd(self->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
      self->ResetTimer();
    });
  }

  void Destroy() {
    if (ch == nullptr) return;
    ares_channel c = ch;
    ares_destroy(c);  // EDESTRUCTION to every pending query; closes sockets
    ch = nullptr;
    guarded.Drain();
    timer.cancel();
    for (auto& [fd, w] : watches) {
      w->alive = false;
      boost::system::error_code ec;
      w->sd.cancel(ec);
      w->sd.release();
    }
    watches.clear();
  }
};

absl::StatusOr<std::unique_ptr<Upstream>> Upstream::Create(asio::io_context& io, const UpstreamOptions& opts) {
  if (opts.servers.empty()) return absl::InvalidArgumentError("no upstream DNS server (--upstream-dns IP[:PORT])");
  static std::once_flag once;
  static int init_status = ARES_SUCCESS;
  std::call_once(once, [] { init_status = ares_library_init(ARES_LIB_INIT_ALL); });
  if (init_status != ARES_SUCCESS) {
    return absl::InternalError(absl::StrCat("c-ares init: ", ares_strerror(init_status)));
  }
  std::vector<std::string> csv;
  for (const auto& s : opts.servers) csv.push_back(s.ToString());
  const std::string servers = absl::StrJoin(csv, ",");

  std::unique_ptr<Upstream> up(new Upstream());
  for (bool tcp : {false, true}) {
    auto c = std::make_shared<Channel>(io);
    ares_options o{};
    int mask = ARES_OPT_FLAGS | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_SOCK_STATE_CB;
    // IGNTC: a truncated UDP answer goes back to the client as it is.
    o.flags = ARES_FLAG_NOSEARCH | ARES_FLAG_NOALIASES | (tcp ? ARES_FLAG_USEVC | ARES_FLAG_STAYOPEN : ARES_FLAG_IGNTC);
    o.timeout = opts.timeout_ms;
    o.tries = opts.tries;
    o.sock_state_cb = &Channel::SockState;
    o.sock_state_cb_data = c.get();
    int rc = ares_init_options(&c->ch, &o, mask);
    if (rc != ARES_SUCCESS) return absl::InternalError(absl::StrCat("c-ares channel: ", ares_strerror(rc)));
    // Answers forged by a sandbox: refused in its own cgroup's hooks by the
    // guard on the socket's address and port, and unheard by a socket bound
    // to the upstream's route anyway (upstream_socket.h).
    if (opts.guard) {
      c->guard = opts.guard;
      c->guarded.guard = c->guard.get();
      ares_set_socket_functions(c->ch, GuardedSocketFunctions(), &c->guarded);
      // UDP sockets prepared ahead for a single server (upstream_socket.h),
      // made on this loop after the query that took one has left.
      if (!tcp && opts.servers.size() == 1 && opts.socket_mark == 0) {
        c->guarded.ready_server = ServerAddress(opts.servers[0], c->guarded.ready_server_len);
        std::weak_ptr<Channel> weak = c;
        c->guarded.refill = [weak] {
          auto self = weak.lock();
          if (!self || self->refill_posted) return;
          self->refill_posted = true;
          asio::post(self->io, [weak] {
            auto ch = weak.lock();
            if (!ch) return;
            ch->refill_posted = false;
            if (ch->ch != nullptr) ch->guarded.Refill();
          });
        };
      }
    } else {
      ares_set_socket_functions(c->ch, InterfaceBoundSocketFunctions(), nullptr);
    }
    rc = ares_set_servers_ports_csv(c->ch, servers.c_str());
    if (rc != ARES_SUCCESS) {
      c->Destroy();
      return absl::InvalidArgumentError(absl::StrCat("upstream DNS servers \"", servers, "\": ", ares_strerror(rc)));
    }
    if (opts.socket_mark != 0) {
      ares_set_socket_configure_callback(c->ch, &MarkSocket,
                                         reinterpret_cast<void*>(static_cast<uintptr_t>(opts.socket_mark)));
    }
    (tcp ? up->tcp_ : up->udp_) = std::move(c);
  }
  spdlog::info("dns: upstream {}", servers);
  return up;
}

Upstream::~Upstream() {
  if (udp_) udp_->Destroy();
  if (tcp_) tcp_->Destroy();
}

Upstream::UdpSockets Upstream::udp_sockets() const {
  return UdpSockets{udp_->guarded.ready_used, udp_->guarded.fresh_made, udp_->guarded.route_lookups};
}

void Upstream::Send(std::span<const uint8_t> query, bool tcp, Callback done) {
  Channel& c = tcp ? *tcp_ : *udp_;
  if (c.ch == nullptr) {
    done(absl::UnavailableError("upstream: channel closed"));
    return;
  }
  auto* p = new Pending{std::move(done)};
  ares_send(c.ch, query.data(), static_cast<int>(query.size()), &OnAnswer, p);
  c.ResetTimer();
}

}  // namespace egressd::dns
