#include "userspace/policy/explain.h"

#include <algorithm>
#include <array>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace egressd::policy {
namespace {

constexpr uint16_t kDnsPort = 53;

// 0.0.0.0 and :: reach loopback (lib/addr.h's egr_addr_unspecified_to_loopback).
net::IpAddr AsJudged(const net::IpAddr& a) {
  if (a.bytes() != std::array<uint8_t, 16>{}) return a;
  if (a.is_v4()) return net::IpAddr::V4({127, 0, 0, 1});
  std::array<uint8_t, 16> one{};
  one[15] = 1;
  return net::IpAddr::V6(one);
}

bool IsLoopback(const net::IpAddr& a) {
  if (a.is_v4()) return a.bytes()[0] == 127;
  std::array<uint8_t, 16> one{};
  one[15] = 1;
  return a.bytes() == one;
}

// The IPv4 addresses an IPv6 form carries (lib/addr.h's egr_addr_embedded_v4,
// same forms, same places).
std::vector<net::IpAddr> EmbeddedV4(const net::IpAddr& a) {
  const std::array<uint8_t, 16>& b = a.bytes();
  auto v4 = [&](int i, int j, int k, int l) { return net::IpAddr::V4({b[i], b[j], b[k], b[l]}); };
  auto zero = [&](int from, int to) {
    return std::all_of(b.begin() + from, b.begin() + to, [](uint8_t x) { return x == 0; });
  };
  if (a.is_v4()) return {};
  if (zero(0, 8) && (zero(8, 12) || (b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0))) {
    return {v4(12, 13, 14, 15)};
  }
  if (!(b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b)) return {};
  if (zero(4, 12)) return {v4(12, 13, 14, 15)};
  if (b[4] != 0 || b[5] != 1) return {};
  return {v4(6, 7, 9, 10), v4(7, 9, 10, 11), v4(9, 10, 11, 12), v4(12, 13, 14, 15)};
}

// Port 0 ("no port") matches only an entry that allows every port
// (lib/verdict.h's egr_ports_allow).
bool PortsAllow(const std::vector<PortRange>& ranges, uint16_t port) {
  if (ranges.empty()) return true;
  for (const PortRange& r : ranges) {
    if (port != 0 && r.first <= port && port <= r.last) return true;
  }
  return false;
}

std::string PortsText(const std::vector<PortRange>& ranges) {
  if (ranges.empty()) return "every port";
  std::vector<std::string> parts;
  for (const PortRange& r : ranges) parts.push_back(ToString(r));
  return "ports " + absl::StrJoin(parts, ",");
}

std::string Endpoint(const DnsEndpoint& e) {
  return e.addr.is_v4() ? absl::StrCat(e.addr.ToString(), ":", e.port)
                        : absl::StrCat("[", e.addr.ToString(), "]:", e.port);
}

const ProtectedCidr* Protecting(const CompiledPolicy& p, const net::IpAddr& a) {
  const ProtectedCidr* best = nullptr;
  for (const ProtectedCidr& c : p.protected_cidrs) {
    if (c.cidr.Contains(a) && (best == nullptr || c.cidr.prefix_len() > best->cidr.prefix_len())) best = &c;
  }
  return best;
}

Explanation Deny(const CompiledPolicy& p, Explanation e) {
  e.allowed = false;
  e.deny_action = std::string(ToString(p.deny_action));
  return e;
}

}  // namespace

absl::StatusOr<Proto> ParseProto(std::string_view text) {
  if (auto p = kProtoNames.Find(text)) return *p;
  return absl::InvalidArgumentError("invalid protocol " + net::Quote(text) + "; valid: " +
                                    kProtoNames.Join("\"", "\"", ", "));
}

