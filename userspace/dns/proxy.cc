#include "userspace/dns/proxy.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <set>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"
#include "userspace/dns/learned_book.h"
#include "userspace/dns/proxy_internal.h"
#include "userspace/dns/udp_endpoint.h"

namespace egressd::dns {

namespace asio = boost::asio;
using asio::ip::tcp;
using asio::ip::udp;

namespace {

uint64_t RealtimeNs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

uint64_t NsBetween(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count());
}

// Notes when the last successful map write of one answer returned (the
// observer's answer-to-map time); writes pass through unchanged.
class TimedSink : public LearnedAddressSink {
 public:
  explicit TimedSink(LearnedAddressSink& inner) : inner_(inner) {}
  absl::Status Learn(uint64_t sandbox, const net::IpAddr& addr, uint64_t expires_boot_ns, uint32_t name_id) override {
    absl::Status s = inner_.Learn(sandbox, addr, expires_boot_ns, name_id);
    if (s.ok()) last_learned = std::chrono::steady_clock::now();
    return s;
  }
  absl::Status LearnAnswer(uint64_t sandbox, const net::IpAddr& addr, uint64_t expires_boot_ns, uint32_t name_id,
                           uint32_t qname_id) override {
    absl::Status s = inner_.LearnAnswer(sandbox, addr, expires_boot_ns, name_id, qname_id);
    if (s.ok()) last_learned = std::chrono::steady_clock::now();
    return s;
  }
  absl::Status Forget(uint64_t sandbox, const net::IpAddr& addr) override { return inner_.Forget(sandbox, addr); }
  absl::StatusOr<bool> InUse(uint64_t sandbox, const net::IpAddr& addr) const override {
    return inner_.InUse(sandbox, addr);
  }
  std::optional<std::chrono::steady_clock::time_point> last_learned;

 private:
  LearnedAddressSink& inner_;
};

}  // namespace

namespace proxy_internal {

void Handle(const std::shared_ptr<Shared>& sh, const std::shared_ptr<Live>& live, std::span<const uint8_t> msg,
            bool over_tcp, Reply reply) {
  std::shared_ptr<const SandboxScope> scope = live->scope;
  std::shared_ptr<QueryEvent> ev;
  if (sh->opts.observer) {
    ev = std::make_shared<QueryEvent>();
    ev->sandbox_id = scope->sandbox_id;
    ev->over_tcp = over_tcp;
    ev->realtime_ns = RealtimeNs();
  }
  Decision d = Decide(*scope, msg, *sh->counters, ev.get());
  if (d.kind != Decision::kForward) {
    reply(d.kind == Decision::kRespond ? std::move(d.response) : Bytes{});
    if (ev) sh->opts.observer->OnQuery(std::move(ev));
    return;
  }
  auto fwd = std::make_shared<Decision>(std::move(d));
  size_t limit = over_tcp ? kMaxMessage : UdpLimit(fwd->query);
  const auto asked = std::chrono::steady_clock::now();
  ++sh->forwarded;
  sh->upstream.Send(fwd->upstream_query, over_tcp,
                    [sh, live, scope, fwd, limit, ev, asked, reply = std::move(reply)](absl::StatusOr<Bytes> answer) {
                      if (!sh->alive) return;
                      --sh->forwarded;
                      const auto answered = ev ? std::chrono::steady_clock::now() : asked;
                      if (ev) ev->upstream_ns = NsBetween(asked, answered);
                      if (live->stopped) {
                        if (ev) {
                          ev->upstream_error = "the sandbox stopped being served before the answer came";
                          sh->opts.observer->OnQuery(ev);
                        }
                        return;
                      }
                      // Synchronous writes in the one loop thread: the answers
                      // of one sandbox are finished one at a time, so two for
                      // the same name can never interleave their writes.
                      if (!ev) {
                        reply(Finish(*scope, *fwd, answer, limit, sh->sink, sh->opts.lifetime, BootTimeNs(),
                                     *sh->counters, nullptr, live->book.get()));
                        return;
                      }
                      TimedSink timed(sh->sink);
                      Bytes out = Finish(*scope, *fwd, answer, limit, timed, sh->opts.lifetime, BootTimeNs(),
                                         *sh->counters, ev.get(), live->book.get());
                      if (timed.last_learned) ev->learn_ns = NsBetween(answered, *timed.last_learned);
                      reply(std::move(out));
                      sh->opts.observer->OnQuery(ev);
                    });
}

absl::Status FromAsio(const boost::system::error_code& ec, const std::string& what) {
  return ErrnoStatus(ec.value(), what);
}

}  // namespace proxy_internal

