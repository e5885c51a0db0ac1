// The readiness self-test's query (docs/api.md, "/readyz"): one plain query
// for a reserved name under .invalid (RFC 6761: never delegated), sent to the
// proxy's self-test endpoint, whose scope allows no name, so the proxy must
// answer it NXDOMAIN itself, through the same parse, scope and denial code a
// sandbox's out-of-scope query takes, without asking the upstream.
#ifndef EGRESSD_USERSPACE_DNS_SELF_TEST_H_
#define EGRESSD_USERSPACE_DNS_SELF_TEST_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "userspace/dns/message.h"

namespace egressd::dns {

inline constexpr char kSelfTestName[] = "self-test.egressd.invalid";

// The query: header with `id`, RD, one question kSelfTestName A IN, no EDNS.
Bytes SelfTestQuery(uint16_t id);

// OK when `answer` is the proxy's answer to SelfTestQuery(id): a response
// with that id and question, NXDOMAIN.  Otherwise the error says what was
// wrong with it (the readiness check's reason).
absl::Status CheckSelfTestAnswer(std::span<const uint8_t> answer, uint16_t id);

// True when `answer` carries an id other than `id`: an earlier self-test's
// answer that came after its timeout.  The socket is the self-test's own, so
// such an answer is read and dropped, never judged; judged, every later test
// would read its predecessor's answer and fail on the id for ever.
bool IsEarlierSelfTestAnswer(std::span<const uint8_t> answer, uint16_t id);

}  // namespace egressd::dns

#endif  // EGRESSD_USERSPACE_DNS_SELF_TEST_H_
