#include "userspace/dns/self_test.h"

#include <algorithm>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace egressd::dns {

namespace {

Bytes QuestionWire() {
  Bytes q;
  for (absl::string_view label : absl::StrSplit(kSelfTestName, '.')) {
    q.push_back(static_cast<uint8_t>(label.size()));
    q.insert(q.end(), label.begin(), label.end());
  }
  q.push_back(0);
  for (uint16_t v : {kTypeA, kClassIn}) {
    q.push_back(static_cast<uint8_t>(v >> 8));
    q.push_back(static_cast<uint8_t>(v & 0xff));
  }
  return q;
}

// The header's ID; the caller has checked there are at least 2 bytes.
uint16_t IdOf(std::span<const uint8_t> m) { return static_cast<uint16_t>((m[0] << 8) | m[1]); }

}  // namespace

Bytes SelfTestQuery(uint16_t id) {
  Bytes m = {static_cast<uint8_t>(id >> 8), static_cast<uint8_t>(id & 0xff), 0x01 /* RD */, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  const Bytes q = QuestionWire();
  m.insert(m.end(), q.begin(), q.end());
  return m;
}

absl::Status CheckSelfTestAnswer(std::span<const uint8_t> a, uint16_t id) {
  if (a.size() < 12) return absl::DataLossError(absl::StrCat("self-test answer of ", a.size(), " bytes"));
  const uint16_t got_id = IdOf(a);
  if (got_id != id) return absl::DataLossError(absl::StrCat("self-test answer for id ", got_id, ", asked ", id));
  if ((a[2] & 0x80) == 0) return absl::DataLossError("self-test answer is not a response (QR=0)");
  const uint16_t qdcount = static_cast<uint16_t>((a[4] << 8) | a[5]);
  const Bytes q = QuestionWire();
  // The proxy echoes the question as the client wrote it.
  if (qdcount != 1 || a.size() < 12 + q.size() || !std::equal(q.begin(), q.end(), a.begin() + 12)) {
    return absl::DataLossError("self-test answer does not carry the self-test question");
  }
  const uint8_t rcode = a[3] & 0x0f;
  if (rcode != kRcodeNxDomain) {
    return absl::DataLossError(absl::StrCat("self-test answer has rcode ", rcode, ", expected NXDOMAIN (3)"));
  }
  return absl::OkStatus();
}

bool IsEarlierSelfTestAnswer(std::span<const uint8_t> answer, uint16_t id) {
  return answer.size() >= 2 && IdOf(answer) != id;
}

}  // namespace egressd::dns
