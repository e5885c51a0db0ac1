// Internationalized names to the ASCII form DNS carries them in.
#ifndef EGRESSD_USERSPACE_POLICY_IDN_H_
#define EGRESSD_USERSPACE_POLICY_IDN_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace egressd::policy {

// A UTF-8 name ("bücher.example") or one carrying A-labels ("xn--...") to
// lower-case ASCII ("xn--bcher-kva.example"), with IDNA2008 and UTS #46
// non-transitional mapping (what browsers, curl and glibc's AI_IDN do), so a
// rule names the same host the sandbox's resolver will ask for.  The error
// message says why, without the name (the caller quotes it).
absl::StatusOr<std::string> IdnToAscii(std::string_view utf8);

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_IDN_H_
