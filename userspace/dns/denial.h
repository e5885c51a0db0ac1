// Answers the proxy gives without asking anyone: a name outside the sandbox's
// scope (NXDOMAIN), a message that is not a plain query (FORMERR, NOTIMP), and
// a failure (SERVFAIL).  None of them is ever forwarded.
#ifndef EGRESSD_USERSPACE_DNS_DENIAL_H_
#define EGRESSD_USERSPACE_DNS_DENIAL_H_

#include <cstdint>
#include <string>

#include "userspace/dns/message.h"

namespace egressd::dns {

// RFC 8914 info codes the proxy uses.
inline constexpr int kEdeOther = 0;
inline constexpr int kEdeBlocked = 15;
// The sandbox may not learn more addresses (its quota, a name's cap): the
// operator's bound refuses this client, which is what 18 says; 0 stays for
// failures of the proxy or the upstream.
inline constexpr int kEdeProhibited = 18;

// The negative answer's SOA: its TTL and MINIMUM, so stub resolvers cache a
// denial briefly (a policy change that allows the name takes effect soon).
inline constexpr uint32_t kDenialTtl = 10;
inline constexpr char kBlockedText[] = "egressd: name not in the sandbox's egress policy";

// NXDOMAIN for `q`: same ID, the question as the client wrote it, a SOA of
// the root zone in authority, and EDE 15 "Blocked" when the query had EDNS.
Bytes BuildDenial(const Query& q);

// FORMERR or NOTIMP for a refused message (ParseQuery's result); empty when
// the message is dropped instead.
Bytes BuildRefusal(const ParsedQuery& parsed);

// SERVFAIL for `q`, with an extended error (code, text) when it had EDNS.
Bytes BuildServFail(const Query& q, int ede_code, const std::string& ede_text);

// An answer that does not fit the client's UDP size: header, question, OPT,
// TC=1, so the client retries over TCP.
Bytes BuildTruncated(const Query& q, uint8_t rcode);

}  // namespace egressd::dns

#endif  // EGRESSD_USERSPACE_DNS_DENIAL_H_
