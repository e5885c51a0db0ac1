#include "userspace/dns/query_flow.h"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>

#include "userspace/dns/answer_filter.h"
#include "userspace/dns/denial.h"

namespace egressd::dns {

size_t UdpLimit(const Query& q) {
  return q.edns ? std::clamp<size_t>(q.udp_payload, kClassicUdpSize, kMaxMessage) : kClassicUdpSize;
}

Decision Decide(const SandboxScope& sandbox, std::span<const uint8_t> wire, Counters& counters) {
  ++counters.queries;
  Decision d;
  ParsedQuery parsed = ParseQuery(wire);
  if (!parsed.query) {
    if (parsed.refusal == Refusal::kDrop) {
      ++counters.dropped;
      return d;
    }
    ++(parsed.refusal == Refusal::kFormErr ? counters.formerr : counters.notimp);
    SPDLOG_DEBUG("dns: sandbox {}: refused: {}", sandbox.sandbox_id, parsed.why);
    d.response = BuildRefusal(parsed);
    d.kind = d.response.empty() ? Decision::kDrop : Decision::kRespond;
    return d;
  }
  Query& q = *parsed.query;
  std::optional<ScopeMatch> match = sandbox.names.Match(q.qname);
  if (!match) {
    ++counters.denied;
    d.response = BuildDenial(q);
    d.kind = d.response.empty() ? Decision::kDrop : Decision::kRespond;
    return d;
  }
  d.upstream_query = BuildUpstreamQuery(q);
  if (d.upstream_query.empty()) {
    ++counters.servfail;
    d.response = BuildServFail(q, kEdeOther, "egressd: could not build the upstream query");
    d.kind = Decision::kRespond;
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
             Counters& counters) {
  const Query& q = fwd.query;
  auto servfail = [&](const std::string& why) {
    ++counters.servfail;
    return BuildServFail(q, kEdeOther, why);
  };
  if (!upstream.ok()) {
    ++counters.upstream_failed;
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
    return BuildTruncated(q, a->rcode);
  }
  if (a->learn.empty()) {
    ++counters.answered;
    return *std::move(tentative);
  }
  std::set<net::IpAddr> failed;
  for (const Candidate& c : a->learn) {
    absl::Status s = sink.Learn(sandbox.sandbox_id, c.addr, lifetime.ExpiryNs(now_boot_ns, c.ttl), fwd.match.name_id);
    if (s.ok()) {
      ++counters.learned;
    } else {
      ++counters.learn_failed;
      failed.insert(c.addr);
      spdlog::warn("dns: sandbox {}: {} -> {} not learned, removed from the answer: {}", sandbox.sandbox_id, q.qname,
                   c.addr.ToString(), s.ToString());
    }
  }
  if (failed.empty()) {
    ++counters.answered;
    return *std::move(tentative);
  }
  if (failed.size() == a->learn.size()) {
    return servfail("egressd: could not allow the answer's addresses");
  }
  RemoveAddresses(*a, failed);
  std::optional<Bytes> reduced = BuildAnswer(q, *a, max_size);
  if (!reduced) return servfail("egressd: could not build the answer");
  ++counters.answered;
  return *std::move(reduced);
}

}  // namespace egressd::dns
