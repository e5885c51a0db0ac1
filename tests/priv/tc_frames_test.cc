// Issue 17: the frames a pod's own network stack can write that no socket of
// the node's kernel would build (gVisor's netstack, a guest kernel), sent
// for real on the node-routed lab from a pod registered by interface only,
// by a sandbox with only CAP_NET_RAW: IPv4 and IPv6 fragments aimed at a
// denied host, IPv4 source routes and other options, IPv6 routing headers of
// types 0, 2 and 4 naming a denied hop.  Each attack is first watched
// succeeding with no program on the veth (the receiving lab host counts what
// arrived: a reassembled datagram at its socket, a source-routed one at the
// hop it named, with the node and the world accepting source routes and
// segment routing for that control), then failing with it, beside an allowed
// frame of the same shape that arrives, and the tc counters and audit
// records show the hook judged it.  tc_veth_test's CraftedFramesThroughTheTcProgram
// runs the same shapes through BPF_PROG_TEST_RUN.
#include <string>
#include <vector>

#include "tc_frames_fixture.h"

namespace egressd::test {
namespace {

using namespace egressd::lab;
using namespace egressd::test::frames;

constexpr uint16_t kSport = 40123;

class TcFrames : public TcFramesBase {
 protected:
  // The pod's frames go to its router (the node end of its veth).
  Bytes V4Frame(const Pod& pod, const Bytes& ip) { return Frame(RouterMac(pod), PodMac(pod), 0x0800, ip); }
  Bytes V6Frame(const Pod& pod, const Bytes& ip) { return Frame(RouterMac(pod), PodMac(pod), 0x86DD, ip); }

  // One UDP datagram of 32 bytes to DST:PORT in two fragments: the UDP header
  // and 8 bytes, then the other 16 at offset 16.
  std::vector<Bytes> Fragments4(const Pod& pod, const std::string& dst, uint16_t port, uint16_t id) {
    const Bytes udp = Udp(kSport, port, "fragmented-datagram-24by");
    const Bytes head(udp.begin(), udp.begin() + 16), tail(udp.begin() + 16, udp.end());
    return {V4Frame(pod, Ipv4(pod.v4, dst, 17, id, 0x2000, {}, head)),
            V4Frame(pod, Ipv4(pod.v4, dst, 17, id, 16 / 8, {}, tail))};
  }
  std::vector<Bytes> Fragments6(const Pod& pod, const std::string& dst, uint16_t port, uint32_t id) {
    const Bytes udp = Udp(kSport, port, "fragmented-datagram-24by", pod.v6, dst);
    Bytes head = Frag6(17, 0, true, id), tail = Frag6(17, 16, false, id);
    head.insert(head.end(), udp.begin(), udp.begin() + 16);
    tail.insert(tail.end(), udp.begin() + 16, udp.end());
    return {V6Frame(pod, Ipv6(pod.v6, dst, 44, head)), V6Frame(pod, Ipv6(pod.v6, dst, 44, tail))};
  }
  // What each test sends twice (unregistered, then registered): the datagram
  // wholly to B, and a split one whose first fragment goes to A and whose
  // later fragment (same id) goes to B.
  std::vector<Bytes> FragmentAttacks(const Pod& pod, uint16_t id) {
    std::vector<Bytes> out;
    for (auto v : {Fragments4(pod, kPublicB4, 7000, id), Fragments6(pod, kPublicB6, 7000, id)}) {
      out.insert(out.end(), v.begin(), v.end());
    }
    auto a4 = Fragments4(pod, kPublicA4, 7001, id + 1), b4 = Fragments4(pod, kPublicB4, 7001, id + 1);
    auto a6 = Fragments6(pod, kPublicA6, 7001, id + 1), b6 = Fragments6(pod, kPublicB6, 7001, id + 1);
    out.insert(out.end(), {a4[0], b4[1], a6[0], b6[1]});
    return out;
  }
};

TEST_F(TcFrames, FragmentsNeverReachADeniedHost) {
  const Pod& pod = NewPod();
  // Positive control: no program on the veth, the fragmented datagram to B
  // is reassembled there and the split's later fragment arrives at B too.
  Send(pod, FragmentAttacks(pod, 100));
  EXPECT_TRUE(Eventually([&] {
    return lab().UdpDatagrams(kPublicB4, 7000) == 1 && lab().UdpDatagrams(kPublicB6, 7000) == 1;
  })) << "unregistered, the fragmented datagrams arrive: " << lab().CountersSummary();
  if (absl::Status d = lab().Drain(pod.netns); !d.ok()) FAIL() << d;
  // (B's echoes draw the pod's port unreachables to B: counted apart.)
  EXPECT_EQ(lab().PacketsTo(kPublicB4, kProtoUdp), 3u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kPublicB6, kProtoUdp), 3u) << lab().CountersSummary();
  lab().ResetCounters();