absl::StatusOr<std::pair<net::IpAddr, std::optional<uint16_t>>> ParseDestination(std::string_view text) {
  std::string_view host = text, port;
  bool has_port = false;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || (close + 1 < text.size() && text[close + 1] != ':') ||
        close + 1 == text.size() - 1) {
      return absl::InvalidArgumentError("invalid destination " + net::Quote(text) +
                                        ": want ADDRESS, ADDRESS:PORT or [IPv6]:PORT");
    }
    host = text.substr(1, close - 1);
    has_port = close + 1 < text.size();
    if (has_port) port = text.substr(close + 2);
  } else if (std::count(text.begin(), text.end(), ':') == 1) {
    host = text.substr(0, text.find(':'));
    port = text.substr(text.find(':') + 1);
    has_port = true;
  }
  auto addr = net::IpAddr::Parse(host);
  if (!addr.ok()) {
    return absl::InvalidArgumentError("invalid destination " + net::Quote(text) +
                                      ": not an IP address (explain judges addresses; a name's addresses "
                                      "are the ones the sandbox's DNS proxy learned)");
  }
  if (!has_port) return std::make_pair(*addr, std::optional<uint16_t>());
  uint32_t n = 0;
  if (!absl::SimpleAtoi(absl::string_view(port.data(), port.size()), &n) || n > 65535) {
    return absl::InvalidArgumentError("invalid port " + net::Quote(port) + " in destination " +
                                      net::Quote(text) + ": want 0-65535");
  }
  return std::make_pair(*addr, std::optional<uint16_t>(static_cast<uint16_t>(n)));
}

