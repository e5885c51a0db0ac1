// The DNS proxy's audit records (type `dns`): what dns::QueryObserver is told
// of each message, as one record of the stream (docs/audit.md, "DNS"), with
// Hubble's names where they fit (`dns.query`, `dns.qtypes`, `dns.rcode`,
// `dns.ips`, `dns.ttl`, `dns.cnames`).  DnsAudit sends them through the
// process's UserEventWriter, so the proxy never waits on audit, and the
// writer's thread encodes them, so the proxy's loop never formats a line.
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
// DnsJson(e), dumped as the stream writes it, without building the tree: one
// per query, where the tree and its serialisation were two thirds of the
// proxy's instructions when its loop encoded them (docs/dns.md "Speed").
std::string DnsLine(const dns::QueryEvent& e);

class DnsAudit : public dns::QueryObserver {
 public:
  explicit DnsAudit(UserEventWriter& writer) : writer_(writer) {}
  // Encoded by the writer's thread, not in the proxy's loop.
  void OnQuery(std::shared_ptr<const dns::QueryEvent> e) override {
    const uint64_t sandbox = e->sandbox_id;
    writer_.SubmitDeferred<&DnsLine>(std::move(e), sandbox);
  }

 private:
  UserEventWriter& writer_;
};

}  // namespace egressd::audit