  Register(pod, {"--egress", kPublicA4, "--egress", kPublicA6});
  if (HasFatalFailure()) return;
  const auto before = Stats();
  std::vector<Bytes> frames = Fragments4(pod, kPublicA4, 7000, 200);
  for (auto& f : Fragments6(pod, kPublicA6, 7000, 200)) frames.push_back(f);
  for (auto& f : FragmentAttacks(pod, 300)) frames.push_back(f);
  Send(pod, frames);
  EXPECT_TRUE(Eventually([&] {
    return lab().UdpDatagrams(kPublicA4, 7000) == 1 && lab().UdpDatagrams(kPublicA6, 7000) == 1;
  })) << "fragments to the allowed host pass and are reassembled: " << lab().CountersSummary();
  if (absl::Status d = lab().Drain(pod.netns); !d.ok()) FAIL() << d;
  for (const char* denied : {kPublicB4, kPublicB6}) {
    EXPECT_EQ(lab().PacketsTo(denied), 0u) << "no fragment reached " << denied << ": " << lab().CountersSummary();
    EXPECT_EQ(lab().UdpDatagrams(denied, 7000), 0u) << lab().CountersSummary();
  }
  const auto after = Stats();
  // Six frames to B (two whole datagrams' fragments, two split later ones).
  EXPECT_GE(after[EGR_TC_STAT_DROP] - before[EGR_TC_STAT_DROP], 6u);
  EXPECT_TRUE(HasRecord(pod.node_ifname, "default-deny", kPublicB4));
  EXPECT_TRUE(HasRecord(pod.node_ifname, "default-deny", kPublicB6));
}

// IPv4 options: a loose source route names a hop the header does not show
// (the node, or the lab host, rewrites the destination to it); a strict one
// likewise.  Both are refused whatever they name; other options (no-ops,
// record route) pass to an allowed host and never reach a denied one.
TEST_F(TcFrames, SourceRoutesAndOptionsNeverReachADeniedHost) {
  const Pod& pod = NewPod();
  // For the positive control the node and the world accept source routes
  // (Linux's default refuses them, which would hide the program's work).
  for (const std::string& dev : {std::string("all"), pod.node_ifname}) {
    Sysctl(lab().node_netns(), "net.ipv4.conf." + dev + ".accept_source_route", "1");
  }
  for (const std::string& dev : {std::string("all"), lab().world_ifname()}) {
    Sysctl(lab().world_netns(), "net.ipv4.conf." + dev + ".accept_source_route", "1");
  }
  if (HasFatalFailure()) return;
  const Bytes b4 = Addr(kPublicB4);
  Bytes lsrr = {131, 7, 4}, ssrr = {137, 7, 4};
  Append(lsrr, b4);
  Append(ssrr, b4);
  // Via A (allowed): the lab host rewrites it to B.  Via the gateway: the
  // node does, and forwards it to B.
  const Bytes via_a = V4Frame(pod, Ipv4(pod.v4, kPublicA4, 17, 1, 0, lsrr, Udp(kSport, 7000, "lsrr-via-a")));
  const Bytes via_gw = V4Frame(pod, Ipv4(pod.v4, kPodGatewayV4, 17, 2, 0, lsrr, Udp(kSport, 7001, "lsrr-via-gw")));
  Send(pod, {via_a, via_gw});
  EXPECT_TRUE(Eventually([&] {
    return lab().UdpDatagrams(kPublicB4, 7000) == 1 && lab().UdpDatagrams(kPublicB4, 7001) == 1;
  })) << "unregistered, both source routes deliver to B: " << lab().CountersSummary();
  lab().ResetCounters();

  Register(pod, {"--egress", kPublicA4});
  if (HasFatalFailure()) return;
  const auto before = Stats();
  const Bytes strict = V4Frame(pod, Ipv4(pod.v4, kPublicA4, 17, 3, 0, ssrr, Udp(kSport, 7000, "ssrr")));
  const Bytes nops = {1, 1, 1, 0}, record_route = {7, 7, 4, 0, 0, 0, 0};
  Send(pod, {via_a, via_gw, strict,
             V4Frame(pod, Ipv4(pod.v4, kPublicA4, 17, 4, 0, nops, Udp(kSport, 7001, "nops"))),
             V4Frame(pod, Ipv4(pod.v4, kPublicA4, 17, 5, 0, record_route, Udp(kSport, 7001, "rr"))),
             V4Frame(pod, Ipv4(pod.v4, kPublicB4, 17, 6, 0, nops, Udp(kSport, 7000, "nops"))),
             V4Frame(pod, Ipv4(pod.v4, kPublicB4, 17, 7, 0, record_route, Udp(kSport, 7000, "rr")))});
  EXPECT_TRUE(Eventually([&] { return lab().UdpDatagrams(kPublicA4, 7001) == 2; }))
      << "options that route nowhere pass to the allowed host: " << lab().CountersSummary();
  if (absl::Status d = lab().Drain(pod.netns); !d.ok()) FAIL() << d;
  EXPECT_EQ(lab().UdpDatagrams(kPublicB4, 7000), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().UdpDatagrams(kPublicB4, 7001), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kPublicB4), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsToWithIpOptions(kPublicA4), 2u) << "only the two harmless ones: " << lab().CountersSummary();
  const auto after = Stats();
  EXPECT_GE(after[EGR_TC_STAT_DROP] - before[EGR_TC_STAT_DROP], 5u);
  EXPECT_TRUE(HasRecord(pod.node_ifname, "malformed", kPublicA4)) << "the source routes, refused";
  EXPECT_TRUE(HasRecord(pod.node_ifname, "malformed", kPodGatewayV4));
  EXPECT_TRUE(HasRecord(pod.node_ifname, "default-deny", kPublicB4));
}

