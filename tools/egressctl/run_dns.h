// egressctl run's own DNS: the proxy for its one sandbox, served in the
// egressctl parent (which stays outside the sandbox's cgroup, so its upstream
// queries are no sandbox's) on an endpoint in the netns egressctl was started
// in, for as long as the command runs.  When egressctl is gone the endpoint
// is gone: the sandbox's queries are refused (DNS fails closed) while the
// kernel keeps enforcing.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "absl/status/statusor.h"
#include "maps/pinned_maps.h"
#include "userspace/common/node.h"
#include "userspace/control/sandbox_record.h"
#include "userspace/daemon/dns_host.h"
#include "userspace/daemon/record_watcher.h"
#include "userspace/dns/proxy.h"
#include "userspace/dns/upstream.h"
#include "tools/egressctl/commands.h"
#include "userspace/policy/compiled_policy.h"
#include "userspace/policy/deployment_config.h"

namespace egressd::cli {

// The endpoint and scope a record gives the proxy (userspace/daemon).
using daemon::DnsEndpointOf;
using daemon::DnsScopeOf;

// Up to three `nameserver` addresses of a resolv.conf text, in order (glibc
// reads no more); lines that do not parse (a scope id, a comment) are skipped.
std::vector<dns::UpstreamServer> ResolvConfNameservers(const std::string& text);

// The dns: settings of the deployment config at `path` (--config); none
// when `path` is empty.  A file that cannot be read or does not parse is
// InvalidArgument with the lines the compiler would print for it.
absl::StatusOr<policy::DnsSettings> ConfigDns(const std::string& path);
std::vector<dns::UpstreamServer> ToUpstreams(const std::vector<policy::DnsUpstreamSetting>& settings);
// dns.maxAddressesPerSandbox / maxAddressesPerName as the proxy's bounds.
dns::Bounds BoundsOf(const policy::DnsSettings& settings);

// Whom egressctl run's proxy asks: --upstream-dns (bad values: InvalidArgument
// naming them), else the config's dns.upstreams, else the nameservers of
// `resolv_conf` (the node's /etc/resolv.conf; only run falls back to it).
// Empty when none names one; then a policy with names is InvalidArgument
// (nothing could resolve them).
absl::StatusOr<std::vector<dns::UpstreamServer>> RunUpstreams(const std::vector<std::string>& flags,
                                                              const std::vector<dns::UpstreamServer>& config,
                                                              const std::string& resolv_conf,
                                                              const policy::CompiledPolicy& policy);

// sandbox add: the config's dns.endpoint4/6 into `sandbox` when neither
// --dns-endpoint4 nor --dns-endpoint6 is given (either flag replaces both
// keys: a pod's endpoints are a pair, never half the config's).
absl::Status EndpointsFromConfig(const std::string& config_path, SandboxFlags& sandbox);

class RunDns {
 public:
  // Binds the record's endpoint and serves it on a thread of its own until
  // destroyed.  Fails (nothing left running) when the endpoint cannot be bound.
  static absl::StatusOr<std::unique_ptr<RunDns>> Start(const Paths& paths, const control::SandboxRecord& record,
                                                       const std::vector<dns::UpstreamServer>& upstreams,
                                                       const dns::Lifetime& lifetime = {},
                                                       dns::Bounds bounds = {});
  ~RunDns();
  std::string endpoint() const { return endpoint_; }
  // Returns once every query answered so far is in the audit channel
  // (before the run's audit reader closes its last window).
  void FlushAudit() { host_->audit().Flush(); }

 private:
  RunDns() = default;
  boost::asio::io_context io_;
  std::optional<maps::PinnedMaps> maps_;
  std::unique_ptr<daemon::DnsHost> host_;
  std::thread loop_;
  std::string endpoint_;
};

}  // namespace egressd::cli
