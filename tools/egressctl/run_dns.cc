#include "tools/egressctl/run_dns.h"

#include <boost/asio/executor_work_guard.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "userspace/policy/yaml_walk.h"

namespace egressd::cli {

std::vector<dns::UpstreamServer> ResolvConfNameservers(const std::string& text) {
  std::vector<dns::UpstreamServer> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<absl::string_view> words = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (words.size() < 2 || words[0] != "nameserver") continue;
    auto s = dns::ParseUpstreamServer(std::string_view(words[1].data(), words[1].size()));
    if (!s.ok()) continue;
    out.push_back(*s);
    if (out.size() == 3) break;
  }
  return out;
}

absl::StatusOr<policy::DnsSettings> ConfigDns(const std::string& path) {
  if (path.empty()) return policy::DnsSettings{};
  auto text = policy::yaml::ReadInputFile(path);
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("--config ", text.status().message()));
  // The public suffix list only adds warnings, which the compiler prints.
  auto d = policy::ParseDeploymentConfig(*text, path, nullptr);
  if (!d.ok()) return d.status();
  return d->dns;
}

std::vector<dns::UpstreamServer> ToUpstreams(const std::vector<policy::DnsUpstreamSetting>& settings) {
  std::vector<dns::UpstreamServer> out;
  for (const auto& u : settings) out.push_back(dns::UpstreamServer{u.addr, u.port});
  return out;
}

dns::Bounds BoundsOf(const policy::DnsSettings& settings) {
  return dns::Bounds{settings.max_addresses_per_sandbox, settings.max_addresses_per_name};
}

absl::Status EndpointsFromConfig(const std::string& config_path, SandboxFlags& sandbox) {
  if (config_path.empty() || !sandbox.dns_endpoint4.empty() || !sandbox.dns_endpoint6.empty()) {
    return absl::OkStatus();
  }
  auto d = ConfigDns(config_path);
  if (!d.ok()) return d.status();
  if (d->endpoint4) sandbox.dns_endpoint4 = d->endpoint4->ToString();
  if (d->endpoint6) sandbox.dns_endpoint6 = d->endpoint6->ToString();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<dns::UpstreamServer>> RunUpstreams(const std::vector<std::string>& flags,
                                                              const std::vector<dns::UpstreamServer>& config,
                                                              const std::string& resolv_conf,
                                                              const policy::CompiledPolicy& policy) {
  std::vector<dns::UpstreamServer> out;
  std::vector<std::string> bad;
  for (const auto& f : flags) {
    auto s = dns::ParseUpstreamServer(f);
    if (s.ok()) {
      out.push_back(*s);
    } else {
      bad.push_back(absl::StrCat("--upstream-dns ", s.status().message()));
    }
  }
  if (!bad.empty()) return absl::InvalidArgumentError(absl::StrJoin(bad, "\n"));
  if (!out.empty()) return out;
  if (!config.empty()) return config;
  out = ResolvConfNameservers(resolv_conf);
  if (out.empty() && (!policy.names.empty() || !policy.wildcard_suffixes.empty())) {
    return absl::InvalidArgumentError(
        "the policy names hosts but no DNS upstream is known: give --upstream-dns IP[:PORT] "
        "or dns.upstreams in --config (/etc/resolv.conf names no nameserver)");
  }
  return out;
}

absl::StatusOr<std::unique_ptr<RunDns>> RunDns::Start(const Paths& paths, const control::SandboxRecord& record,
                                                      const std::vector<dns::UpstreamServer>& upstreams,
                                                      const dns::Lifetime& lifetime, dns::Bounds bounds) {
  auto ep = DnsEndpointOf(record);
  if (!ep) return absl::InternalError(absl::StrCat("sandbox ", record.cgroup_id, " has no DNS endpoint in its record"));
  std::unique_ptr<RunDns> d(new RunDns());
  auto maps = maps::PinnedMaps::Open(paths.pin_root);
  if (!maps.ok()) return maps.status();
  d->maps_.emplace(std::move(*maps));
  daemon::DnsHostOptions ho;
  ho.upstream.servers = upstreams;
  ho.lifetime = lifetime;
  ho.bounds = bounds;
  ho.audit_source = "dns-proxy";
  ho.seed_books = false;  // a new cgroup: nothing learned yet
  auto host = daemon::DnsHost::Create(d->io_, paths, *d->maps_, std::move(ho));
  if (!host.ok()) return host.status();
  d->host_ = std::move(*host);
  // Bound here, before the command starts: its first query finds the endpoint.
  if (absl::Status s = d->host_->proxy().Serve(DnsScopeOf(record), *ep); !s.ok()) return s;
  d->endpoint_ = ep->ToString();
  d->loop_ = std::thread([io = &d->io_] {
    auto guard = boost::asio::make_work_guard(*io);
    io->run();
  });
  std::vector<std::string> names;
  for (const auto& u : upstreams) names.push_back(u.ToString());
  spdlog::info("dns: serving sandbox {} at {}, upstream {}", record.cgroup_id, d->endpoint_, absl::StrJoin(names, ", "));
  return d;
}

RunDns::~RunDns() {
  io_.stop();
  if (loop_.joinable()) loop_.join();
  if (host_) {
    const dns::Counters& c = host_->proxy().counters();
    spdlog::info("dns: {} queries, {} denied, {} forwarded, {} answered, {} servfail, {} learned", c.queries.load(),
                 c.denied.load(), c.forwarded.load(), c.answered.load(), c.servfail.load(), c.learned.load());
  }
  // The collector, proxy and upstream go before the loop they ran on.
  host_.reset();
}

}  // namespace egressd::cli
