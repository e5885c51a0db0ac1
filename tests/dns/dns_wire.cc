#include "tests/dns/dns_wire.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_split.h"

namespace egressd::dns::testing {
namespace {

struct Name {
  knot_dname_storage_t buf;
  explicit Name(const std::string& s) {
    if (knot_dname_from_str(buf, s.c_str(), sizeof(buf)) == nullptr) buf[0] = 0;
  }
};

Bytes Rdata(const Rr& r) {
  Bytes out;
  if (r.type == KNOT_RRTYPE_A) {
    out.resize(4);
    inet_pton(AF_INET, r.value.c_str(), out.data());
  } else if (r.type == KNOT_RRTYPE_AAAA) {
    out.resize(16);
    inet_pton(AF_INET6, r.value.c_str(), out.data());
  } else if (r.type == KNOT_RRTYPE_CNAME || r.type == KNOT_RRTYPE_NS) {
    Name n(r.value);
    out.assign(n.buf, n.buf + knot_dname_size(n.buf));
  } else if (r.type == KNOT_RRTYPE_HTTPS || r.type == KNOT_RRTYPE_SVCB) {
    out = {0, 1, 0};  // priority 1, target "."
    std::vector<std::string> parts = absl::StrSplit(r.value, '|');
    for (int fam = 0; fam < 2 && fam < static_cast<int>(parts.size()); ++fam) {
      if (parts[fam].empty()) continue;
      Bytes addrs;
      for (const std::string& a : std::vector<std::string>(absl::StrSplit(parts[fam], ','))) {
        uint8_t b[16];
        inet_pton(fam == 0 ? AF_INET : AF_INET6, a.c_str(), b);
        addrs.insert(addrs.end(), b, b + (fam == 0 ? 4 : 16));
      }
      uint16_t key = fam == 0 ? 4 : 6;
      out.push_back(key >> 8);
      out.push_back(key & 0xff);
      out.push_back(addrs.size() >> 8);
      out.push_back(addrs.size() & 0xff);
      out.insert(out.end(), addrs.begin(), addrs.end());
    }
  } else {
    out.assign(r.value.begin(), r.value.end());
  }
  return out;
}

}  // namespace

Bytes MakeQuery(const std::string& name, const QueryOpts& o) {
  knot_pkt_t* pkt = knot_pkt_new(nullptr, 4096, nullptr);
  knot_wire_set_id(pkt->wire, o.id);
  knot_wire_set_opcode(pkt->wire, o.opcode);
  if (o.rd) knot_wire_set_rd(pkt->wire);
  if (o.cd) knot_wire_set_cd(pkt->wire);
  Name n(name);
  knot_pkt_put_question(pkt, n.buf, o.qclass, o.qtype);
  knot_rrset_t opt;
  knot_rrset_init_empty(&opt);
  if (o.edns) {
    knot_edns_init(&opt, o.payload, 0, 0, nullptr);
    if (o.dnssec_ok) knot_edns_set_do(&opt);
    if (o.client_subnet) {
      const uint8_t ecs[] = {0, 1, 24, 0, 192, 0, 2};
      knot_edns_add_option(&opt, KNOT_EDNS_OPTION_CLIENT_SUBNET, sizeof(ecs), ecs, nullptr);
    }
    knot_pkt_begin(pkt, KNOT_ADDITIONAL);
    knot_pkt_put(pkt, KNOT_COMPR_HINT_NONE, &opt, 0);
  }
  Bytes out(pkt->wire, pkt->wire + pkt->size);
  knot_pkt_free(pkt);
  knot_rrset_clear(&opt, nullptr);
  return out;
}

Bytes MakeAnswer(const Bytes& query, const std::vector<Rr>& rrs, uint8_t rcode, bool tc) {
  knot_pkt_t* q = knot_pkt_new(const_cast<uint8_t*>(query.data()), query.size(), nullptr);
  knot_pkt_parse(q, 0);
  knot_pkt_t* pkt = knot_pkt_new(nullptr, 65535, nullptr);
  knot_pkt_init_response(pkt, q);
  knot_wire_set_rcode(pkt->wire, rcode);
  knot_wire_set_ra(pkt->wire);
  if (tc) knot_wire_set_tc(pkt->wire);
  std::vector<knot_rrset_t*> keep;
  static constexpr knot_section_t kSec[] = {KNOT_ANSWER, KNOT_AUTHORITY, KNOT_ADDITIONAL};
  for (int s = 0; s < 3; ++s) {
    knot_pkt_begin(pkt, kSec[s]);
    for (const Rr& r : rrs) {
      if (r.section != s) continue;
      Name owner(r.owner);
      knot_rrset_t* rr = knot_rrset_new(owner.buf, r.type, r.rclass, r.ttl, nullptr);
      Bytes d = Rdata(r);
      knot_rrset_add_rdata(rr, d.data(), d.size(), nullptr);
      knot_pkt_put(pkt, KNOT_COMPR_HINT_NONE, rr, KNOT_PF_NOTRUNC);
      keep.push_back(rr);
    }
  }
  Bytes out(pkt->wire, pkt->wire + pkt->size);
  knot_pkt_free(pkt);
  knot_pkt_free(q);
  for (auto* rr : keep) knot_rrset_free(rr, nullptr);
  return out;
}

std::vector<std::string> Parsed::Addresses() const {
  std::vector<std::string> out;
  for (const Seen& s : records) {
    if (s.type == KNOT_RRTYPE_A || s.type == KNOT_RRTYPE_AAAA) out.push_back(s.value);
  }
  return out;
}

Parsed Parse(const Bytes& wire) {
  Parsed p;
  if (wire.size() < KNOT_WIRE_HEADER_SIZE) return p;
  Bytes copy = wire;
  knot_pkt_t* pkt = knot_pkt_new(copy.data(), copy.size(), nullptr);
  int ret = knot_pkt_parse(pkt, 0);
  p.ok = ret == KNOT_EOK;
  const uint8_t* w = pkt->wire;
  p.id = knot_wire_get_id(w);
  p.qr = knot_wire_get_qr(w);
  p.tc = knot_wire_get_tc(w);
  p.rd = knot_wire_get_rd(w);
  p.ra = knot_wire_get_ra(w);
  p.rcode = knot_wire_get_rcode(w);
  p.qdcount = knot_wire_get_qdcount(w);
  if (pkt->qname_size > 0) {
    p.qname_wire.assign(w + KNOT_WIRE_HEADER_SIZE, w + KNOT_WIRE_HEADER_SIZE + pkt->qname_size);
    p.qtype = knot_pkt_qtype(pkt);
  }
  if (pkt->opt_rr) {
    p.edns = true;
    p.payload = knot_edns_get_payload(pkt->opt_rr);
    uint8_t* ede = knot_edns_get_option(pkt->opt_rr, KNOT_EDNS_OPTION_EDE, nullptr);
    if (ede) {
      uint16_t len = knot_edns_opt_get_length(ede);
      uint8_t* d = knot_edns_opt_get_data(ede);
      if (len >= 2) {
        p.ede_code = knot_wire_read_u16(d);
        p.ede_text.assign(reinterpret_cast<char*>(d) + 2, len - 2);
      }
    }
    p.has_ecs = knot_edns_get_option(pkt->opt_rr, KNOT_EDNS_OPTION_CLIENT_SUBNET, nullptr) != nullptr;
  }
  static constexpr knot_section_t kSec[] = {KNOT_ANSWER, KNOT_AUTHORITY, KNOT_ADDITIONAL};
  for (int s = 0; s < 3; ++s) {
    const knot_pktsection_t* sec = knot_pkt_section(pkt, kSec[s]);
    for (uint16_t i = 0; i < sec->count; ++i) {
      const knot_rrset_t* rr = knot_pkt_rr(sec, i);
      if (rr->type == KNOT_RRTYPE_OPT) continue;
      knot_rdata_t* rd = rr->rrs.rdata;
      for (uint16_t k = 0; k < rr->rrs.count; ++k, rd = knot_rdataset_next(rd)) {
        Seen seen;
        char name[KNOT_DNAME_TXT_MAXLEN + 1];
        knot_dname_to_str(name, rr->owner, sizeof(name));
        seen.owner = name;
        if (!seen.owner.empty() && seen.owner.back() == '.') seen.owner.pop_back();
        std::transform(seen.owner.begin(), seen.owner.end(), seen.owner.begin(), ::tolower);
        seen.type = rr->type;
        seen.ttl = rr->ttl;
        seen.section = s;
        char buf[INET6_ADDRSTRLEN];
        if (rr->type == KNOT_RRTYPE_A && rd->len == 4) {
          seen.value = inet_ntop(AF_INET, rd->data, buf, sizeof(buf));
        } else if (rr->type == KNOT_RRTYPE_AAAA && rd->len == 16) {
          seen.value = inet_ntop(AF_INET6, rd->data, buf, sizeof(buf));
        } else if (rr->type == KNOT_RRTYPE_CNAME) {
          knot_dname_to_str(name, rd->data, sizeof(name));
          seen.value = name;
        }
        p.records.push_back(seen);
      }
    }
  }
  knot_pkt_free(pkt);
  return p;
}

absl::Status FakeSink::Learn(uint64_t sandbox, const net::IpAddr& addr, uint64_t expires, uint32_t name_id) {
  std::string a = addr.ToString();
  if (std::find(fail.begin(), fail.end(), a) != fail.end()) {
    return absl::ResourceExhaustedError("learn " + a + ": map full (E2BIG)");
  }
  learned.push_back({sandbox, a, expires, name_id});
  return absl::OkStatus();
}

absl::Status FakeSink::Forget(uint64_t sandbox, const net::IpAddr& addr) {
  const std::string a = addr.ToString();
  auto held = [&](const Entry& e) { return e.sandbox == sandbox && e.addr == a; };
  auto it = std::stable_partition(learned.begin(), learned.end(), [&](const Entry& e) { return !held(e); });
  if (it == learned.end()) return absl::NotFoundError("forget " + a + ": not learned");
  forgotten.insert(forgotten.end(), it, learned.end());
  learned.erase(it, learned.end());
  return absl::OkStatus();
}

absl::StatusOr<bool> FakeSink::InUse(uint64_t /*sandbox*/, const net::IpAddr& addr) const {
  return std::find(in_use.begin(), in_use.end(), addr.ToString()) != in_use.end();
}

std::vector<std::string> FakeSink::Addresses() const {
  std::vector<std::string> out;
  for (const auto& e : learned) out.push_back(e.addr);
  return out;
}

}  // namespace egressd::dns::testing
