#include "userspace/dns/query_flow.h"

#include <algorithm>
#include <set>
#include <string_view>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"

#include "userspace/dns/answer_filter.h"
#include "userspace/dns/denial.h"

namespace egressd::dns {

size_t UdpLimit(const Query& q) {
  return q.edns ? std::clamp<size_t>(q.udp_payload, kClassicUdpSize, kMaxMessage) : kClassicUdpSize;
}

namespace {

void NoteQuestion(QueryEvent* ev, const Query& q) {
  if (!ev) return;
  ev->parsed = true;
  ev->qname = q.qname;
  ev->qtype = q.qtype;
}

void NoteResponse(QueryEvent* ev, const Bytes& response) {
  if (ev && response.size() >= 4) ev->rcode = static_cast<uint8_t>(response[3] & 0x0f);
}

// The answer section as sent, and the addresses learned and refused.
void NoteAnswer(QueryEvent* ev, const FilteredAnswer& a, uint8_t rcode) {
  if (!ev) return;
  ev->rcode = rcode;
  for (const Record& r : a.records) {
    if (r.section != 0) continue;
    QueryEvent::Answer ans{NameText(r.owner.data()), r.type, r.ttl, {}};
    if (r.type == kTypeCname) {
      ans.data = NameText(r.rdata.data());
    } else if ((r.type == kTypeA || r.type == kTypeAaaa) && r.addrs.size() == 1) {
      ans.data = r.addrs[0].ToString();
    }
    ev->answers.push_back(std::move(ans));
  }
  for (const net::IpAddr& p : a.protected_addrs) ev->refused.push_back({p, "protected"});
}

}  // namespace

Decision Decide(const SandboxScope& sandbox, std::span<const uint8_t> wire, Counters& counters,
                QueryEvent* ev) {
  ++counters.queries;
  Decision d;
  ParsedQuery parsed = ParseQuery(wire);
  if (!parsed.query) {
    if (ev) ev->reason = parsed.refusal == Refusal::kDrop     ? "not-a-query"
                         : parsed.refusal == Refusal::kFormErr ? "formerr"
                                                               : "notimp";
    if (parsed.question) NoteQuestion(ev, *parsed.question);
    if (parsed.refusal == Refusal::kDrop) {
      ++counters.dropped;
      return d;
    }
    ++(parsed.refusal == Refusal::kFormErr ? counters.formerr : counters.notimp);
    SPDLOG_DEBUG("dns: sandbox {}: refused: {}", sandbox.sandbox_id, parsed.why);
    d.response = BuildRefusal(parsed);
    d.kind = d.response.empty() ? Decision::kDrop : Decision::kRespond;
    NoteResponse(ev, d.response);
    return d;
  }
  Query& q = *parsed.query;
  NoteQuestion(ev, q);
  std::optional<ScopeMatch> match = sandbox.names.Match(q.qname);
  if (!match) {
    ++counters.denied;
    if (ev) ev->reason = "name-not-in-scope";
    d.response = BuildDenial(q);
    d.kind = d.response.empty() ? Decision::kDrop : Decision::kRespond;
    NoteResponse(ev, d.response);
    return d;
  }
  if (ev) {
    ev->allowed = true;
    ev->reason = "name-in-scope";
    ev->rule = match->rule;
  }
  d.upstream_query = BuildUpstreamQuery(q);
  if (d.upstream_query.empty()) {
    ++counters.servfail;
    d.response = BuildServFail(q, kEdeOther, "egressd: could not build the upstream query");
    d.kind = Decision::kRespond;
    NoteResponse(ev, d.response);
    if (ev) ev->upstream_error = "could not build the upstream query";
    return d;
  }
  ++counters.forwarded;
  d.kind = Decision::kForward;
  d.query = std::move(q);
  d.match = std::move(*match);
  return d;
}

Bytes Finish(const SandboxScope& sandbox, const Decision& fwd, const absl::StatusOr<Bytes>& upstream,
             size_t max_size, LearnedAddressSink& sink, const Lifetime& lifetime, uint64_t now_boot_ns,
             Counters& counters, QueryEvent* ev, LearnedBook* book) {
  const Query& q = fwd.query;
  auto servfail = [&](const std::string& why) {
    ++counters.servfail;
    if (ev) ev->rcode = kRcodeServFail;
    return BuildServFail(q, kEdeOther, why);
  };
  if (!upstream.ok()) {
    ++counters.upstream_failed;
    if (ev) ev->upstream_error = upstream.status().ToString();
    SPDLOG_DEBUG("dns: sandbox {}: {}: upstream: {}", sandbox.sandbox_id, q.qname, upstream.status().ToString());
    return servfail("egressd: no answer from the upstream resolver");
  }
  // Truncated by the upstream: its records may be cut mid-way, so only the
  // question is read; TC=1 to the client, nothing learned, and the client's
  // TCP retry is the next (and only other) upstream query.
  if (upstream->size() >= 12 && ((*upstream)[2] & 0x02) != 0) {
    PktPtr head = ParseQuestionOnly(*upstream);
    if (!AnswersQuestion(q, head.get())) {
      ++counters.upstream_failed;
      return servfail("egressd: the upstream's answer did not parse");
    }
    ++counters.truncated;
    if (ev) {
      ev->truncated = true;
      ev->rcode = static_cast<uint8_t>((*upstream)[3] & 0x0f);
    }
    return BuildTruncated(q, static_cast<uint8_t>((*upstream)[3] & 0x0f));
  }
  PktPtr pkt = ParseMessage(*upstream);
  std::optional<FilteredAnswer> a = FilterAnswer(q, pkt.get(), sandbox.protected_cidrs);
  if (!a) {
    ++counters.upstream_failed;
    return servfail("egressd: the upstream's answer did not parse");
  }
  counters.protected_removed += a->protected_removed;
  counters.out_of_chain_removed += a->out_of_chain_removed;
  // Truncated by the upstream, or too big for the client: TC=1, nothing
  // learned; the client's TCP retry learns.
  std::optional<Bytes> tentative = a->tc ? std::nullopt : BuildAnswer(q, *a, max_size);
  if (!tentative) {
    ++counters.truncated;
    if (ev) {
      ev->truncated = true;
      ev->rcode = a->rcode;
      for (const net::IpAddr& p : a->protected_addrs) ev->refused.push_back({p, "protected"});
    }
    return BuildTruncated(q, a->rcode);
  }
  if (a->learn.empty()) {
    ++counters.answered;
    NoteAnswer(ev, *a, a->rcode);
    return *std::move(tentative);
  }
  // Bounds first: what the book refuses is never written, and what it
  // evicts is forgotten before this answer's writes (never an address of
  // this answer).
  std::set<net::IpAddr> failed;
  std::string bound_text;  // the extended error's text when a bound refused
  if (book) {
    std::vector<net::IpAddr> addrs;
    addrs.reserve(a->learn.size());
    for (const Candidate& c : a->learn) addrs.push_back(c.addr);
    LearnedBook::Admission adm = book->Admit(sandbox.sandbox_id, q.qname, addrs, now_boot_ns, sink);
    counters.evicted += adm.evicted.size();
    counters.evict_failed += adm.forget_failed;
    if (ev) ev->evicted = adm.evicted;
    for (const LearnedBook::Refusal& r : adm.refused) {
      const bool cap = r.why == std::string_view(kRefusedNameCap);
      ++(cap ? counters.cap_refused : counters.quota_refused);
      failed.insert(r.addr);
      if (ev) ev->refused.push_back({r.addr, r.why});
      if (bound_text.empty() || !cap) {
        bound_text = cap ? absl::StrCat("egressd: ", q.qname, " holds its cap of ", book->bounds().per_name,
                                        " learned addresses, all in use")
                         : absl::StrCat("egressd: the sandbox's quota of ", book->bounds().per_sandbox,
                                        " learned addresses is full");
      }
    }
    if (!adm.refused.empty()) {
      spdlog::warn("dns: sandbox {}: {}: {} of {} addresses not learned, removed from the answer: {}",
                   sandbox.sandbox_id, q.qname, adm.refused.size(), addrs.size(), bound_text);
    }
  }
  // Keyed (qname_key.h): the map's question-name id is trusted by policy
  // changes, and the question is the sandbox's choice.  No book: not known.
  const uint32_t qname_id = book ? book->QnameId(q.qname) : 0;
  for (const Candidate& c : a->learn) {
    if (failed.count(c.addr)) continue;
    const uint64_t expires = lifetime.ExpiryNs(now_boot_ns, c.ttl);
    absl::Status s = sink.LearnAnswer(sandbox.sandbox_id, c.addr, expires, fwd.match.name_id, qname_id);
    if (s.ok()) {
      ++counters.learned;
      if (book) book->Commit(q.qname, c.addr, expires);
      if (ev) ev->learned.push_back({c.addr, c.ttl});
    } else {
      ++counters.learn_failed;
      failed.insert(c.addr);
      if (ev) ev->refused.push_back({c.addr, absl::StrCat("map write failed: ", s.message())});
      spdlog::warn("dns: sandbox {}: {} -> {} not learned, removed from the answer: {}", sandbox.sandbox_id, q.qname,
                   c.addr.ToString(), s.ToString());
    }
  }
  if (book && ev) ev->held = QueryEvent::Held{book->HeldBy(q.qname), book->addresses()};
  if (failed.empty()) {
    ++counters.answered;
    NoteAnswer(ev, *a, a->rcode);
    return *std::move(tentative);
  }
  // A bound refused some: the extended error says which (18 Prohibited),
  // else a write failed (0).
  const int ede = bound_text.empty() ? kEdeOther : kEdeProhibited;
  if (failed.size() == a->learn.size()) {
    if (ev) {
      for (const net::IpAddr& p : a->protected_addrs) ev->refused.push_back({p, "protected"});
    }
    ++counters.servfail;
    if (ev) ev->rcode = kRcodeServFail;
    return BuildServFail(q, ede, bound_text.empty() ? "egressd: could not allow the answer's addresses" : bound_text);
  }
  RemoveAddresses(*a, failed);
  std::optional<Bytes> reduced =
      bound_text.empty() ? BuildAnswer(q, *a, max_size) : BuildAnswer(q, *a, max_size, ede, bound_text);
  if (!reduced) return servfail("egressd: could not build the answer");
  ++counters.answered;
  NoteAnswer(ev, *a, a->rcode);
  return *std::move(reduced);
}

}  // namespace egressd::dns
