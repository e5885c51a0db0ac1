#include "userspace/dns/message.h"

#include "userspace/dns/knot.h"

#include <algorithm>
#include <cstring>
#include <deque>

#include "absl/strings/ascii.h"

namespace egressd::dns {

void PktDeleter::operator()(knot_pkt* p) const { knot_pkt_free(p); }

namespace {

// Zone transfers and the obsolete mail meta-types are not lookups.
bool IsUnimplementedType(uint16_t t) { return t == KNOT_RRTYPE_AXFR || t == KNOT_RRTYPE_IXFR || t == 253 || t == 254; }
// Types that exist only inside a message, never as a question.
bool IsMetaType(uint16_t t) { return t == KNOT_RRTYPE_OPT || t == KNOT_RRTYPE_TSIG || t == KNOT_RRTYPE_TKEY; }

PktPtr ParseCopy(std::span<const uint8_t> wire, bool question_only, int* ret) {
  PktPtr pkt(knot_pkt_new(nullptr, static_cast<uint16_t>(wire.size()), nullptr));
  if (!pkt) {
    *ret = KNOT_ENOMEM;
    return nullptr;
  }
  std::memcpy(pkt->wire, wire.data(), wire.size());
  pkt->size = wire.size();
  *ret = question_only ? knot_pkt_parse_question(pkt.get()) : knot_pkt_parse(pkt.get(), 0);
  return pkt;
}

Query QuestionOf(const knot_pkt_t* pkt) {
  Query q;
  const uint8_t* w = pkt->wire;
  q.id = knot_wire_get_id(w);
  q.rd = knot_wire_get_rd(w) != 0;
  q.cd = knot_wire_get_cd(w) != 0;
  const uint8_t* name = knot_pkt_wire_qname(pkt);
  q.qname_wire.assign(name, name + pkt->qname_size);
  q.qname = NameText(knot_pkt_qname(pkt));
  q.qtype = knot_pkt_qtype(pkt);
  q.qclass = knot_pkt_qclass(pkt);
  return q;
}

}  // namespace

std::string NameText(const uint8_t* wire_name) {
  char buf[KNOT_DNAME_TXT_MAXLEN + 1];
  if (wire_name == nullptr || knot_dname_to_str(buf, wire_name, sizeof(buf)) == nullptr) return {};
  std::string s(buf);
  if (!s.empty() && s.back() == '.') s.pop_back();
  absl::AsciiStrToLower(&s);
  return s;
}

ParsedQuery ParseQuery(std::span<const uint8_t> wire) {
  ParsedQuery out;
  if (wire.size() < KNOT_WIRE_HEADER_SIZE || wire.size() > kMaxMessage) {
    out.why = "shorter than a header";
    return out;
  }
  const uint8_t* w = wire.data();
  if (knot_wire_get_qr(w)) {
    out.why = "a response, not a query";
    return out;
  }
  out.id = knot_wire_get_id(w);
  out.opcode = knot_wire_get_opcode(w);
  out.rd = knot_wire_get_rd(w) != 0;
  if (out.opcode != KNOT_OPCODE_QUERY) {
    out.refusal = Refusal::kNotImp;
    out.why = "opcode is not QUERY";
    return out;
  }
  if (knot_wire_get_qdcount(w) != 1) {
    out.refusal = Refusal::kFormErr;
    out.why = "not exactly one question";
    return out;
  }
  int ret = 0;
  PktPtr pkt = ParseCopy(wire, /*question_only=*/false, &ret);
  if (!pkt || (ret != KNOT_EOK && ret != KNOT_ETRAIL)) {
    out.refusal = Refusal::kFormErr;
    out.why = "malformed (libknot error " + std::to_string(ret) + ")";
    // Echo the question when at least that parses.
    int qret = 0;
    PktPtr q = ParseCopy(wire, /*question_only=*/true, &qret);
    if (q && qret == KNOT_EOK && q->qname_size > 0) out.question = QuestionOf(q.get());
    return out;
  }
  Query q = QuestionOf(pkt.get());
  if (q.qclass != KNOT_CLASS_IN) {
    out.refusal = Refusal::kNotImp;
    out.why = "class is not IN";
    out.question = std::move(q);
    return out;
  }
  if (IsUnimplementedType(q.qtype)) {
    out.refusal = Refusal::kNotImp;
    out.why = "zone transfer or mail meta-type";
    out.question = std::move(q);
    return out;
  }
  if (IsMetaType(q.qtype)) {
    out.refusal = Refusal::kFormErr;
    out.why = "a meta-type as the question";
    out.question = std::move(q);
    return out;
  }
  if (pkt->tsig_rr != nullptr) {
    out.refusal = Refusal::kNotImp;
    out.why = "TSIG-signed";
    out.question = std::move(q);
    return out;
  }
  if (pkt->opt_rr != nullptr) {
    if (knot_edns_get_version(pkt->opt_rr) != 0) {
      out.refusal = Refusal::kFormErr;
      out.why = "EDNS version is not 0";
      out.question = std::move(q);
      return out;
    }
    q.edns = true;
    q.udp_payload = std::max<uint16_t>(knot_edns_get_payload(pkt->opt_rr), kClassicUdpSize);
    q.dnssec_ok = knot_edns_do(pkt->opt_rr);
  }
  out.query = std::move(q);
  return out;
}

PktPtr ParseMessage(std::span<const uint8_t> wire) {
  if (wire.size() < KNOT_WIRE_HEADER_SIZE || wire.size() > kMaxMessage) return nullptr;
  int ret = 0;
  PktPtr pkt = ParseCopy(wire, /*question_only=*/false, &ret);
  if (!pkt || (ret != KNOT_EOK && ret != KNOT_ETRAIL)) return nullptr;
  return pkt;
}

PktPtr ParseQuestionOnly(std::span<const uint8_t> wire) {
  if (wire.size() < KNOT_WIRE_HEADER_SIZE || wire.size() > kMaxMessage) return nullptr;
  int ret = 0;
  PktPtr pkt = ParseCopy(wire, /*question_only=*/true, &ret);
  if (!pkt || ret != KNOT_EOK) return nullptr;
  return pkt;
}

Bytes BuildUpstreamQuery(const Query& q) {
  Query lower = q;
  knot_dname_to_lower(lower.qname_wire.data());
  Bytes out;
  knot_pkt_t* pkt = knot_pkt_new(nullptr, kClassicUdpSize, nullptr);
  if (pkt == nullptr) return out;
  std::memset(pkt->wire, 0, KNOT_WIRE_HEADER_SIZE);
  pkt->size = KNOT_WIRE_HEADER_SIZE;
  if (q.rd) knot_wire_set_rd(pkt->wire);
  if (q.cd) knot_wire_set_cd(pkt->wire);
  bool ok = knot_pkt_put_question(pkt, lower.qname_wire.data(), q.qclass, q.qtype) == KNOT_EOK;
  if (ok && q.edns) {
    knot_rrset_t opt;
    ok = knot_edns_init(&opt, std::min(q.udp_payload, kMaxUdpPayload), 0, 0, nullptr) == KNOT_EOK;
    if (ok) {
      if (q.dnssec_ok) knot_edns_set_do(&opt);
      ok = knot_pkt_begin(pkt, KNOT_ADDITIONAL) == KNOT_EOK &&
           knot_pkt_put(pkt, KNOT_COMPR_HINT_NONE, &opt, KNOT_PF_NOTRUNC) == KNOT_EOK;
      // The packet holds a shallow copy; the data must outlive the copy.
      out.assign(pkt->wire, pkt->wire + pkt->size);
      knot_rrset_clear(&opt, nullptr);
    }
  } else if (ok) {
    out.assign(pkt->wire, pkt->wire + pkt->size);
  }
  knot_pkt_free(pkt);
  if (!ok) out.clear();
  return out;
}

// ---- MessageWriter ----------------------------------------------------------

struct MessageWriter::Opt {
  knot_rrset_t rr;
  bool reserved = false;
  // Records put so far: the packet keeps shallow copies until Finish.
  std::deque<knot_rrset_t> records;
  std::deque<Bytes> owners;
};

MessageWriter::MessageWriter(size_t max_size)
    : buf_(std::clamp<size_t>(max_size, KNOT_WIRE_HEADER_SIZE, kMaxMessage)), opt_(std::make_unique<Opt>()) {
  pkt_ = knot_pkt_new(buf_.data(), static_cast<uint16_t>(buf_.size()), nullptr);
  std::memset(buf_.data(), 0, KNOT_WIRE_HEADER_SIZE);
  if (pkt_ != nullptr) pkt_->size = KNOT_WIRE_HEADER_SIZE;
  knot_rrset_init_empty(&opt_->rr);
}

MessageWriter::~MessageWriter() {
  if (opt_->reserved) knot_rrset_clear(&opt_->rr, nullptr);
  for (auto& r : opt_->records) knot_rdataset_clear(&r.rrs, nullptr);
  if (pkt_ != nullptr) knot_pkt_free(pkt_);
}

void MessageWriter::StartHeaderOnly(uint16_t id, uint8_t opcode, bool rd, uint8_t rcode) {
  if (pkt_ == nullptr) return;
  knot_wire_set_id(pkt_->wire, id);
  knot_wire_set_qr(pkt_->wire);
  knot_wire_set_opcode(pkt_->wire, opcode);
  if (rd) knot_wire_set_rd(pkt_->wire);
  knot_wire_set_ra(pkt_->wire);
  knot_wire_set_rcode(pkt_->wire, rcode);
}

bool MessageWriter::StartAnswer(const Query& q, uint8_t rcode) {
  if (pkt_ == nullptr) return false;
  StartHeaderOnly(q.id, KNOT_OPCODE_QUERY, q.rd, rcode);
  if (q.cd) knot_wire_set_cd(pkt_->wire);
  return knot_pkt_put_question(pkt_, q.qname_wire.data(), q.qclass, q.qtype) == KNOT_EOK;
}

bool MessageWriter::ReserveOpt(uint16_t payload, bool dnssec_ok, int ede_code, const std::string& ede_text) {
  if (pkt_ == nullptr || opt_->reserved) return false;
  if (knot_edns_init(&opt_->rr, payload, 0, 0, nullptr) != KNOT_EOK) return false;
  opt_->reserved = true;
  if (dnssec_ok) knot_edns_set_do(&opt_->rr);
  if (ede_code >= 0) {
    Bytes data(2 + ede_text.size());
    knot_wire_write_u16(data.data(), static_cast<uint16_t>(ede_code));
    std::memcpy(data.data() + 2, ede_text.data(), ede_text.size());
    if (knot_edns_add_option(&opt_->rr, KNOT_EDNS_OPTION_EDE, static_cast<uint16_t>(data.size()), data.data(),
                             nullptr) != KNOT_EOK) {
      return false;
    }
  }
  return knot_pkt_reserve(pkt_, static_cast<uint16_t>(knot_edns_wire_size(&opt_->rr))) == KNOT_EOK;
}

bool MessageWriter::BeginSection(int section) {
  if (pkt_ == nullptr) return false;
  static constexpr knot_section_t kSections[] = {KNOT_ANSWER, KNOT_AUTHORITY, KNOT_ADDITIONAL};
  if (section < 0 || section > 2) return false;
  return knot_pkt_begin(pkt_, kSections[section]) == KNOT_EOK;
}

bool MessageWriter::Put(const uint8_t* owner, uint16_t type, uint16_t rclass, uint32_t ttl,
                        std::span<const uint8_t> rdata) {
  if (pkt_ == nullptr) return false;
  Bytes& o = opt_->owners.emplace_back(owner, owner + knot_dname_size(owner));
  knot_rrset_t& rr = opt_->records.emplace_back();
  knot_rrset_init(&rr, o.data(), type, rclass, ttl);
  if (knot_rrset_add_rdata(&rr, rdata.data(), static_cast<uint16_t>(rdata.size()), nullptr) != KNOT_EOK) {
    return false;
  }
  return knot_pkt_put(pkt_, KNOT_COMPR_HINT_NONE, &rr, KNOT_PF_NOTRUNC) == KNOT_EOK;
}

void MessageWriter::SetFlags(bool aa, bool ad, bool tc) {
  if (pkt_ == nullptr) return;
  if (aa) knot_wire_set_aa(pkt_->wire);
  if (ad) knot_wire_set_ad(pkt_->wire);
  if (tc) knot_wire_set_tc(pkt_->wire);
}

Bytes MessageWriter::Finish() {
  if (pkt_ == nullptr) return {};
  if (opt_->reserved) {
    knot_pkt_reclaim(pkt_, static_cast<uint16_t>(knot_edns_wire_size(&opt_->rr)));
    if (knot_pkt_begin(pkt_, KNOT_ADDITIONAL) != KNOT_EOK ||
        knot_pkt_put(pkt_, KNOT_COMPR_HINT_NONE, &opt_->rr, KNOT_PF_NOTRUNC) != KNOT_EOK) {
      return {};
    }
  }
  return Bytes(pkt_->wire, pkt_->wire + pkt_->size);
}

}  // namespace egressd::dns
