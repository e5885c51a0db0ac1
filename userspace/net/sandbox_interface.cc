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
template <typename Body, typename OnMessage>
absl::Status NetlinkDump(uint16_t type, const Body& body, uint16_t want, const char* what, OnMessage on) {
  UniqueFd s(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!s.valid()) return ErrnoStatus(errno, "netlink socket");
  struct {
    nlmsghdr h;
    Body b;
  } req{};
  req.h.nlmsg_len = sizeof(req);
  req.h.nlmsg_type = type;
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.h.nlmsg_seq = 1;
  req.b = body;
  if (send(s.get(), &req, sizeof(req), 0) < 0) return ErrnoStatus(errno, absl::StrCat("netlink ", what));
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
};

// Every link of the calling thread's netns (an RTM_GETLINK dump).
absl::StatusOr<std::vector<LinkInfo>> DumpLinks() {
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
  });
  if (!s.ok()) return s;
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
  std::string kind;
  for (const auto& l : *links) {
    if (l.ifindex == idx) kind = l.kind;
  }
  // Only a sandbox's own link: judging the node's uplink (or a bridge) as one
  // sandbox would apply its policy to everything the node forwards.
  if (kind != "veth" && kind != "tun") {
    return bad(absl::StrCat("is ", kind.empty() ? "no veth" : absl::StrCat("a ", kind, " interface"),
                            "; a sandbox is registered by the node end of its veth (or its VM's tap)"));
  }
  HostInterface hi{.name = ifname, .ifindex = idx};
  auto addrs = HostRoutesVia(idx);
  if (!addrs.ok()) return addrs.status();
  hi.pod_addrs = std::move(*addrs);
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
      HostInterface hi{.name = l.name, .ifindex = l.ifindex, .pod_mac = veths[0].mac};
      auto addrs = HostRoutesVia(l.ifindex);
      if (!addrs.ok()) return addrs.status();
      hi.pod_addrs = std::move(*addrs);
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
