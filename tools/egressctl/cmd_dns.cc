// egressctl dns serve: the DNS proxy alone, in the node's namespace, for every
// registered sandbox (until the daemon hosts it in its own loop).  Sandboxes
// come from the persistent records; a record written or removed while it
// runs is picked up through inotify on the records directory.
#include <sys/inotify.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <set>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "maps/pinned_maps.h"
#include "maps/resolved_table.h"
#include "tools/egressctl/commands.h"
#include "tools/egressctl/policy_flags.h"
#include "tools/egressctl/run_dns.h"
#include "userspace/common/errors.h"
#include "userspace/control/sandbox_record.h"
#include "userspace/audit/dns_events.h"
#include "userspace/audit/user_events.h"
#include "userspace/dns/proxy.h"

namespace egressd::cli {
namespace {

namespace asio = boost::asio;

// What egressctl prints on stdout for whoever waits on it (tests, scripts):
// one line per event, flushed.
void Say(const std::string& line) {
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

// The proxy's upstream sockets are exempt because its cgroup is no sandbox:
// refuse to run inside one (or below one).
absl::Status CheckOutsideSandboxes(const std::vector<control::SandboxRecord>& records) {
  std::ifstream in("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  }
  auto mount = FindCgroup2Mount();
  if (!mount.ok()) return mount.status();
  std::set<uint64_t> sandboxes;
  for (const auto& r : records) sandboxes.insert(r.cgroup_id);
  for (std::string p = path; !p.empty() && p != "/"; p = p.substr(0, p.rfind('/'))) {
    auto id = CgroupIdOf(*mount + p);
    if (id.ok() && sandboxes.count(*id)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "egressctl dns serve runs in cgroup ", path, ", inside sandbox ", *id,
          ": its upstream queries would be judged as the sandbox's; run it outside every sandbox"));
    }
  }
  return absl::OkStatus();
}

class RecordWatcher {
 public:
  RecordWatcher(asio::io_context& io, const control::SandboxRecords& records, dns::DnsProxy& proxy)
      : records_(records), proxy_(proxy), sd_(io) {}

  absl::Status Start() {
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, "inotify_init1");
    if (inotify_add_watch(fd, records_.dir().c_str(), IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE) < 0) {
      int err = errno;
      close(fd);
      return ErrnoStatus(err, absl::StrCat("watch ", records_.dir()));
    }
    sd_.assign(fd);
    Read();
    return absl::OkStatus();
  }

  // Serves or stops the sandbox of record `id` as its file now says.
  void Refresh(uint64_t id) {
    auto r = records_.Load(id);
    if (!r.ok()) {
      spdlog::warn("dns: sandbox record {}: {}", id, r.status().ToString());
      return;
    }
    std::optional<dns::Endpoint> ep = *r ? DnsEndpointOf(**r) : std::nullopt;
    if (!ep) {
      if (proxy_.Serves(id)) {
        proxy_.Stop(id);
        Say(absl::StrCat("stopped ", id));
      } else if (*r) {
        spdlog::warn("dns: sandbox {} has no DNS endpoint in its record: its DNS fails closed", id);
      }
      return;
    }
    absl::Status s = proxy_.Serve(DnsScopeOf(**r), *ep);
    if (!s.ok()) {
      spdlog::error("dns: {}", s.ToString());
      return;
    }
    Say(absl::StrCat("serving ", id, " ", ep->ToString()));
  }

 private:
  void Read() {
    sd_.async_read_some(asio::buffer(buf_), [this](const boost::system::error_code& ec, size_t n) {
      if (ec) {
        if (ec != asio::error::operation_aborted) spdlog::error("dns: inotify: {}", ec.message());
        return;
      }
      std::set<uint64_t> changed;
      for (size_t off = 0; off + sizeof(inotify_event) <= n;) {
        auto* ev = reinterpret_cast<const inotify_event*>(buf_.data() + off);
        off += sizeof(inotify_event) + ev->len;
        if (ev->mask & IN_Q_OVERFLOW) {
          overflowed_ = true;
          continue;
        }
        std::string name = ev->len ? std::string(ev->name) : std::string();
        // Only "<id>.json": temp files of a write in progress are not records.
        if (name.size() <= 5 || name.compare(name.size() - 5, 5, ".json") != 0) continue;
        uint64_t id = 0;
        if (absl::SimpleAtoi(name.substr(0, name.size() - 5), &id)) changed.insert(id);
      }
      if (overflowed_) {
        overflowed_ = false;
        Rescan();
      }
      for (uint64_t id : changed) Refresh(id);
      Read();
    });
  }

