// packet-frame: one Ethernet frame, every byte of it the caller's, written on
// a packet socket.  What a gVisor netstack or a guest kernel can put on its
// pod's veth that no socket of the pod's kernel would build: fragments aimed
// at different destinations, IPv4 source routes, IPv6 routing headers, ARP
// and neighbour discovery naming another's address, router advertisements.
// The test builds the frame (tests/priv/tc_frames_test.cc); this only sends
// it, so the attacker needs nothing but CAP_NET_RAW.
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "probe_common.h"

namespace egressd::probe {
namespace {

// "0a1B..." -> bytes; false on an odd length or a non-hex digit.
bool FromHex(const std::string& hex, std::vector<uint8_t>* out) {
  if (hex.size() % 2) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<uint8_t>(hi << 4 | lo));
  }
  return true;
}

}  // namespace

// packet-frame HEX [--ifname IF]: the frame HEX (Ethernet header first) on IF
// (default eth0), as it is.
void OpPacketFrame(const Op& op) {
  const std::string ifname = op.Str("ifname", "eth0");
  Json j(op.name);
  std::vector<uint8_t> f;
  if (!FromHex(op.pos[0], &f) || f.size() < 14) return j.Err(EINVAL, "args").Emit();
  j.Int("bytes", static_cast<long long>(f.size()));
  // Protocol 0: the socket receives nothing; it only sends.
  Fd fd(socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  j.Str("socket", "created");
  const unsigned index = if_nametoindex(ifname.c_str());
  if (index == 0) return j.Err(errno, "ifname").Emit();
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_ifindex = static_cast<int>(index);
  ll.sll_halen = 6;
  std::memcpy(ll.sll_addr, f.data(), 6);
  std::memcpy(&ll.sll_protocol, &f[12], 2);
  const ssize_t sent = sendto(fd.get(), f.data(), f.size(), 0, reinterpret_cast<sockaddr*>(&ll), sizeof(ll));
  const int send_errno = errno;
  j.Int("send_ret", sent);
  if (sent < 0) return j.Err(send_errno, "sendto").Emit();
  j.Ok().Emit();
}

}  // namespace egressd::probe
