#include "userspace/net/sandbox_interface.h"

#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"
#include "userspace/common/unique_fd.h"

namespace egressd::net {
namespace {

// One RTM_GET* dump of the calling thread's netns: `on` sees each message of
// type `want`; the dump's end, its error and the socket's are the caller's.
// A `target_netnsid` >= 0 asks about the namespace of that id as the calling
// thread's sees it, in the request's attribute `target_attr`
// (IFLA_TARGET_NETNSID, IFA_TARGET_NETNSID), which the kernel honours for
// address dumps only under strict checking (NETLINK_GET_STRICT_CHK).
template <typename Body, typename OnMessage>
absl::Status NetlinkDump(uint16_t type, const Body& body, uint16_t want, const char* what, OnMessage on,
                         int32_t target_netnsid = -1, uint16_t target_attr = 0) {
  UniqueFd s(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!s.valid()) return ErrnoStatus(errno, "netlink socket");
  struct {
    nlmsghdr h;
    Body b;
    alignas(NLMSG_ALIGNTO) rtattr target;
    int32_t nsid;
  } req{};
  static_assert(offsetof(decltype(req), target) == NLMSG_ALIGN(sizeof(nlmsghdr) + sizeof(Body)));
  req.h.nlmsg_len = target_netnsid >= 0 ? sizeof(req) : offsetof(decltype(req), target);
  req.h.nlmsg_type = type;
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.h.nlmsg_seq = 1;
  req.b = body;
  if (target_netnsid >= 0) {
    req.target.rta_type = target_attr;
    req.target.rta_len = RTA_LENGTH(sizeof(int32_t));
    req.nsid = target_netnsid;
    const int one = 1;
    if (setsockopt(s.get(), SOL_NETLINK, NETLINK_GET_STRICT_CHK, &one, sizeof(one)) != 0) {
      return ErrnoStatus(errno, "netlink strict checking");
    }
  }
  if (send(s.get(), &req, req.h.nlmsg_len, 0) < 0) return ErrnoStatus(errno, absl::StrCat("netlink ", what));
  std::vector<char> buf(64 * 1024);
  for (;;) {
    ssize_t n = recv(s.get(), buf.data(), buf.size(), 0);
    if (n < 0) return ErrnoStatus(errno, "netlink receive");
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, static_cast<uint32_t>(n));
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_DONE) return absl::OkStatus();
      if (h->nlmsg_type == NLMSG_ERROR) {
        return ErrnoStatus(-static_cast<nlmsgerr*>(NLMSG_DATA(h))->error, absl::StrCat("netlink ", what));
      }
      if (h->nlmsg_type == want) on(h);
    }
  }
}

struct LinkInfo {
  uint32_t ifindex = 0;
  std::string name, kind;
  std::optional<std::array<uint8_t, 6>> mac;
  uint32_t link = 0;  // IFLA_LINK: a veth's peer's ifindex (in the peer's netns)
  int32_t link_netnsid = -1;  // IFLA_LINK_NETNSID: the peer's netns; -1: the same one
};

// Every link of the calling thread's netns (an RTM_GETLINK dump), or of the
// netns of id `netnsid` as the calling thread's sees it.
absl::StatusOr<std::vector<LinkInfo>> DumpLinks(int32_t netnsid = -1) {
  std::vector<LinkInfo> out;
  ifinfomsg body{};
  body.ifi_family = AF_UNSPEC;
  absl::Status s = NetlinkDump(RTM_GETLINK, body, RTM_NEWLINK, "RTM_GETLINK", [&](nlmsghdr* h) {
    auto* ifi = static_cast<ifinfomsg*>(NLMSG_DATA(h));
    LinkInfo li{.ifindex = static_cast<uint32_t>(ifi->ifi_index)};
    int len = static_cast<int>(IFLA_PAYLOAD(h));
    for (auto* a = IFLA_RTA(ifi); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
      if (a->rta_type == IFLA_IFNAME) li.name = static_cast<const char*>(RTA_DATA(a));
      if (a->rta_type == IFLA_LINK) std::memcpy(&li.link, RTA_DATA(a), 4);
      if (a->rta_type == IFLA_LINK_NETNSID) std::memcpy(&li.link_netnsid, RTA_DATA(a), 4);
      if (a->rta_type == IFLA_ADDRESS && RTA_PAYLOAD(a) == 6) {
        std::array<uint8_t, 6> m;
        std::memcpy(m.data(), RTA_DATA(a), 6);
        li.mac = m;
      }
      if (a->rta_type == IFLA_LINKINFO) {
        int l2 = static_cast<int>(RTA_PAYLOAD(a));
        for (auto* b = static_cast<rtattr*>(RTA_DATA(a)); RTA_OK(b, l2); b = RTA_NEXT(b, l2)) {
          if (b->rta_type == IFLA_INFO_KIND) li.kind = static_cast<const char*>(RTA_DATA(b));
        }
      }
    }
    out.push_back(li);
  }, netnsid, IFLA_TARGET_NETNSID);
  if (!s.ok()) return s;
  return out;
}

