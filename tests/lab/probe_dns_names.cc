// dns-names: a flood of unique DNS names for the audit trail's A/B test, as
// fast as one socket takes them without overrunning the server's receive
// buffer: every query has a name of its own, queries go out with sendmmsg in
// batches, at most --window unanswered at a time, answers come back with
// recvmmsg.  Each query either gets its answer or is counted unanswered: a
// test can then hold the server's records to the queries it answered.
#include <errno.h>
#include <poll.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "probe_common.h"

namespace egressd::probe {
namespace {

constexpr size_t kBatch = 64;
constexpr size_t kMaxQuery = 300;

// A query for `name` (type A, class IN, RD): a DNS header and one question.
size_t BuildQuery(uint16_t id, const std::string& name, uint8_t* out) {
  uint8_t* p = out;
  const uint8_t header[12] = {static_cast<uint8_t>(id >> 8), static_cast<uint8_t>(id), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  for (uint8_t b : header) *p++ = b;
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    *p++ = static_cast<uint8_t>(dot - start);
    for (size_t i = start; i < dot; ++i) *p++ = static_cast<uint8_t>(name[i]);
    start = dot + 1;
  }
  *p++ = 0;
  const uint8_t tail[4] = {0, 1, 0, 1};  // A, IN
  for (uint8_t b : tail) *p++ = b;
  return static_cast<size_t>(p - out);
}

}  // namespace

// dns-names RESOLVER PORT SUFFIX N [--window W] [--timeout-ms T]: N queries
// for q<i>.SUFFIX on one unconnected UDP socket; gives up once T ms pass with
// no answer: {"sent","answered","nxdomain","noerror","other_rcode",
// "unanswered","refused","other","ms"}.
void OpDnsNames(const Op& op) {
  Json j(op.name);
  uint16_t port = 0;
  Target t;
  if (!ParsePort(op.pos[1], &port) || !MakeTarget(op.pos[0], port, false, &t)) return j.Err(EINVAL, "args").Emit();
  const std::string suffix = op.pos[2];
  const long long n = std::atoll(op.pos[3].c_str());
  const long long window = op.Int("window", 64);
  const int timeout_ms = op.Int("timeout-ms", kDefaultTimeoutMs);
  // Query ids are the index modulo 2^16: unique among those in flight.
  if (n <= 0 || suffix.empty() || suffix.size() > 200 || window < 1 || window > 4096)
    return j.Err(EINVAL, "args").Emit();
  Fd fd(socket(t.family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.ok()) return j.Err(errno, "socket").Emit();
  // in_flight[id]: 1 + the index of the unanswered query with that id.
  std::vector<long long> in_flight(65536, 0);
  std::vector<std::vector<uint8_t>> out(kBatch, std::vector<uint8_t>(kMaxQuery));
  std::vector<std::vector<uint8_t>> in(kBatch, std::vector<uint8_t>(512));
  std::vector<iovec> out_iov(kBatch), in_iov(kBatch);
  std::vector<mmsghdr> out_msg(kBatch), in_msg(kBatch);
  long long sent = 0, answered = 0, nxdomain = 0, noerror = 0, other_rcode = 0, refused = 0, other = 0;
  const long long t0 = NowMs();
  bool stalled = false;
  auto unanswered = [&] { return sent - answered - refused - other; };
  while (answered + refused + other < n && !stalled) {
    // Send what the window allows.
    while (sent < n && unanswered() < window) {
      const size_t batch = static_cast<size_t>(
          std::min<long long>({static_cast<long long>(kBatch), n - sent, window - unanswered()}));
      for (size_t k = 0; k < batch; ++k) {
        const long long i = sent + static_cast<long long>(k);
        const size_t len = BuildQuery(static_cast<uint16_t>(i), "q" + std::to_string(i) + "." + suffix, out[k].data());
        out_iov[k] = {out[k].data(), len};
        out_msg[k] = {};
        out_msg[k].msg_hdr.msg_name = &t.sa;
        out_msg[k].msg_hdr.msg_namelen = t.len;
        out_msg[k].msg_hdr.msg_iov = &out_iov[k];
        out_msg[k].msg_hdr.msg_iovlen = 1;
      }
      int r = sendmmsg(fd.get(), out_msg.data(), static_cast<unsigned>(batch), 0);
      if (r <= 0) {
        // The first message failed: it is counted, the rest of the batch goes again.
        ++(errno == EPERM ? refused : other);
        ++sent;
        continue;
      }
      for (int k = 0; k < r; ++k) in_flight[static_cast<uint16_t>(sent + k)] = sent + k + 1;
      sent += r;
    }
    if (unanswered() <= 0) continue;
    pollfd p{fd.get(), POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) {
      stalled = true;
      break;
    }
    for (size_t k = 0; k < kBatch; ++k) {
      in_iov[k] = {in[k].data(), in[k].size()};
      in_msg[k] = {};
      in_msg[k].msg_hdr.msg_iov = &in_iov[k];
      in_msg[k].msg_hdr.msg_iovlen = 1;
    }
    int r = recvmmsg(fd.get(), in_msg.data(), kBatch, MSG_DONTWAIT, nullptr);
    for (int k = 0; k < r; ++k) {
      if (in_msg[k].msg_len < 12) continue;
      const uint8_t* a = in[k].data();
      const uint16_t id = static_cast<uint16_t>((a[0] << 8) | a[1]);
      if (!(a[2] & 0x80) || in_flight[id] == 0) continue;  // not an answer to a query in flight
      in_flight[id] = 0;
      ++answered;
      const int rcode = a[3] & 0x0f;
      ++(rcode == 3 ? nxdomain : rcode == 0 ? noerror : other_rcode);
    }
  }
  j.Str("dst", t.text).Int("port", t.port).Int("sent", sent).Int("answered", answered).Int("nxdomain", nxdomain);
  j.Int("noerror", noerror).Int("other_rcode", other_rcode).Int("unanswered", unanswered());
  j.Int("refused", refused).Int("other", other).Int("ms", NowMs() - t0);
  j.Ok().Emit();
}

}  // namespace egressd::probe
