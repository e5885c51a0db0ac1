#include "userspace/net/dns_endpoint.h"

#include "absl/strings/str_cat.h"

namespace egressd::net {

std::string DnsEndpoint::ToString() const {
  std::string out;
  if (addr4) absl::StrAppend(&out, addr4->ToString(), ":", port);
  if (addr6) absl::StrAppend(&out, out.empty() ? "" : " ", "[", addr6->ToString(), "]:", port);
  return out.empty() ? "(no address)" : out;
}

}  // namespace egressd::net