// The global addresses (scope universe: no link-local, no loopback) on
// interface `ifindex` of the netns of id `netnsid` (-1: the calling
// thread's), an RTM_GETADDR dump per family.
absl::StatusOr<std::vector<IpAddr>> GlobalAddressesOf(uint32_t ifindex, int32_t netnsid) {
  std::vector<IpAddr> out;
  for (uint8_t family : {uint8_t{AF_INET}, uint8_t{AF_INET6}}) {
    ifaddrmsg body{};
    body.ifa_family = family;
    absl::Status s = NetlinkDump(RTM_GETADDR, body, RTM_NEWADDR, "RTM_GETADDR", [&](nlmsghdr* h) {
      auto* ifa = static_cast<ifaddrmsg*>(NLMSG_DATA(h));
      if (ifa->ifa_index != ifindex || ifa->ifa_family != family || ifa->ifa_scope != RT_SCOPE_UNIVERSE) return;
      const unsigned size = family == AF_INET ? 4 : 16;
      std::optional<std::array<uint8_t, 16>> local, address;
      int len = static_cast<int>(IFA_PAYLOAD(h));
      for (auto* a = IFA_RTA(ifa); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        if ((a->rta_type != IFA_LOCAL && a->rta_type != IFA_ADDRESS) || RTA_PAYLOAD(a) != size) continue;
        std::array<uint8_t, 16> b{};
        std::memcpy(b.data(), RTA_DATA(a), size);
        (a->rta_type == IFA_LOCAL ? local : address) = b;
      }
      // IFA_LOCAL is the interface's own (IFA_ADDRESS is the far end on a
      // point-to-point link); IPv6 sends IFA_ADDRESS alone.
      const auto& own = local ? local : address;
      if (!own) return;
      const auto& b = *own;
      out.push_back(family == AF_INET ? IpAddr::V4({b[0], b[1], b[2], b[3]}) : IpAddr::V6(b));
    }, netnsid, IFA_TARGET_NETNSID);
    if (!s.ok()) return s;
  }
  return out;
}

// Host routes (/32, /128) of the main table through `ifindex`: the pod's
// addresses as the node routes them.  Never one of the node's own addresses
// (a local route of the local table): an IPv6 gateway address configured as
// /128 on the veth (fd00:244::1/128, as a point-to-point CNI does) gets a
// main-table /128 route through it, which would let the pod send as its
// gateway and advertise the gateway's address in neighbour discovery.
absl::StatusOr<std::vector<IpAddr>> HostRoutesVia(uint32_t ifindex) {
  std::vector<IpAddr> out;
  for (uint8_t family : {uint8_t{AF_INET}, uint8_t{AF_INET6}}) {
    rtmsg body{};
    body.rtm_family = family;
    std::vector<std::array<uint8_t, 16>> routed, node_own;
    absl::Status s = NetlinkDump(RTM_GETROUTE, body, RTM_NEWROUTE, "RTM_GETROUTE", [&](nlmsghdr* h) {
      auto* rt = static_cast<rtmsg*>(NLMSG_DATA(h));
      const unsigned full = family == AF_INET ? 32 : 128;
      if (rt->rtm_dst_len != full) return;
      const bool local = rt->rtm_type == RTN_LOCAL;
      if (!local && (rt->rtm_table != RT_TABLE_MAIN || rt->rtm_type != RTN_UNICAST)) return;
      uint32_t oif = 0;
      std::array<uint8_t, 16> dst{};
      bool has_dst = false;
      int len = static_cast<int>(RTM_PAYLOAD(h));
      for (auto* a = RTM_RTA(rt); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        if (a->rta_type == RTA_OIF) std::memcpy(&oif, RTA_DATA(a), 4);
        if (a->rta_type == RTA_DST && RTA_PAYLOAD(a) == full / 8) {
          std::memcpy(dst.data(), RTA_DATA(a), full / 8);
          has_dst = true;
        }
      }
      if (!has_dst) return;
      if (local) node_own.push_back(dst);
      else if (oif == ifindex) routed.push_back(dst);
    });
    if (!s.ok()) return s;
    for (const auto& dst : routed) {
      if (std::find(node_own.begin(), node_own.end(), dst) != node_own.end()) continue;
      out.push_back(family == AF_INET ? IpAddr::V4({dst[0], dst[1], dst[2], dst[3]}) : IpAddr::V6(dst));
    }
  }
  return out;
}

