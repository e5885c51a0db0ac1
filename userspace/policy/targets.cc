#include "userspace/policy/targets.h"

#include <algorithm>

#include "absl/status/status.h"
#include "userspace/policy/names.h"
#include "userspace/policy/urls.h"

namespace egressd::policy {
namespace {

absl::Status Invalid(std::string why) {
  return absl::InvalidArgumentError(std::move(why));
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Whether `text` carries a port: "[v6]:443", or exactly one colon followed by
// digits ("192.0.2.1:443", "host:443"; IPv6 always has two colons or more).
bool HasPort(std::string_view t) {
  if (t.front() == '[' && t.find("]:") != std::string_view::npos) return true;
  const size_t colon = t.find(':');
  if (colon == std::string_view::npos ||
      t.find(':', colon + 1) != std::string_view::npos) {
    return false;
  }
  const std::string_view after = t.substr(colon + 1);
  return !after.empty() && std::all_of(after.begin(), after.end(), IsDigit);
}

// net's messages lead with the quoted value; the caller quotes it already.
absl::Status FromNet(const absl::Status& st, std::string_view text) {
  std::string msg(st.message());
  const std::string quoted = net::Quote(text);
  if (msg.starts_with(quoted + " ")) msg.erase(0, quoted.size() + 1);
  return Invalid(std::move(msg));
}

absl::StatusOr<Target> ParseCidr(std::string_view text) {
  auto cidr = net::Cidr::Parse(text);
  if (!cidr.ok()) return FromNet(cidr.status(), text);
  return Target{TargetKind::kCidr, {}, *cidr};
}

absl::StatusOr<Target> ParseWildcard(std::string_view text) {
  if (!text.starts_with("*.") ||
      text.find('*', 1) != std::string_view::npos) {
    return Invalid(
        "has a wildcard that is not the whole leftmost label; write "
        "\"*.example.com\"");
  }
  auto suffix = CanonicalName(text.substr(2));
  if (!suffix.ok()) return suffix.status();
  if (IsSingleLabel(*suffix)) {
    return Invalid("is a wildcard over a single label (a top-level domain)");
  }
  return Target{TargetKind::kWildcard, *std::move(suffix), {}};
}

}  // namespace

absl::StatusOr<Target> ParseTarget(std::string_view text) {
  if (text.empty()) return Invalid("is empty");
  for (char c : text) {
    const unsigned char u = c;
    if (u <= ' ' || u == 0x7f) {
      return Invalid(c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
                             c == '\v' || c == '\f'
                         ? "contains whitespace"
                         : "contains a control character");
    }
  }
  if (text == "*") {
    return Invalid(
        "is a bare *, which asks for the default rather than declaring a "
        "scope; name the destinations, or declare nothing to keep the "
        "default");
  }
  if (LooksLikeUrl(text)) {
    auto host = UrlHost(text);
    if (host.ok() && !host->empty()) {
      return Invalid("is a URL; declare its host, " + net::Quote(*host));
    }
    return Invalid("is a URL; declare its host");
  }
  if (text.find('/') != std::string_view::npos) return ParseCidr(text);
  if (HasPort(text)) {
    return Invalid("has a port; declare the address or name alone");
  }
  if (text.find(':') != std::string_view::npos || text.front() == '[') {
    return ParseCidr(text);
  }
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return IsDigit(c) || c == '.'; })) {
    return ParseCidr(text);
  }
  if (text.find('*') != std::string_view::npos) return ParseWildcard(text);
  auto name = CanonicalName(text);
  if (!name.ok()) return name.status();
  return Target{TargetKind::kName, *std::move(name), {}};
}

}  // namespace egressd::policy
