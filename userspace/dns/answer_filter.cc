#include "userspace/dns/answer_filter.h"

#include "userspace/dns/knot.h"

#include <algorithm>
#include <map>

namespace egressd::dns {
namespace {

std::string LowerKey(const uint8_t* name) {
  knot_dname_storage_t buf;
  knot_dname_copy_lower(buf, name);
  return std::string(reinterpret_cast<const char*>(buf), knot_dname_size(buf));
}

// The wire name at the start of `rdata` (uncompressed, as libknot stores
// rdata), bounds-checked; its length or 0.
size_t RdataNameLen(std::span<const uint8_t> rdata, size_t at) {
  size_t i = at;
  while (i < rdata.size()) {
    uint8_t len = rdata[i];
    if (len == 0) return i + 1 - at;
    if (len > 63) return 0;
    i += 1 + len;
  }
  return 0;
}

// The ipv4hint (key 4) and ipv6hint (key 6) addresses of an SVCB/HTTPS rdata;
// false when the rdata does not parse.
bool SvcbHints(std::span<const uint8_t> rdata, std::vector<net::IpAddr>& out) {
  if (rdata.size() < 3) return false;
  size_t target = RdataNameLen(rdata, 2);
  if (target == 0) return false;
  size_t i = 2 + target;
  while (i < rdata.size()) {
    if (i + 4 > rdata.size()) return false;
    uint16_t key = knot_wire_read_u16(&rdata[i]);
    uint16_t len = knot_wire_read_u16(&rdata[i + 2]);
    i += 4;
    if (i + len > rdata.size()) return false;
    if (key == 4 || key == 6) {
      size_t width = key == 4 ? 4 : 16;
      if (len % width != 0) return false;
      for (size_t k = 0; k < len; k += width) {
        if (key == 4) {
          std::array<uint8_t, 4> b;
          std::copy_n(&rdata[i + k], 4, b.begin());
          out.push_back(net::IpAddr::V4(b));
        } else {
          std::array<uint8_t, 16> b;
          std::copy_n(&rdata[i + k], 16, b.begin());
          out.push_back(net::IpAddr::V6(b));
        }
      }
    }
    i += len;
  }
  return true;
}

bool IsAddressType(uint16_t t) { return t == kTypeA || t == kTypeAaaa; }
bool IsServiceType(uint16_t t) { return t == kTypeSvcb || t == kTypeHttps; }

}  // namespace

bool IsProtected(const net::IpAddr& addr, const std::vector<policy::ProtectedCidr>& prot) {
  auto in = [&](const net::IpAddr& a) {
    return std::any_of(prot.begin(), prot.end(), [&](const policy::ProtectedCidr& p) { return p.cidr.Contains(a); });
  };
  if (in(addr)) return true;
  if (!addr.is_v4()) {
    // NAT64 (RFC 6052 well-known prefix) reaches the IPv4 address it embeds.
    static constexpr uint8_t kNat64[12] = {0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    const auto& b = addr.bytes();
    if (std::equal(kNat64, kNat64 + 12, b.begin())) {
      return in(net::IpAddr::V4({b[12], b[13], b[14], b[15]}));
    }
  }
  return false;
}

bool AnswersQuestion(const Query& q, const knot_pkt* upstream) {
  if (upstream == nullptr || upstream->qname_size == 0) return false;
  const uint8_t* w = upstream->wire;
  if (!knot_wire_get_qr(w) || knot_wire_get_opcode(w) != KNOT_OPCODE_QUERY) return false;
  return LowerKey(knot_pkt_qname(upstream)) == LowerKey(q.qname_wire.data()) && knot_pkt_qtype(upstream) == q.qtype &&
         knot_pkt_qclass(upstream) == q.qclass;
}

std::optional<FilteredAnswer> FilterAnswer(const Query& q, const knot_pkt* upstream,
                                           const std::vector<policy::ProtectedCidr>& prot) {
  if (!AnswersQuestion(q, upstream)) return std::nullopt;
  const uint8_t* w = upstream->wire;
  const std::string qkey = LowerKey(q.qname_wire.data());
  FilteredAnswer out;
  out.rcode = knot_wire_get_rcode(w);
  out.aa = knot_wire_get_aa(w) != 0;
  out.ad = knot_wire_get_ad(w) != 0;
  out.tc = knot_wire_get_tc(w) != 0;

  // Every record, flattened (libknot keeps one RRset per parsed record, but
  // an RRset may hold several).
  static constexpr knot_section_t kSections[] = {KNOT_ANSWER, KNOT_AUTHORITY, KNOT_ADDITIONAL};
  for (int s = 0; s < 3; ++s) {
    const knot_pktsection_t* sec = knot_pkt_section(upstream, kSections[s]);
    for (uint16_t i = 0; i < sec->count; ++i) {
      const knot_rrset_t* rr = knot_pkt_rr(sec, i);
      if (rr->type == KNOT_RRTYPE_OPT || rr->type == KNOT_RRTYPE_TSIG) continue;
      knot_rdata_t* rd = rr->rrs.rdata;
      for (uint16_t k = 0; k < rr->rrs.count; ++k, rd = knot_rdataset_next(rd)) {
        Record r;
        r.section = s;
        r.owner.assign(rr->owner, rr->owner + knot_dname_size(rr->owner));
        r.type = rr->type;
        r.rclass = rr->rclass;
        r.ttl = rr->ttl;
        r.rdata.assign(rd->data, rd->data + rd->len);
        out.records.push_back(std::move(r));
      }
    }
  }

  // The CNAME chain from the question name: owner (lower) -> smallest TTL on
  // the way there.
  std::map<std::string, uint32_t> chain{{qkey, UINT32_MAX}};
  std::string at = qkey;
  uint32_t ttl_so_far = UINT32_MAX;
  for (int hop = 0; hop < kMaxChain; ++hop) {
    const Record* next = nullptr;
    for (const Record& r : out.records) {
      if (r.section == 0 && r.type == kTypeCname && r.rclass == kClassIn &&
          LowerKey(r.owner.data()) == at && RdataNameLen(r.rdata, 0) == r.rdata.size()) {
        next = &r;
        break;
      }
    }
    if (next == nullptr) break;
    std::string target = LowerKey(next->rdata.data());
    if (chain.count(target)) break;  // a loop
    ttl_so_far = std::min(ttl_so_far, next->ttl);
    chain[target] = ttl_so_far;
    at = std::move(target);
    out.chain_length = hop + 1;
  }

  std::map<net::IpAddr, uint32_t> learn_ttl;
  std::vector<net::IpAddr> learn_order;
  std::vector<Record> kept;
  for (Record& r : out.records) {
    bool carries = IsAddressType(r.type) || IsServiceType(r.type);
    if (!carries) {
      kept.push_back(std::move(r));
      continue;
    }
    if (IsAddressType(r.type)) {
      size_t want = r.type == kTypeA ? 4 : 16;
      if (r.rdata.size() != want) {
        ++out.out_of_chain_removed;
        continue;
      }
      if (r.type == kTypeA) {
        r.addrs.push_back(net::IpAddr::V4({r.rdata[0], r.rdata[1], r.rdata[2], r.rdata[3]}));
      } else {
        std::array<uint8_t, 16> b;
        std::copy_n(r.rdata.begin(), 16, b.begin());
        r.addrs.push_back(net::IpAddr::V6(b));
      }
    } else if (!SvcbHints(r.rdata, r.addrs)) {
      ++out.out_of_chain_removed;
      continue;
    }
    auto on_chain = chain.find(LowerKey(r.owner.data()));
    r.learnable = r.section == 0 && r.rclass == kClassIn && on_chain != chain.end();
    if (r.addrs.empty()) {  // an HTTPS record without hints carries nothing
      kept.push_back(std::move(r));
      continue;
    }
    if (!r.learnable) {
      out.out_of_chain_removed += r.addrs.size();
      continue;
    }
    size_t prot_hits = std::count_if(r.addrs.begin(), r.addrs.end(),
                                     [&](const net::IpAddr& a) { return IsProtected(a, prot); });
    if (prot_hits > 0) {
      out.protected_removed += prot_hits;
      for (const net::IpAddr& a : r.addrs) {
        if (IsProtected(a, prot)) out.protected_addrs.push_back(a);
      }
      continue;
    }
    uint32_t ttl = std::min(r.ttl, on_chain->second);
    for (const net::IpAddr& a : r.addrs) {
      auto [it, fresh] = learn_ttl.emplace(a, ttl);
      if (fresh) {
        learn_order.push_back(a);
      } else {
        it->second = std::max(it->second, ttl);
      }
    }
    kept.push_back(std::move(r));
  }
  out.records = std::move(kept);
  for (const net::IpAddr& a : learn_order) out.learn.push_back({a, learn_ttl[a]});
  return out;
}

void RemoveAddresses(FilteredAnswer& a, const std::set<net::IpAddr>& failed) {
  if (failed.empty()) return;
  std::erase_if(a.records, [&](const Record& r) {
    return std::any_of(r.addrs.begin(), r.addrs.end(), [&](const net::IpAddr& x) { return failed.count(x) > 0; });
  });
  std::erase_if(a.learn, [&](const Candidate& c) { return failed.count(c.addr) > 0; });
}

std::optional<Bytes> BuildAnswer(const Query& q, const FilteredAnswer& a, size_t max_size, int ede_code,
                                 const std::string& ede_text) {
  MessageWriter w(max_size);
  if (!w.StartAnswer(q, a.rcode)) return std::nullopt;
  if (q.edns && !w.ReserveOpt(kMaxUdpPayload, q.dnssec_ok, ede_code, ede_text)) return std::nullopt;
  w.SetFlags(a.aa, a.ad, false);
  int section = -1;
  for (const Record& r : a.records) {
    if (r.section != section) {
      section = r.section;
      if (!w.BeginSection(section)) return std::nullopt;
    }
    if (!w.Put(r.owner.data(), r.type, r.rclass, r.ttl, r.rdata)) return std::nullopt;
  }
  Bytes out = w.Finish();
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace egressd::dns