  // Events were lost: judge every record again, and stop what has none.
  void Rescan() {
    auto all = records_.List();
    if (!all.ok()) return;
    std::set<uint64_t> seen;
    for (const auto& r : *all) {
      seen.insert(r.cgroup_id);
      Refresh(r.cgroup_id);
    }
    for (uint64_t id : proxy_.Served()) {
      if (!seen.count(id)) Refresh(id);
    }
  }

  const control::SandboxRecords& records_;
  dns::DnsProxy& proxy_;
  asio::posix::stream_descriptor sd_;
  alignas(inotify_event) std::array<char, 64 * 1024> buf_;
  bool overflowed_ = false;
};

}  // namespace

int CmdDnsServe(const Paths& paths, const std::string& config, const std::vector<std::string>& upstreams,
                int timeout_ms, int tries) {
  dns::UpstreamOptions uo;
  for (const auto& u : upstreams) {
    auto s = dns::ParseUpstreamServer(u);
    if (!s.ok()) {
      std::fprintf(stderr, "egressctl: %s\n", std::string(s.status().message()).c_str());
      return kExitBadInput;
    }
    uo.servers.push_back(*s);
  }
  // --upstream-dns wins over the config's dns.upstreams (read, and so
  // checked, whenever --config is given).
  auto config_dns = ConfigDns(config);
  if (!config_dns.ok()) return Report(config_dns.status());
  if (uo.servers.empty()) {
    uo.servers = ToUpstreams(config_dns->upstreams);
  } else if (!config_dns->upstreams.empty()) {
    spdlog::info("dns: --upstream-dns given: the config's dns.upstreams are not asked");
  }
  if (uo.servers.empty()) {
    std::fprintf(stderr,
                 "egressctl: dns serve needs at least one --upstream-dns IP[:PORT] or dns.upstreams in --config\n");
    return kExitBadInput;
  }
  if (timeout_ms <= 0 || tries <= 0) {
    std::fprintf(stderr, "egressctl: --upstream-timeout-ms \"%d\" and --upstream-tries \"%d\" must be positive\n",
                 timeout_ms, tries);
    return kExitBadInput;
  }
  uo.timeout_ms = timeout_ms;
  uo.tries = tries;

  auto maps = maps::PinnedMaps::Open(paths.pin_root);
  if (!maps.ok()) {
    spdlog::error("{} (is egressd loaded? egressctl load)", maps.status().ToString());
    return kExitFailure;
  }
  control::SandboxRecords records(paths);
  if (absl::Status s = MakeDirs(records.dir(), 0700); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return kExitFailure;
  }
  auto all = records.List();
  if (!all.ok()) {
    spdlog::error("{}", all.status().ToString());
    return kExitFailure;
  }
  if (absl::Status s = CheckOutsideSandboxes(*all); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return kExitFailure;
  }

  asio::io_context io;
  auto upstream = dns::Upstream::Create(io, uo);
  if (!upstream.ok()) {
    spdlog::error("{}", upstream.status().ToString());
    return kExitFailure;
  }
  maps::ResolvedTable table(*maps);
  // Every query becomes an audit record (docs/audit.md, "DNS").
  auto audit_writer = audit::UserEventWriter::Open(paths, "dns-proxy");
  if (!audit_writer.ok()) {
    spdlog::error("audit: {}", audit_writer.status().ToString());
    return kExitFailure;
  }
  audit::DnsAudit audit_observer(**audit_writer);
  dns::ProxyOptions proxy_options;
  proxy_options.observer = &audit_observer;
  dns::DnsProxy proxy(io, **upstream, table, proxy_options);
  RecordWatcher watcher(io, records, proxy);
  // Watch first, then read: a record written in between is seen twice, never
  // missed.
  if (absl::Status s = watcher.Start(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return kExitFailure;
  }
  for (const auto& r : *all) watcher.Refresh(r.cgroup_id);

  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code&, int) { io.stop(); });
  Say(absl::StrCat("ready: serving ", proxy.size(), " sandboxes, upstream ", uo.servers[0].ToString()));
  io.run();
  const dns::Counters& c = proxy.counters();
  spdlog::info("dns: {} queries, {} denied, {} forwarded, {} answered, {} servfail, {} learned, {} learn failures",
               c.queries.load(), c.denied.load(), c.forwarded.load(), c.answered.load(), c.servfail.load(),
               c.learned.load(), c.learn_failed.load());
  return kExitOk;
}

}  // namespace egressd::cli