namespace {

using namespace proxy_internal;  // NOLINT: the endpoint servers' shared vocabulary

asio::ip::address ToAsio(const net::IpAddr& a) {
  if (a.is_v4()) {
    const auto& b = a.bytes();
    return asio::ip::address_v4(asio::ip::address_v4::bytes_type{b[0], b[1], b[2], b[3]});
  }
  asio::ip::address_v6::bytes_type b;
  std::copy(a.bytes().begin(), a.bytes().end(), b.begin());
  return asio::ip::address_v6(b);
}

class TcpServer;

// One client connection: length-prefixed messages (RFC 1035 4.2.2), several
// in flight at once (RFC 7766), answers written in the order they are ready.
class TcpConn : public std::enable_shared_from_this<TcpConn> {
 public:
  TcpConn(tcp::socket s, std::shared_ptr<Shared> sh, std::shared_ptr<Live> live, std::function<void(TcpConn*)> gone)
      : sock_(std::move(s)), idle_(sock_.get_executor()), sh_(std::move(sh)), live_(std::move(live)),
        gone_(std::move(gone)) {}

  void Start() {
    ArmIdle();
    ReadLength();
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ec;
    sock_.close(ec);
    idle_.cancel();
    auto gone = std::move(gone_);
    if (gone) gone(this);
  }

 private:
  void ReadLength() {
    if (closed_) return;
    if (in_flight_ >= sh_->opts.max_tcp_in_flight) {
      paused_ = true;
      return;
    }
    auto self = shared_from_this();
    asio::async_read(sock_, asio::buffer(len_), [self](const boost::system::error_code& ec, size_t) {
      if (ec) return self->EndOfInput();
      size_t n = (size_t{self->len_[0]} << 8) | self->len_[1];
      if (n == 0) return self->Close();
      self->msg_.resize(n);
      asio::async_read(self->sock_, asio::buffer(self->msg_), [self](const boost::system::error_code& ec2, size_t) {
        if (ec2) return self->EndOfInput();
        self->ArmIdle();
        ++self->in_flight_;
        Handle(self->sh_, self->live_, self->msg_, true, [self](Bytes b) { self->Answered(std::move(b)); });
        self->ReadLength();
      });
    });
  }

  void Answered(Bytes b) {
    --in_flight_;
    if (closed_) return;
    if (!b.empty()) {
      auto framed = std::make_shared<Bytes>();
      framed->reserve(b.size() + 2);
      framed->push_back(static_cast<uint8_t>(b.size() >> 8));
      framed->push_back(static_cast<uint8_t>(b.size() & 0xff));
      framed->insert(framed->end(), b.begin(), b.end());
      out_.push_back(std::move(framed));
      if (!writing_) WriteNext();
    }
    if (paused_) {
      paused_ = false;
      ReadLength();
    }
    MaybeClose();
  }

  void WriteNext() {
    writing_ = true;
    auto self = shared_from_this();
    asio::async_write(sock_, asio::buffer(*out_.front()), [self](const boost::system::error_code& ec, size_t) {
      if (ec) return self->Close();
      self->out_.pop_front();
      self->ArmIdle();
      if (self->out_.empty()) {
        self->writing_ = false;
        self->MaybeClose();
      } else {
        self->WriteNext();
      }
    });
  }

  void EndOfInput() {
    input_done_ = true;
    MaybeClose();
  }

  void MaybeClose() {
    if (input_done_ && in_flight_ == 0 && out_.empty()) Close();
  }

  void ArmIdle() {
    if (closed_) return;
    idle_.expires_after(std::chrono::milliseconds(sh_->opts.tcp_idle_ms));
    std::weak_ptr<TcpConn> weak = weak_from_this();
    idle_.async_wait([weak](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self || self->closed_) return;
      if (self->in_flight_ == 0 && self->out_.empty()) {
        self->Close();
      } else {
        self->ArmIdle();
      }
    });
  }

