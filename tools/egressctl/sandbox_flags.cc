#include "tools/egressctl/sandbox_flags.h"

#include <sys/stat.h>
#include <sys/vfs.h>

#include "absl/strings/str_cat.h"
#include "maps/if_sandbox_table.h"
#include "userspace/common/errors.h"
#include "userspace/common/node.h"
#include "userspace/net/ip.h"
#include "userspace/net/sandbox_interface.h"

namespace egressd::cli {

absl::StatusOr<control::Labels> ParseLabels(const SandboxFlags& flags) {
  control::Labels labels;
  for (const auto& l : flags.labels) EGR_RETURN_IF_ERROR(control::ParseLabel(l, labels));
  return labels;
}

absl::Status ParseDnsEndpoints(const SandboxFlags& flags, control::SandboxSpec& spec) {
  auto one = [](const std::string& flag, const std::string& text, bool v4,
                std::optional<net::IpAddr>& into) -> absl::Status {
    if (text.empty()) return absl::OkStatus();
    auto a = net::IpAddr::Parse(text);
    if (!a.ok() || a->is_v4() != v4 || a->bytes() == std::array<uint8_t, 16>{}) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " ", net::Quote(text), " is not ",
                                                     v4 ? "an IPv4" : "an IPv6", " unicast address"));
    }
    into = *a;
    return absl::OkStatus();
  };
  EGR_RETURN_IF_ERROR(one("--dns-endpoint4", flags.dns_endpoint4, true, spec.dns_addr4));
  return one("--dns-endpoint6", flags.dns_endpoint6, false, spec.dns_addr6);
}

absl::StatusOr<control::SandboxSpec> MakeSandboxSpec(const SandboxFlags& flags, const std::string& path,
                                                     uint64_t cgroup_id, const std::string& default_netns) {
  control::SandboxSpec spec{.cgroup_id = cgroup_id, .cgroup_path = path};
  EGR_ASSIGN_OR_RETURN(spec.labels, ParseLabels(flags));
  EGR_RETURN_IF_ERROR(ParseDnsEndpoints(flags, spec));
  if (!flags.interface.empty() || !flags.interface_netns.empty()) {
    EGR_ASSIGN_OR_RETURN(net::HostInterface hi, flags.interface.empty()
                                                    ? net::HostInterfaceOfNetns(flags.interface_netns,
                                                                                "--interface-netns")
                                                    : net::ResolveHostInterface(flags.interface, "--interface"));
    spec.interface = hi.name;
    spec.ifindex = hi.ifindex;
    spec.pod_addrs = hi.pod_addrs;
    spec.pod_mac = hi.pod_mac;
    // No cgroup: the sandbox is its interface's (maps/if_sandbox_table.h).
    if (cgroup_id == 0) spec.cgroup_id = maps::InterfaceSandboxId(hi.ifindex);
  }
  const std::string netns = flags.netns.empty() ? default_netns : flags.netns;
  if (netns.empty()) return spec;
  struct stat st {};
  struct statfs fs {};
  if (stat(netns.c_str(), &st) != 0 || statfs(netns.c_str(), &fs) != 0 || fs.f_type != 0x6e736673 /* NSFS_MAGIC */) {
    return absl::InvalidArgumentError(absl::StrCat("--netns \"", netns, "\" is not a network namespace"));
  }
  spec.netns_inode = st.st_ino;
  EGR_ASSIGN_OR_RETURN(spec.netns_cookie, NetnsCookieOf(netns));
  return spec;
}

}  // namespace egressd::cli
