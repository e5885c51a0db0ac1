// libFuzzer target for the DNS proxy's message handling (userspace/dns): one
// input is a client query and an upstream answer (a 2-byte length, the
// query, then the answer; the first answer byte also picks the transport and
// which writes fail).  Beyond "no crash, no leak, no UB", it checks what the
// proxy promises:
//  - whatever is sent back parses, is a response, and carries the client's ID;
//  - only a name in scope is forwarded, and the upstream query is built from
//    the question (ID 0, no EDNS option: no client subnet, no cookie);
//  - an answer carries no A/AAAA the sink did not accept, and nothing in a
//    protected range is ever learned;
//  - a UDP answer fits the client's size.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include <spdlog/spdlog.h>

#include "userspace/dns/answer_filter.h"
#include "userspace/dns/knot.h"
#include "userspace/dns/query_flow.h"
#include "userspace/policy/floor.h"

namespace {

using namespace egressd;
using namespace egressd::dns;

#define FUZZ_CHECK(cond)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

class RecordingSink : public LearnedAddressSink {
 public:
  explicit RecordingSink(uint8_t fail_mask) : fail_mask_(fail_mask) {}
  absl::Status Learn(uint64_t, const net::IpAddr& addr, uint64_t, uint32_t) override {
    if ((fail_mask_ >> (calls_++ % 8)) & 1) return absl::ResourceExhaustedError("full");
    held.insert(addr);
    return absl::OkStatus();
  }
  absl::Status Forget(uint64_t, const net::IpAddr& addr) override {
    return held.erase(addr) ? absl::OkStatus() : absl::NotFoundError("not held");
  }
  absl::StatusOr<bool> InUse(uint64_t, const net::IpAddr&) const override { return false; }  // no flows here
  std::set<net::IpAddr> held;

 private:
  uint8_t fail_mask_;
  unsigned calls_ = 0;
};

const SandboxScope& Scope() {
  static const SandboxScope s = [] {
    policy::CompiledPolicy p;
    p.names = {"a.example", "b.example"};
    p.wildcard_suffixes = {"w.example"};
    SandboxScope s;
    s.sandbox_id = 9;
    s.names = NameScope(p);
    s.protected_cidrs = policy::FloorProtected(policy::Floor::kHosted);
    return s;
  }();
  return s;
}

// The response parses, is one, and answers the client's ID; its addresses.
std::vector<net::IpAddr> CheckResponse(const Bytes& out, const std::span<const uint8_t> query, size_t max_size) {
  FUZZ_CHECK(out.size() >= KNOT_WIRE_HEADER_SIZE);
  FUZZ_CHECK(out.size() <= max_size);
  FUZZ_CHECK(knot_wire_get_qr(out.data()));
  FUZZ_CHECK(knot_wire_get_id(out.data()) == knot_wire_get_id(query.data()));
  PktPtr pkt = ParseMessage(out);
  FUZZ_CHECK(pkt != nullptr);
  std::vector<net::IpAddr> addrs;
  for (knot_section_t s : {KNOT_ANSWER, KNOT_AUTHORITY, KNOT_ADDITIONAL}) {
    const knot_pktsection_t* sec = knot_pkt_section(pkt.get(), s);
    for (uint16_t i = 0; i < sec->count; ++i) {
      const knot_rrset_t* rr = knot_pkt_rr(sec, i);
      knot_rdata_t* rd = rr->rrs.rdata;
      for (uint16_t k = 0; k < rr->rrs.count; ++k, rd = knot_rdataset_next(rd)) {
        if (rr->type == KNOT_RRTYPE_A && rd->len == 4) {
          addrs.push_back(net::IpAddr::V4({rd->data[0], rd->data[1], rd->data[2], rd->data[3]}));
        } else if (rr->type == KNOT_RRTYPE_AAAA && rd->len == 16) {
          std::array<uint8_t, 16> b;
          std::copy_n(rd->data, 16, b.begin());
          addrs.push_back(net::IpAddr::V6(b));
        }
      }
    }
  }
  return addrs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = (spdlog::set_level(spdlog::level::off), true);  // failed writes log a warning
  (void)quiet;
  if (size < 2) return 0;
  size_t qlen = (size_t{data[0]} << 8) | data[1];
  if (qlen > size - 2) qlen = size - 2;
  std::span<const uint8_t> query(data + 2, qlen);
  std::span<const uint8_t> rest(data + 2 + qlen, size - 2 - qlen);
  uint8_t knobs = rest.empty() ? 0 : rest[0];
  std::span<const uint8_t> answer = rest.empty() ? rest : rest.subspan(1);

  Counters counters;
  Decision d = Decide(Scope(), query, counters);
  if (d.kind == Decision::kDrop) return 0;
  FUZZ_CHECK(query.size() >= KNOT_WIRE_HEADER_SIZE);
  if (d.kind == Decision::kRespond) {
    CheckResponse(d.response, query, kMaxMessage);
    return 0;
  }
  // Forwarded: in scope, and the upstream query is the proxy's own.
  FUZZ_CHECK(Scope().names.Match(d.query.qname).has_value());
  PktPtr up = ParseMessage(d.upstream_query);
  FUZZ_CHECK(up != nullptr);
  FUZZ_CHECK(knot_wire_get_id(d.upstream_query.data()) == 0);
  FUZZ_CHECK(!knot_wire_get_qr(d.upstream_query.data()));
  if (up->opt_rr != nullptr) FUZZ_CHECK(up->opt_rr->rrs.rdata->len == 0);  // no options at all

  bool tcp = knobs & 1;
  size_t max_size = tcp ? kMaxMessage : UdpLimit(d.query);
  RecordingSink sink(static_cast<uint8_t>(knobs >> 1));
  // The forwarded query's answer as the fuzzer wrote it, or (odd knobs) with
  // the proxy's own question spliced in, so answers reach the filter.
  Bytes upstream(answer.begin(), answer.end());
  // Knob 0x80: the fuzzer's bytes after its header become the records of an
  // answer to the proxy's own question, so mutations reach the filter
  // rather than stopping at the question check.
  if ((knobs & 0x80) && upstream.size() >= KNOT_WIRE_HEADER_SIZE) {
    size_t qend = KNOT_WIRE_HEADER_SIZE + up->qname_size + 4;
    Bytes spliced(d.upstream_query.begin(), d.upstream_query.begin() + qend);
    spliced[2] |= 0x80;                                      // QR
    for (int i = 6; i < 12; ++i) spliced[i] = upstream[i];  // the fuzzer's counts
    spliced.insert(spliced.end(), upstream.begin() + KNOT_WIRE_HEADER_SIZE, upstream.end());
    upstream = std::move(spliced);
  }
  Bytes out = Finish(Scope(), d, upstream, max_size, sink, Lifetime{}, 0, counters);
  for (const net::IpAddr& a : CheckResponse(out, query, max_size)) {
    FUZZ_CHECK(sink.held.count(a) > 0);  // map first: nothing the map lacks
  }
  for (const net::IpAddr& a : sink.held) FUZZ_CHECK(!IsProtected(a, Scope().protected_cidrs));
  return 0;
}
