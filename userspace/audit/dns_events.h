// The DNS proxy's audit records (type `dns`): what dns::QueryObserver is told
// of each message, as one record of the stream (docs/audit.md, "DNS"), with
// Hubble's names where they fit (`dns.query`, `dns.qtypes`, `dns.rcode`,
// `dns.ips`, `dns.ttl`, `dns.cnames`).  DnsAudit sends them through the
// process's UserEventWriter, so the proxy never waits on audit.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "userspace/audit/user_events.h"
#include "userspace/dns/events.h"

namespace egressd::audit {

// "A", "AAAA", "HTTPS", ...; "TYPE<n>" for the others (RFC 3597).
std::string QtypeName(uint16_t qtype);
// "NOERROR", "NXDOMAIN", ...; "RCODE<n>" for the others.
std::string RcodeName(uint8_t rcode);

nlohmann::json DnsJson(const dns::QueryEvent& e);
// DnsJson(e), dumped as the stream writes it, without building the tree: the
// proxy encodes one per query in its loop thread, where the tree and its
// serialisation were two thirds of its instructions (docs/dns.md "Speed").
std::string DnsLine(const dns::QueryEvent& e);

class DnsAudit : public dns::QueryObserver {
 public:
  explicit DnsAudit(UserEventWriter& writer) : writer_(writer) {}
  void OnQuery(const dns::QueryEvent& e) override { writer_.SubmitLine(DnsLine(e), e.sandbox_id); }

 private:
  UserEventWriter& writer_;
};

}  // namespace egressd::audit
