// Hosts named by URLs in the sandbox environment (UV_INDEX_URL, GOPROXY,
// HF_ENDPOINT, HTTPS_PROXY...): a mirror the sandbox is configured to use
// must stay reachable when a declaration turns the sandbox deny-by-default.
#ifndef EGRESSD_USERSPACE_POLICY_URLS_H_
#define EGRESSD_USERSPACE_POLICY_URLS_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace egressd::policy {

// "scheme://..." with an RFC 3986 scheme.
bool LooksLikeUrl(std::string_view text);

// The host of "scheme://[userinfo@]host[:port][/path][?query][#fragment]",
// without brackets for IPv6 ("[2001:db8::1]" gives "2001:db8::1").  An empty
// string for a URL with no host, such as "file:///x".  The error says why,
// without the URL.
absl::StatusOr<std::string> UrlHost(std::string_view url);

// `url` with any userinfo replaced by "***", so a proxy password never
// reaches an error message or a log.
std::string RedactUrl(std::string_view url);

// The URLs in one environment value: tokens separated by whitespace, commas
// or pipes (GOPROXY="https://a,https://b|direct", PIP_EXTRA_INDEX_URL="u1
// u2") that look like URLs.  In a proxy variable (*_PROXY other than
// NO_PROXY, any case) a token without a scheme is a proxy address, as curl
// reads it, and comes back as "http://" + token.
std::vector<std::string> UrlsInEnvValue(std::string_view name,
                                        std::string_view value);

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_URLS_H_