  tcp::socket sock_;
  asio::steady_timer idle_;
  std::shared_ptr<Shared> sh_;
  std::shared_ptr<Live> live_;
  std::function<void(TcpConn*)> gone_;
  std::array<uint8_t, 2> len_{};
  Bytes msg_;
  std::deque<std::shared_ptr<Bytes>> out_;
  size_t in_flight_ = 0;
  bool writing_ = false, paused_ = false, input_done_ = false, closed_ = false;
};

class TcpServer : public std::enable_shared_from_this<TcpServer> {
 public:
  TcpServer(asio::io_context& io, std::shared_ptr<Shared> sh, std::shared_ptr<Live> live)
      : acc_(io), sh_(std::move(sh)), live_(std::move(live)) {}

  absl::Status Open(const tcp::endpoint& ep, UniqueFd inherited = {}) {
    boost::system::error_code ec;
    bool v6 = ep.address().is_v6();
    if (inherited.valid()) {
      // The previous daemon's listener: connections queued in its backlog wait for us.
      acc_.assign(v6 ? tcp::v6() : tcp::v4(), inherited.release(), ec);
      if (ec) return FromAsio(ec, absl::StrCat("adopt TCP ", ep.address().to_string(), " port ", ep.port()));
      return absl::OkStatus();
    }
    acc_.open(v6 ? tcp::v6() : tcp::v4(), ec);
    if (!ec && v6) acc_.set_option(asio::ip::v6_only(true), ec);
    if (!ec) acc_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) {
      FreeBind(acc_, v6);
      acc_.bind(ep, ec);
    }
    if (!ec) acc_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return FromAsio(ec, absl::StrCat("bind TCP ", ep.address().to_string(), " port ", ep.port()));
    return absl::OkStatus();
  }

  // Accepts no more; the connections accepted are served until they end.
  void Quiesce() {
    boost::system::error_code ec;
    acc_.cancel(ec);
  }
  int fd() { return acc_.native_handle(); }
  size_t connections() const { return conns_.size(); }
  void CloseConnections() {
    auto conns = std::move(conns_);
    for (auto& c : conns) c->Close();
  }

  void Accept() {
    auto self = shared_from_this();
    acc_.async_accept([self](const boost::system::error_code& ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted || !self->acc_.is_open() || self->live_->stopped) return;
      if (!ec) {
        if (self->conns_.size() >= self->sh_->opts.max_tcp_connections) {
          boost::system::error_code ignored;
          s.close(ignored);
        } else {
          std::weak_ptr<TcpServer> weak = self;
          auto c = std::make_shared<TcpConn>(std::move(s), self->sh_, self->live_, [weak](TcpConn* gone) {
            if (auto srv = weak.lock()) srv->Forget(gone);
          });
          self->conns_.insert(c);
          c->Start();
        }
      }
      self->Accept();
    });
  }

  void Close() {
    boost::system::error_code ec;
    acc_.close(ec);
    auto conns = std::move(conns_);
    for (auto& c : conns) c->Close();
  }

 private:
  void Forget(TcpConn* c) {
    for (auto it = conns_.begin(); it != conns_.end(); ++it) {
      if (it->get() == c) {
        conns_.erase(it);
        return;
      }
    }
  }

  tcp::acceptor acc_;
  std::shared_ptr<Shared> sh_;
  std::shared_ptr<Live> live_;
  std::set<std::shared_ptr<TcpConn>> conns_;
};

}  // namespace

struct DnsProxy::Sandbox {
  Endpoint ep;
  std::shared_ptr<Live> live;
  std::vector<std::shared_ptr<UdpServer>> udp;
  std::vector<std::shared_ptr<TcpServer>> tcp;
  bool reading = false;

  void StartReading() {
    if (reading) return;
    reading = true;
    for (auto& u : udp) u->Receive();
    for (auto& t : tcp) t->Accept();
  }

  void Close() {
    live->stopped = true;
    for (auto& u : udp) u->Close();
    for (auto& t : tcp) t->Close();
  }
};