// Who the pod behind the node's link `node` is, for anti-spoofing at the
// veth: the MAC of the veth's other end (the pod's; none for a tap: a guest
// picks its own), and its addresses: the node's host routes through the link
// (what the node routes back to the pod, as a point-to-point CNI sets them
// up) or, when the node has none (it reaches the pod by a subnet route), the
// global addresses on the pod's end of the veth, read from the pod's netns
// through its id.  With neither, the pod's sources could not be checked at
// all (egr_ifpod_v1 holds no entry without addresses, and a pod could send
// as any other): that registration is refused, naming what is missing.
absl::Status FillPod(const LinkInfo& node, const std::string& what, const std::string& input, HostInterface& hi) {
  auto routes = HostRoutesVia(node.ifindex);
  if (!routes.ok()) return routes.status();
  hi.pod_addrs = std::move(*routes);
  bool peer_found = false;
  if (node.kind == "veth" && node.link != 0) {
    auto peer_links = DumpLinks(node.link_netnsid);
    if (!peer_links.ok()) return peer_links.status();
    for (const auto& l : *peer_links) {
      if (l.ifindex != node.link) continue;
      peer_found = true;
      hi.pod_mac = l.mac;
      if (hi.pod_addrs.empty()) {
        auto addrs = GlobalAddressesOf(l.ifindex, node.link_netnsid);
        if (!addrs.ok()) return addrs.status();
        hi.pod_addrs = std::move(*addrs);
      }
    }
  }
  if (!hi.pod_addrs.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " \"", input, "\": the pod's addresses behind ", node.name,
      " are unknown: the node has no host route (/32 or /128) through it",
      node.kind != "veth" ? " and a tap has no other end to read them from"
      : peer_found        ? absl::StrCat(" and the pod's end of the veth (ifindex ", node.link, ") has no global address")
                          : " and the pod's end of the veth was not found",
      "; without them its sources could not be checked (a pod could send as another): route the pod's addresses "
      "to it by host routes, as a point-to-point CNI does, or give its end of the veth its addresses first"));
}

}  // namespace

absl::StatusOr<HostInterface> ResolveHostInterface(const std::string& ifname, const std::string& what) {
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(what, " \"", ifname, "\" ", why));
  };
  if (ifname.empty() || ifname.size() >= IFNAMSIZ || ifname.find('/') != std::string::npos) {
    return bad("is not an interface name");
  }
  const unsigned idx = if_nametoindex(ifname.c_str());
  if (idx == 0) return bad("is not an interface of the node's network namespace");
  auto links = DumpLinks();
  if (!links.ok()) return links.status();
  LinkInfo node;
  for (const auto& l : *links) {
    if (l.ifindex == idx) node = l;
  }
  const std::string& kind = node.kind;
  // Only a sandbox's own link: judging the node's uplink (or a bridge) as one
  // sandbox would apply its policy to everything the node forwards.
  if (kind != "veth" && kind != "tun") {
    return bad(absl::StrCat("is ", kind.empty() ? "no veth" : absl::StrCat("a ", kind, " interface"),
                            "; a sandbox is registered by the node end of its veth (or its VM's tap)"));
  }
  HostInterface hi{.name = ifname, .ifindex = idx};
  node.name = ifname;
  EGR_RETURN_IF_ERROR(FillPod(node, what, ifname, hi));
  return hi;
}

absl::StatusOr<HostInterface> HostInterfaceOfNetns(const std::string& netns_path, const std::string& what) {
  struct statfs fs {};
  if (statfs(netns_path.c_str(), &fs) != 0 || fs.f_type != 0x6e736673 /* NSFS_MAGIC */) {
    return absl::InvalidArgumentError(absl::StrCat(what, " \"", netns_path, "\" is not a network namespace"));
  }
  // setns in a thread of its own: the caller's threads stay in the node's netns.
  absl::StatusOr<std::vector<LinkInfo>> pod_links = absl::InternalError("not run");
  std::thread t([&] {
    UniqueFd ns(open(netns_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns.valid() || setns(ns.get(), CLONE_NEWNET) != 0) {
      pod_links = ErrnoStatus(errno, absl::StrCat("enter network namespace ", netns_path));
      return;
    }
    pod_links = DumpLinks();
  });
  t.join();
  if (!pod_links.ok()) return pod_links.status();
  std::vector<LinkInfo> veths;
  for (const auto& l : *pod_links) {
    if (l.kind == "veth" && l.link != 0) veths.push_back(l);
  }
  if (veths.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, " \"", netns_path, "\" has ", veths.size(),
                                                   " veth interfaces; exactly one is needed (or name the node end "
                                                   "with interface)"));
  }
  auto node_links = DumpLinks();
  if (!node_links.ok()) return node_links.status();
  for (const auto& l : *node_links) {
    if (l.ifindex == veths[0].link && l.kind == "veth" && l.link == veths[0].ifindex) {
      HostInterface hi{.name = l.name, .ifindex = l.ifindex};
      EGR_RETURN_IF_ERROR(FillPod(l, what, netns_path, hi));
      return hi;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(what, " \"", netns_path, "\": the peer of its ", veths[0].name,
                                                 " (ifindex ", veths[0].link,
                                                 ") is not a veth of the node's network namespace"));
}

bool InterfaceExists(uint32_t ifindex, const std::string& name) {
  char buf[IF_NAMESIZE] = {};
  if (ifindex == 0 || if_indextoname(ifindex, buf) == nullptr) return false;
  return name.empty() || name == buf;
}

}  // namespace egressd::net
