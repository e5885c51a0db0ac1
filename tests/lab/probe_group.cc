// Socket options that make the kernel send to an address of the caller's
// choosing: multicast group joins (the kernel announces the group with
// IGMP/MLD reports on the link) and SO_BROADCAST.
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <string.h>

#include <cerrno>
#include <thread>

#include "probe_common.h"

namespace egressd::probe {
namespace {

// group_req / group_source_req carry the group (and source) as sockaddrs.
void FillSockaddr(const std::string& addr, sockaddr_storage* ss) {
  memset(ss, 0, sizeof(*ss));
  if (inet_pton(AF_INET, addr.c_str(), &reinterpret_cast<sockaddr_in*>(ss)->sin_addr) == 1) {
    ss->ss_family = AF_INET;
    return;
  }
  ss->ss_family = AF_INET6;
  inet_pton(AF_INET6, addr.c_str(), &reinterpret_cast<sockaddr_in6*>(ss)->sin6_addr);
}

int Join(int fd, bool v6, const std::string& api, const std::string& group,
         const std::string& source, unsigned ifindex) {
  const int level = v6 ? IPPROTO_IPV6 : IPPROTO_IP;
  if (api == "group") {
    group_req r{};
    r.gr_interface = ifindex;
    FillSockaddr(group, &r.gr_group);
    return setsockopt(fd, level, MCAST_JOIN_GROUP, &r, sizeof(r));
  }
  if (api == "source-group") {
    group_source_req r{};
    r.gsr_interface = ifindex;
    FillSockaddr(group, &r.gsr_group);
    FillSockaddr(source, &r.gsr_source);
    return setsockopt(fd, level, MCAST_JOIN_SOURCE_GROUP, &r, sizeof(r));
  }
  if (v6) {  // "membership": IPV6_JOIN_GROUP
    ipv6_mreq m{};
    inet_pton(AF_INET6, group.c_str(), &m.ipv6mr_multiaddr);
    m.ipv6mr_interface = ifindex;
    return setsockopt(fd, IPPROTO_IPV6, IPV6_JOIN_GROUP, &m, sizeof(m));
  }
  if (api == "source") {
    ip_mreq_source m{};
    inet_pton(AF_INET, group.c_str(), &m.imr_multiaddr);
    inet_pton(AF_INET, source.c_str(), &m.imr_sourceaddr);
    // ip_mreq_source names the interface by address: the first one of ifindex.
    m.imr_interface.s_addr = htonl(INADDR_ANY);
    return setsockopt(fd, IPPROTO_IP, IP_ADD_SOURCE_MEMBERSHIP, &m, sizeof(m));
  }
  ip_mreqn m{};
  inet_pton(AF_INET, group.c_str(), &m.imr_multiaddr);
  m.imr_ifindex = static_cast<int>(ifindex);
  return setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof(m));
}

}  // namespace

void OpMcastJoin(const Op& op) {
  const std::string& group = op.pos[0];
  const std::string api = op.Str("api", "membership");
  const std::string source = op.Str("source", "");
  const bool v6 = group.find(':') != std::string::npos;
  Json j("mcast-join");
  j.Str("group", group).Str("api", api);
  if ((api == "source" || api == "source-group") && source.empty()) {
    return j.Err(EINVAL, "usage: --source").Emit();
  }
  if (api != "membership" && api != "source" && api != "group" && api != "source-group") {
    return j.Err(EINVAL, "usage: --api").Emit();
  }
  unsigned ifindex = if_nametoindex(op.pos[1].c_str());
  if (ifindex == 0) return j.Err(errno, "if_nametoindex").Emit();
  Fd fd(socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  if (api == "source" && !v6) {  // the interface by index, for the address form
    ip_mreqn m{};
    m.imr_ifindex = static_cast<int>(ifindex);
    setsockopt(fd.get(), IPPROTO_IP, IP_MULTICAST_IF, &m, sizeof(m));
  }
  const long long t0 = NowMs();
  if (Join(fd.get(), v6, api, group, source, ifindex) != 0) {
    return j.Err(errno, "setsockopt").Int("ms", NowMs() - t0).Emit();
  }
  // Keep the membership while the kernel sends its unsolicited reports.
  std::this_thread::sleep_for(std::chrono::milliseconds(op.Int("hold-ms", 200)));
  j.Ok().Int("ms", NowMs() - t0).Emit();
}

void OpSoBroadcast(const Op& op) {
  Target t;
  if (!MakeTarget(op.pos[0], static_cast<uint16_t>(std::stoi(op.pos[1])), false, &t)) {
    Json j("so-broadcast");
    return j.Err(EINVAL, "address").Emit();
  }
  Json j = TargetLine(op, t);
  Fd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  const int one = 1;
  if (setsockopt(fd.get(), SOL_SOCKET, SO_BROADCAST, &one, sizeof(one)) != 0) {
    return j.Err(errno, "setsockopt").Emit();
  }
  const std::string payload = op.Str("payload", kDefaultPayload);
  if (sendto(fd.get(), payload.data(), payload.size(), 0, reinterpret_cast<const sockaddr*>(&t.sa),
             t.len) < 0) {
    return j.Err(errno, "sendto").Emit();
  }
  j.Ok().Emit();
}

}  // namespace egressd::probe