DnsProxy::DnsProxy(asio::io_context& io, Upstream& upstream, LearnedAddressSink& sink, ProxyOptions opts)
    : io_(io), shared_(std::make_shared<Shared>(Shared{upstream, sink, opts, &counters_})) {}

DnsProxy::~DnsProxy() {
  shared_->alive = false;
  for (auto& [id, s] : sandboxes_) s->Close();
  if (self_test_) {
    self_test_shared_->alive = false;
    self_test_->Close();
  }
}

absl::StatusOr<Endpoint> DnsProxy::ServeSelfTest(const net::IpAddr& addr) {
  if (self_test_) return absl::AlreadyExistsError("the DNS self-test endpoint is already served");
  ProxyOptions opts = shared_->opts;
  opts.observer = nullptr;
  self_test_shared_ = std::make_shared<Shared>(Shared{shared_->upstream, shared_->sink, opts, &self_test_counters_});
  auto sb = std::make_shared<Sandbox>();
  sb->live = std::make_shared<Live>();
  sb->live->book = std::make_shared<LearnedBook>(opts.bounds, opts.qname_key);
  sb->live->scope = std::make_shared<const SandboxScope>(SandboxScope{});  // sandbox 0, no name
  auto u = std::make_shared<UdpServer>(io_, self_test_shared_, sb->live);
  sb->udp.push_back(u);
  if (absl::Status s = u->Open(udp::endpoint(ToAsio(addr), 0)); !s.ok()) {
    sb->Close();
    return absl::Status(s.code(), absl::StrCat("DNS self-test endpoint: ", s.message()));
  }
  u->Receive();
  Endpoint ep;
  (addr.is_v4() ? ep.addr4 : ep.addr6) = addr;
  ep.port = u->LocalPort();
  sb->ep = ep;
  self_test_ = std::move(sb);
  return ep;
}

absl::Status DnsProxy::Serve(SandboxScope scope, const Endpoint& ep) {
  const uint64_t id = scope.sandbox_id;
  auto it = sandboxes_.find(id);
  std::shared_ptr<LearnedBook> book;
  if (it != sandboxes_.end()) {
    book = it->second->live->book;
    // Names the new scope no longer allows leave the book at once (their
    // kernel entries are the kernel side's: ResolvedTable's retention).  A
    // wildcard's seeded addresses are booked under the rule's text.
    const std::vector<std::string> rules = scope.names.Rules();
    const std::set<std::string> rule_set(rules.begin(), rules.end());
    book->RetainNames([&scope, &rule_set](const std::string& name) {
      return rule_set.count(name) > 0 || scope.names.Match(name).has_value();
    });
  }
  if (it != sandboxes_.end() && it->second->ep == ep) {
    it->second->live->scope = std::make_shared<const SandboxScope>(std::move(scope));
    return absl::OkStatus();
  }
  if (it != sandboxes_.end()) Stop(id);
  for (const auto& [other, sb] : sandboxes_) {
    bool shared = (ep.addr4 && ep.addr4 == sb->ep.addr4) || (ep.addr6 && ep.addr6 == sb->ep.addr6);
    if (shared && ep.port == sb->ep.port) {
      return absl::AlreadyExistsError(
          absl::StrCat("sandbox ", id, ": DNS endpoint ", ep.ToString(), " is sandbox ", other, "'s"));
    }
  }
  if (ep.port == 0 || (!ep.addr4 && !ep.addr6)) {
    return absl::InvalidArgumentError(absl::StrCat("sandbox ", id, ": DNS endpoint ", ep.ToString(), " has no address or port"));
  }
  auto sb = std::make_shared<Sandbox>();
  sb->ep = ep;
  sb->live = std::make_shared<Live>();
  if (!book) {
    book = std::make_shared<LearnedBook>(shared_->opts.bounds, shared_->opts.qname_key);
    // First served since the proxy started: the book starts from what the
    // kernel still holds for the sandbox (learned before a restart).
    if (auto seeds = seeds_.find(id); seeds != seeds_.end()) {
      const size_t n = SeedBook(*book, scope.names, seeds->second, BootTimeNs());
      seeds_.erase(seeds);
      seeded_ += n;
      if (n > 0) {
        spdlog::info("dns: sandbox {}: {} learned address(es) still in {} booked against its quota ({} names)", id,
                     n, "egr_resolved_v2", book->names());
      }
    }
  }
  sb->live->book = std::move(book);
  sb->live->scope = std::make_shared<const SandboxScope>(std::move(scope));
  for (const auto& addr : {ep.addr4, ep.addr6}) {
    if (!addr) continue;
    auto u = std::make_shared<UdpServer>(io_, shared_, sb->live);
    auto t = std::make_shared<TcpServer>(io_, shared_, sb->live);
    sb->udp.push_back(u);
    sb->tcp.push_back(t);
    absl::Status s = u->Open(udp::endpoint(ToAsio(*addr), ep.port), TakeInherited(false, *addr, ep.port));
    if (s.ok()) s = t->Open(tcp::endpoint(ToAsio(*addr), ep.port), TakeInherited(true, *addr, ep.port));
    if (!s.ok()) {
      sb->Close();
      return absl::Status(s.code(), absl::StrCat("sandbox ", id, ": DNS endpoint: ", s.message()));
    }
  }
  if (!hold_reads_) sb->StartReading();
  int granted = 0;
  for (auto& u : sb->udp) granted = granted == 0 ? u->ReceiveBuffer() : std::min(granted, u->ReceiveBuffer());
  spdlog::info("dns: serving sandbox {} at {} (UDP receive buffer {} bytes granted, {} asked)", id, ep.ToString(),
               granted, shared_->opts.udp_receive_buffer);
  sandboxes_[id] = std::move(sb);
  return absl::OkStatus();
}

