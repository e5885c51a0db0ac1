// Which rule of a compiled policy allows or denies one destination, and why
// (`egressctl explain`, GET /v1/sandboxes/{id}/explain).  The judgement is
// the kernel's, step for step, in the order of bpf/lib/sock_addr.h's
// egr_sock_addr_judge and bpf/lib/verdict.h's egr_judge_use:
//   1. the DNS redirect: TCP/UDP to port 53 goes to the sandbox's endpoint
//      (refused without one), and a DNS endpoint named directly is refused;
//   1b. loopback of the sandbox's own netns passes;
//   2. protected ranges (an IPv6 form carrying a protected IPv4 address is
//      protected: lib/addr.h's egr_addr_embedded_v4);
//   3. allowed CIDRs with their ports (what the longest-prefix entries
//      BuildAllowEntries folds allow: any entry containing the address that
//      allows the port; port 0 only where every port is allowed);
//   4. addresses the DNS proxy learned for the sandbox, unexpired;
//   5. the policy's default; an audit-only policy lets a default denial
//      through as would-deny.
// Learned addresses come in as data: this layer knows nothing of BPF maps.
// What needs the caller's socket (SO_BINDTODEVICE sending loopback out of a
// real link) is named in a note, not judged.
#ifndef EGRESSD_USERSPACE_POLICY_EXPLAIN_H_
#define EGRESSD_USERSPACE_POLICY_EXPLAIN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "userspace/common/enum_names.h"
#include "userspace/net/ip.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::policy {

enum class Proto { kTcp, kUdp };
inline constexpr EnumNames<Proto, 2> kProtoNames{{{{Proto::kTcp, "tcp"}, {Proto::kUdp, "udp"}}}};
static_assert(kProtoNames.Unique());
absl::StatusOr<Proto> ParseProto(std::string_view text);

// One address the DNS proxy learned for the sandbox.
struct LearnedAddress {
  net::IpAddr addr;
  std::vector<std::string> rules;  // the policy's rules that learned it ("api.example.com", "*.example.com")
  int64_t expires_in_ms = 0;       // <= 0: expired (a new connection is not let through)
};

struct DnsEndpoint {
  net::IpAddr addr;
  uint16_t port = 0;
};

struct ExplainQuery {
  net::IpAddr dest;
  uint16_t port = 0;
  Proto proto = Proto::kTcp;
  // The sandbox's own DNS endpoint per family (none: its queries are refused).
  std::optional<DnsEndpoint> dns4, dns6;
  // Every DNS endpoint of the node (a sandbox naming one directly is refused).
  std::vector<DnsEndpoint> node_endpoints;
  std::vector<LearnedAddress> learned;
  // Whether the sandbox runs in a network namespace of its own (a pod's):
  // its loopback is then its own and passes before the policy; nullopt: not
  // known (judged as in the node's, with a note).
  std::optional<bool> own_netns;
};

// The step that decided, named as the kernel's enum egr_reason (audit records
// carry the same names).
enum class ExplainStep { kDnsRedirect, kDnsRefused, kOwnLoopback, kProtected, kAllowed, kResolved, kDefault };
inline constexpr EnumNames<ExplainStep, 7> kExplainStepNames{{{
    {ExplainStep::kDnsRedirect, "dns_redirect"},
    {ExplainStep::kDnsRefused, "dns_refused"},
    {ExplainStep::kOwnLoopback, "own_loopback"},
    {ExplainStep::kProtected, "protected"},
    {ExplainStep::kAllowed, "allowed"},
    {ExplainStep::kResolved, "resolved"},
    {ExplainStep::kDefault, "default"},
}}};
static_assert(kExplainStepNames.Unique());

struct Explanation {
  bool allowed = false;     // the connect goes through (a would-deny does)
  bool would_deny = false;  // audit-only: a denial let through and recorded
  ExplainStep step = ExplainStep::kDefault;
  std::string deny_action;  // "reject" or "drop" when denied, else empty
  net::IpAddr judged;       // the address as judged (unspecified: loopback)
  std::optional<net::IpAddr> embedded_v4;  // the IPv4 address a protected range matched inside an IPv6 form
  std::optional<net::Cidr> cidr;            // the protected or allowed prefix
  std::vector<PortRange> ports;             // the allowed entry's ports (empty: every port)
  std::string source;                       // where that entry came from (floor, task, platform setting...)
  std::optional<LearnedAddress> learned;    // the learned address that let it through, or one that expired
  std::optional<DnsEndpoint> endpoint;      // where a redirected query goes
  std::string why;                          // one sentence
  std::vector<std::string> notes;

  std::string ToText() const;
};

Explanation Explain(const CompiledPolicy& p, const ExplainQuery& q);

// "192.0.2.1", "192.0.2.1:443", "[2001:db8::1]:443", "2001:db8::1"; the port
// is nullopt when none was given.  InvalidArgument naming the value.
absl::StatusOr<std::pair<net::IpAddr, std::optional<uint16_t>>> ParseDestination(std::string_view text);

}  // namespace egressd::policy

#endif  // EGRESSD_USERSPACE_POLICY_EXPLAIN_H_
