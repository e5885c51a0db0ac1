#include "userspace/dns/denial.h"

#include <cstring>

#include "userspace/dns/knot.h"

namespace egressd::dns {
namespace {

uint16_t AnswerPayload(const Query& q) { return std::min(q.udp_payload, kMaxUdpPayload); }

Bytes SoaRdata() {
  // mname and rname under .invalid (RFC 6761: never resolves), then serial,
  // refresh, retry, expire, minimum.
  static const uint8_t kMname[] = "\x07" "blocked" "\x07" "egressd" "\x07" "invalid";
  static const uint8_t kRname[] = "\x0a" "hostmaster" "\x07" "egressd" "\x07" "invalid";
  const uint32_t fields[] = {1, 3600, 600, 86400, kDenialTtl};
  // Sized once and written in place (inserts that grow the vector draw a
  // false -Warray-bounds from GCC 12).
  Bytes r(sizeof(kMname) + sizeof(kRname) + sizeof(fields));
  uint8_t* p = r.data();
  std::memcpy(p, kMname, sizeof(kMname));  // includes the root label (the NUL)
  p += sizeof(kMname);
  std::memcpy(p, kRname, sizeof(kRname));
  p += sizeof(kRname);
  for (uint32_t f : fields) {
    knot_wire_write_u32(p, f);
    p += 4;
  }
  return r;
}

}  // namespace

Bytes BuildDenial(const Query& q) {
  MessageWriter w(q.edns ? AnswerPayload(q) : kClassicUdpSize);
  if (!w.StartAnswer(q, kRcodeNxDomain)) return {};
  if (q.edns && !w.ReserveOpt(kMaxUdpPayload, q.dnssec_ok, kEdeBlocked, kBlockedText)) return {};
  static const Bytes kSoa = SoaRdata();
  static const uint8_t kRoot[] = {0};
  if (!w.BeginSection(1) || !w.Put(kRoot, kTypeSoa, kClassIn, kDenialTtl, kSoa)) return {};
  return w.Finish();
}

Bytes BuildRefusal(const ParsedQuery& parsed) {
  if (parsed.query || parsed.refusal == Refusal::kDrop) return {};
  uint8_t rcode = parsed.refusal == Refusal::kFormErr ? kRcodeFormErr : kRcodeNotImp;
  MessageWriter w(kClassicUdpSize);
  if (parsed.question) {
    Query q = *parsed.question;
    q.id = parsed.id;
    if (!w.StartAnswer(q, rcode)) return {};
  } else {
    w.StartHeaderOnly(parsed.id, parsed.opcode, parsed.rd, rcode);
  }
  return w.Finish();
}

Bytes BuildServFail(const Query& q, int ede_code, const std::string& ede_text) {
  MessageWriter w(q.edns ? AnswerPayload(q) : kClassicUdpSize);
  if (!w.StartAnswer(q, kRcodeServFail)) return {};
  if (q.edns && !w.ReserveOpt(kMaxUdpPayload, q.dnssec_ok, ede_code, ede_text)) return {};
  return w.Finish();
}

Bytes BuildTruncated(const Query& q, uint8_t rcode) {
  MessageWriter w(q.edns ? AnswerPayload(q) : kClassicUdpSize);
  if (!w.StartAnswer(q, rcode)) return {};
  if (q.edns && !w.ReserveOpt(kMaxUdpPayload, q.dnssec_ok)) return {};
  w.SetFlags(false, false, true);
  return w.Finish();
}

}  // namespace egressd::dns