void DnsProxy::Stop(uint64_t sandbox_id) {
  auto it = sandboxes_.find(sandbox_id);
  if (it == sandboxes_.end()) return;
  it->second->Close();
  sandboxes_.erase(it);
  spdlog::info("dns: stopped serving sandbox {}", sandbox_id);
}

}  // namespace egressd::dns

namespace egressd::dns {

std::vector<DnsProxy::ListeningSocket> DnsProxy::ListeningSockets() const {
  std::vector<ListeningSocket> out;
  for (const auto& [id, sb] : sandboxes_) {
    size_t i = 0;
    for (const auto& addr : {sb->ep.addr4, sb->ep.addr6}) {
      if (!addr) continue;
      out.push_back(ListeningSocket{false, id, *addr, sb->ep.port, sb->udp[i]->fd()});
      out.push_back(ListeningSocket{true, id, *addr, sb->ep.port, sb->tcp[i]->fd()});
      ++i;
    }
  }
  return out;
}

void DnsProxy::Inherit(bool tcp, const net::IpAddr& addr, uint16_t port, UniqueFd fd) {
  hold_reads_ = true;
  inherited_[InheritedKey(tcp, addr, port)] = std::move(fd);
}

void DnsProxy::ReadInherited() {
  hold_reads_ = false;
  for (auto& [id, sb] : sandboxes_) sb->StartReading();
}

std::string DnsProxy::InheritedKey(bool tcp, const net::IpAddr& addr, uint16_t port) {
  return absl::StrCat(tcp ? "tcp " : "udp ", addr.ToString(), " ", port);
}

UniqueFd DnsProxy::TakeInherited(bool tcp, const net::IpAddr& addr, uint16_t port) {
  auto it = inherited_.find(InheritedKey(tcp, addr, port));
  if (it == inherited_.end()) return UniqueFd();
  UniqueFd fd = std::move(it->second);
  inherited_.erase(it);
  return fd;
}

void DnsProxy::Quiesce() {
  for (auto& [id, sb] : sandboxes_) {
    for (auto& u : sb->udp) u->Quiesce();
    for (auto& t : sb->tcp) t->Quiesce();
  }
}

size_t DnsProxy::Busy() const {
  size_t n = shared_->forwarded;
  for (const auto& [id, sb] : sandboxes_) {
    for (const auto& t : sb->tcp) n += t->connections();
  }
  return n;
}

void DnsProxy::CloseConnections() {
  for (auto& [id, sb] : sandboxes_) {
    for (auto& t : sb->tcp) t->CloseConnections();
  }
}

}  // namespace egressd::dns
