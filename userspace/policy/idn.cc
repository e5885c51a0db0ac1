#include "userspace/policy/idn.h"

#include <idn2.h>

#include <cstdlib>
#include <memory>

#include "absl/status/status.h"

namespace egressd::policy {

absl::StatusOr<std::string> IdnToAscii(std::string_view utf8) {
  // libidn2 reads a C string: an embedded NUL would silently cut the name.
  if (utf8.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError("contains a NUL byte");
  }
  const std::string in(utf8);
  char* raw = nullptr;
  const int rc = idn2_to_ascii_8z(in.c_str(), &raw, IDN2_NONTRANSITIONAL);
  std::unique_ptr<char, decltype(&std::free)> out(raw, &std::free);
  if (rc != IDN2_OK) {
    return absl::InvalidArgumentError(
        std::string("is an internationalized name that cannot be converted to "
                    "ASCII (punycode): ") +
        idn2_strerror(rc));
  }
  return std::string(out.get());
}

}  // namespace egressd::policy
