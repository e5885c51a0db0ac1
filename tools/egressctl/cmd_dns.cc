// egressctl dns serve: the DNS proxy alone, in the node's namespace, for every
// registered sandbox (the daemon hosts the same in its own loop).  Sandboxes
// come from the persistent records, followed by userspace/daemon's
// RecordWatcher.

#include <cstdio>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "maps/pinned_maps.h"
#include "tools/egressctl/commands.h"
#include "tools/egressctl/policy_flags.h"
#include "tools/egressctl/run_dns.h"
#include "userspace/common/errors.h"
#include "userspace/control/sandbox_record.h"
#include "userspace/daemon/dns_host.h"
#include "userspace/daemon/record_watcher.h"
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
  if (absl::Status s = daemon::CheckOutsideSandboxes(*all, "egressctl dns serve"); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return kExitFailure;
  }

  asio::io_context io;
  daemon::DnsHostOptions ho;
  ho.upstream = uo;
  ho.SetFrom(*config_dns);
  ho.audit_source = "dns-proxy";
  auto host = daemon::DnsHost::Create(io, paths, *maps, std::move(ho));
  if (!host.ok()) {
    spdlog::error("{}", host.status().ToString());
    return kExitFailure;
  }
  dns::DnsProxy& proxy = (*host)->proxy();
  const dns::ProxyOptions& proxy_options = (*host)->proxy_options();
  daemon::RecordWatcher watcher(io, records, proxy, Say);
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
  spdlog::info("dns: {} queries ({} UDP reads), {} denied, {} forwarded, {} answered, {} servfail, {} learned, "
               "{} learn failures",
               c.queries.load(), c.udp_reads.load(), c.denied.load(), c.forwarded.load(), c.answered.load(),
               c.servfail.load(), c.learned.load(), c.learn_failed.load());
  // The bounds' counters for whoever stopped it (tests, scripts): one line.
  Say(absl::StrCat("counters: learned ", c.learned.load(), " evicted ", c.evicted.load(), " evict_failed ",
                   c.evict_failed.load(), " name_cap_refused ", c.cap_refused.load(), " quota_refused ",
                   c.quota_refused.load(), " (bounds ", proxy_options.bounds.per_sandbox, " per sandbox, ",
                   proxy_options.bounds.per_name, " per name)"));
  return kExitOk;
}

}  // namespace egressd::cli