Explanation Explain(const CompiledPolicy& p, const ExplainQuery& q) {
  Explanation e;
  e.judged = AsJudged(q.dest);
  const std::string proto(kProtoNames.Name(q.proto));

  // 1. DNS, before any address check (lib/dns_redirect.h).
  if (q.port == kDnsPort) {
    const std::optional<DnsEndpoint>& ep = e.judged.is_v4() ? q.dns4 : q.dns6;
    if (ep) {
      e.allowed = true;
      e.step = ExplainStep::kDnsRedirect;
      e.endpoint = *ep;
      e.why = absl::StrCat("every ", proto, " query to port 53 goes to the sandbox's DNS endpoint ",
                           Endpoint(*ep), ", whatever the address; names are judged there");
      return e;
    }
    e.step = ExplainStep::kDnsRefused;
    e.why = absl::StrCat("a query to port 53 is refused: the sandbox has no ",
                         e.judged.is_v4() ? "IPv4" : "IPv6", " DNS endpoint (its DNS fails closed)");
    e = Deny(p, std::move(e));
    e.deny_action = "reject";  // the redirect refuses at once, whatever on_deny says
    return e;
  }
  for (const DnsEndpoint& ep : q.node_endpoints) {
    if (ep.addr == e.judged && ep.port == q.port) {
      e.step = ExplainStep::kDnsRefused;
      e.endpoint = ep;
      e.why = absl::StrCat(Endpoint(ep), " is a DNS endpoint: only a query the kernel redirected there reaches it");
      e = Deny(p, std::move(e));
      e.deny_action = "reject";
      return e;
    }
  }

  const bool loopback = IsLoopback(e.judged);
  if (loopback && q.own_netns.value_or(false)) {
    e.allowed = true;
    e.step = ExplainStep::kOwnLoopback;
    e.why = "loopback of the sandbox's own network namespace reaches only the sandbox";
    return e;
  }
  if (loopback) {
    e.notes.push_back(q.own_netns ? "the sandbox shares the node's network namespace: its loopback is the node's"
                                  : "whether the sandbox has a network namespace of its own is not known: "
                                    "there, its loopback passes");
    e.notes.push_back("a socket bound to a real link (SO_BINDTODEVICE) is refused loopback whatever the policy");
  }
  if (e.judged != q.dest) e.notes.push_back(q.dest.ToString() + " reaches " + e.judged.ToString());

  // 2. Protected ranges: the IPv4 forms inside an IPv6 address first, as the kernel.
  const std::vector<net::IpAddr> embedded = EmbeddedV4(e.judged);
  for (const net::IpAddr& v4 : embedded) {
    if (const ProtectedCidr* c = Protecting(p, v4)) {
      e.step = ExplainStep::kProtected;
      e.embedded_v4 = v4;
      e.cidr = c->cidr;
      e.source = c->source;
      e.why = absl::StrCat(e.judged.ToString(), " carries ", v4.ToString(), ", in the protected range ",
                           c->cidr.ToString(), " (", c->source, "): denied whatever else allows it");
      return Deny(p, std::move(e));
    }
  }
  if (const ProtectedCidr* c = Protecting(p, e.judged)) {
    e.step = ExplainStep::kProtected;
    e.cidr = c->cidr;
    e.source = c->source;
    e.why = absl::StrCat(e.judged.ToString(), " is in the protected range ", c->cidr.ToString(), " (", c->source,
                         "): denied whatever else allows it");
    return Deny(p, std::move(e));
  }

  // 3. Allowed CIDRs: the most specific entry that allows the port (the
  // kernel's folded longest-prefix entry allows what any of them allows).
  const AllowedCidr* allowing = nullptr;
  const AllowedCidr* covering = nullptr;  // the most specific one, whatever its ports
  for (const AllowedCidr& a : p.allowed) {
    if (!a.cidr.Contains(e.judged)) continue;
    if (covering == nullptr || a.cidr.prefix_len() > covering->cidr.prefix_len()) covering = &a;
    if (PortsAllow(a.ports, q.port) &&
        (allowing == nullptr || a.cidr.prefix_len() > allowing->cidr.prefix_len())) {
      allowing = &a;
    }
  }
  if (allowing != nullptr) {
    e.allowed = true;
    e.step = ExplainStep::kAllowed;
    e.cidr = allowing->cidr;
    e.ports = allowing->ports;
    e.source = allowing->source;
    e.why = absl::StrCat(allowing->cidr.ToString(), " is allowed, ", PortsText(allowing->ports), " (",
                         allowing->source, ")");
    return e;
  }
  if (covering != nullptr) {
    e.notes.push_back(absl::StrCat(covering->cidr.ToString(), " (", covering->source, ") is allowed on ",
                                   PortsText(covering->ports), " only, not port ", q.port));
  }

  // 4. Addresses the DNS proxy learned for this sandbox.
  for (const LearnedAddress& l : q.learned) {
    if (l.addr != e.judged) continue;
    e.learned = l;
    if (l.expires_in_ms > 0) {
      e.allowed = true;
      e.step = ExplainStep::kResolved;
      e.why = absl::StrCat(e.judged.ToString(), " was learned from the answer for ",
                           l.rules.empty() ? std::string("a name of the policy") : absl::StrJoin(l.rules, ", "),
                           "; new connections pass for ", (l.expires_in_ms + 999) / 1000, " s more");
      return e;
    }
    e.notes.push_back(absl::StrCat("learned from ", absl::StrJoin(l.rules, ", "),
                                   " but expired: a new connection needs a fresh answer"));
  }

  // 5. The default.
  e.step = ExplainStep::kDefault;
  if (p.default_verdict == Verdict::kAllow) {
    e.allowed = true;
    e.why = "nothing protects or allows it: the policy's default allows";
    return e;
  }
  e.why = "nothing allows it: the policy's default denies";
  if (p.audit.audit_only) {
    e.allowed = true;
    e.would_deny = true;
    e.why += " (audit-only: let through and recorded as would-deny)";
    return e;
  }
  return Deny(p, std::move(e));
}

std::string Explanation::ToText() const {
  std::string out = absl::StrCat(allowed ? (would_deny ? "WOULD-DENY" : "ALLOW") : "DENY",
                                 deny_action.empty() ? "" : absl::StrCat(" (", deny_action, ")"), " by ",
                                 std::string(kExplainStepNames.Name(step)), ": ", why, "\n");
  for (const std::string& n : notes) absl::StrAppend(&out, "  note: ", n, "\n");
  return out;
}

}  // namespace egressd::policy