// IPv6 routing headers whose other hop is denied: segment routing (the lab
// host, with seg6 enabled for the control, forwards to its next segment:
// the datagram lands at B's socket), type 0 (RFC 5095) and type 2 (Mobile
// IPv6), which Linux hosts do not follow but another stack might: none
// reaches even the allowed first hop.  A segment list naming only the
// allowed host passes and arrives.
TEST_F(TcFrames, RoutingHeadersNeverReachADeniedHop) {
  const Pod& pod = NewPod();
  for (const std::string& dev : {std::string("all"), lab().world_ifname()}) {
    Sysctl(lab().world_netns(), "net.ipv6.conf." + dev + ".seg6_enabled", "1");
  }
  if (HasFatalFailure()) return;
  auto routed = [&](uint8_t type, const std::vector<std::string>& hops, const std::string& final_dst, uint16_t port) {
    Bytes rest = Routing6(17, type, hops);
    Append(rest, Udp(kSport, port, "routing-header", pod.v6, final_dst));
    return V6Frame(pod, Ipv6(pod.v6, kPublicA6, 43, rest));
  };
  const std::vector<Bytes> attacks = {routed(4, {kPublicB6, kPublicA6}, kPublicB6, 7000),
                                      routed(0, {kPublicB6}, kPublicB6, 7000), routed(2, {kPublicB6}, kPublicB6, 7000)};
  Send(pod, attacks);
  EXPECT_TRUE(Eventually([&] { return lab().UdpDatagrams(kPublicB6, 7000) == 1; }))
      << "unregistered, the segment list delivers to B: " << lab().CountersSummary();
  if (absl::Status d = lab().Drain(pod.netns); !d.ok()) FAIL() << d;
  EXPECT_EQ(lab().PacketsFirstHeader(kPublicA6, kProtoRouting6), 3u)
      << "unregistered, all three reach the first hop: " << lab().CountersSummary();
  lab().ResetCounters();

  Register(pod, {"--egress", kPublicA6});
  if (HasFatalFailure()) return;
  const auto before = Stats();
  std::vector<Bytes> frames = attacks;
  // The segment list behind a fragment header and a destination options
  // header, its segments in the second fragment: the first fragment shows
  // only the routing header's first 8 bytes.  The lab host's Linux discards
  // such a first fragment itself (RFC 8200 4.5: the whole chain in the
  // first fragment; ICMP parameter problem, code 3), so there is no control
  // for it here; another stack might reassemble it and follow the segments.
  {
    Bytes chain = {43, 0, 1, 4, 0, 0, 0, 0};  // destination options: PadN
    Append(chain, Routing6(17, 4, {kPublicB6, kPublicA6}));
    Append(chain, Udp(kSport, 7001, "hidden-segments", pod.v6, kPublicB6));
    Bytes head = Frag6(60, 0, true, 77), tail = Frag6(60, 16, false, 77);
    head.insert(head.end(), chain.begin(), chain.begin() + 16);
    tail.insert(tail.end(), chain.begin() + 16, chain.end());
    frames.push_back(V6Frame(pod, Ipv6(pod.v6, kPublicA6, 44, head)));
    frames.push_back(V6Frame(pod, Ipv6(pod.v6, kPublicA6, 44, tail)));
  }
  frames.push_back(routed(4, {kPublicA6, kPublicA6}, kPublicA6, 7001));
  Send(pod, frames);
  EXPECT_TRUE(Eventually([&] { return lab().UdpDatagrams(kPublicA6, 7001) == 1; }))
      << "a segment list of allowed hops passes: " << lab().CountersSummary();
  if (absl::Status d = lab().Drain(pod.netns); !d.ok()) FAIL() << d;
  EXPECT_EQ(lab().UdpDatagrams(kPublicB6, 7000), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().UdpDatagrams(kPublicB6, 7001), 0u) << "the hidden segments: " << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsTo(kPublicB6), 0u) << lab().CountersSummary();
  EXPECT_EQ(lab().PacketsFirstHeader(kPublicA6, kProtoRouting6), 1u)
      << "only the allowed segment list: " << lab().CountersSummary();
  const auto after = Stats();
  EXPECT_GE(after[EGR_TC_STAT_DROP] - before[EGR_TC_STAT_DROP], 4u);
  EXPECT_TRUE(HasRecord(pod.node_ifname, "routing-hop", kPublicA6));
  EXPECT_TRUE(HasRecord(pod.node_ifname, "malformed", kPublicA6)) << "the first fragment's chain is cut short";
}

}  // namespace
}  // namespace egressd::test
