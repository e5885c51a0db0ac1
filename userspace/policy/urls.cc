#include "userspace/policy/urls.h"

#include <algorithm>

#include "absl/status/status.h"
#include "userspace/policy/text.h"

namespace egressd::policy {
namespace {

// Length of the scheme before "://", or 0.
size_t SchemeLength(std::string_view text) {
  const size_t sep = text.find("://");
  if (sep == std::string_view::npos || sep == 0) return 0;
  if (!text::IsAlpha(text[0])) return 0;
  for (size_t i = 1; i < sep; ++i) {
    const char c = text[i];
    if (!text::IsAlpha(c) && !text::IsDigit(c) && c != '+' && c != '-' &&
        c != '.') {
      return 0;
    }
  }
  return sep;
}

// The authority: between "://" and the first of "/?#".
std::string_view Authority(std::string_view url) {
  std::string_view rest = url.substr(SchemeLength(url) + 3);
  return rest.substr(0, rest.find_first_of("/?#"));
}

bool IsProxyVariable(std::string_view name) {
  const std::string upper = text::Upper(name);
  return upper.ends_with("_PROXY") && upper != "NO_PROXY";
}

}  // namespace

bool LooksLikeUrl(std::string_view text) { return SchemeLength(text) > 0; }

absl::StatusOr<std::string> UrlHost(std::string_view url) {
  if (!LooksLikeUrl(url)) {
    return absl::InvalidArgumentError("is not a URL (expected scheme://host)");
  }
  std::string_view auth = Authority(url);
  const size_t at = auth.rfind('@');
  if (at != std::string_view::npos) auth.remove_prefix(at + 1);
  std::string_view host = auth;
  std::string_view port;
  if (auth.starts_with("[")) {
    const size_t close = auth.find(']');
    if (close == std::string_view::npos) {
      return absl::InvalidArgumentError("has an unclosed \"[\" in its host");
    }
    host = auth.substr(1, close - 1);
    std::string_view after = auth.substr(close + 1);
    if (!after.empty() && !after.starts_with(":")) {
      return absl::InvalidArgumentError("has text after its \"]\"");
    }
    port = after.empty() ? after : after.substr(1);
  } else if (const size_t colon = auth.find(':');
             colon != std::string_view::npos) {
    host = auth.substr(0, colon);
    port = auth.substr(colon + 1);
  }
  if (!std::all_of(port.begin(), port.end(), text::IsDigit)) {
    return absl::InvalidArgumentError("has a port that is not a number");
  }
  if (host.find('%') != std::string_view::npos) {
    return absl::InvalidArgumentError(
        "has a percent-encoded host or a zone id; write the host plainly");
  }
  return std::string(host);
}

std::string RedactUrl(std::string_view url) {
  if (!LooksLikeUrl(url)) return std::string(url);
  const size_t start = SchemeLength(url) + 3;
  const std::string_view auth = Authority(url);
  const size_t at = auth.rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  return std::string(url.substr(0, start)) + "***" +
         std::string(url.substr(start + at));
}

std::vector<std::string> UrlsInEnvValue(std::string_view name,
                                        std::string_view value) {
  const bool proxy = IsProxyVariable(name);
  std::vector<std::string> out;
  for (std::string_view token : text::SplitAny(value, " \t\r\n,|")) {
    if (LooksLikeUrl(token)) {
      out.emplace_back(token);
    } else if (proxy) {
      out.push_back("http://" + std::string(token));
    }
  }
  return out;
}

}  // namespace egressd::policy
