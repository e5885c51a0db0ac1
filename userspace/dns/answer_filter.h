// What of an upstream's answer the proxy learns and passes on.  Learned: the
// A/AAAA records (class IN, answer section) whose owner is the question name
// or on the CNAME chain that starts there (at most kMaxChain hops), and the
// ipv4hint/ipv6hint of HTTPS/SVCB records on that chain.  Never learned, and
// removed from the answer: addresses in the sandbox's protected ranges, and
// every other A/AAAA (an unrelated owner, the authority or additional
// section): no answer carries an address the kernel does not hold.
#ifndef EGRESSD_USERSPACE_DNS_ANSWER_FILTER_H_
#define EGRESSD_USERSPACE_DNS_ANSWER_FILTER_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "userspace/dns/message.h"
#include "userspace/net/ip.h"
#include "userspace/policy/compiled_policy.h"

namespace egressd::dns {

inline constexpr int kMaxChain = 8;

// One record of the upstream's answer, as the proxy will pass it on.
struct Record {
  int section = 0;  // 0 answer, 1 authority, 2 additional
  Bytes owner;      // wire form
  uint16_t type = 0;
  uint16_t rclass = 0;
  uint32_t ttl = 0;
  Bytes rdata;  // uncompressed (names in rdata are expanded by the parser)
  // The addresses this record carries (A/AAAA: one; HTTPS/SVCB: its hints).
  std::vector<net::IpAddr> addrs;
  bool learnable = false;  // on the chain, class IN, answer section
};

struct Candidate {
  net::IpAddr addr;
  uint32_t ttl = 0;  // the smallest TTL on the chain down to it
};

struct FilteredAnswer {
  uint8_t rcode = 0;
  bool aa = false, ad = false, tc = false;
  std::vector<Record> records;       // everything passed on, in order
  std::vector<Candidate> learn;      // distinct addresses to write, in order
  size_t protected_removed = 0;      // addresses in protected ranges dropped
  std::vector<net::IpAddr> protected_addrs;  // which (for the audit record)
  size_t out_of_chain_removed = 0;   // A/AAAA/hints not learnable, dropped
  int chain_length = 0;              // CNAME hops followed
};

// Whether a protected range holds `addr`, also through ::ffff:0:0/96 and
// 64:ff9b::/96 (an IPv6 address that reaches an IPv4 destination).
bool IsProtected(const net::IpAddr& addr, const std::vector<policy::ProtectedCidr>& prot);

// Nullopt when `upstream` is not an answer to `q` (not a response, another
// question).
std::optional<FilteredAnswer> FilterAnswer(const Query& q, const knot_pkt* upstream,
                                           const std::vector<policy::ProtectedCidr>& prot);

// Whether `upstream` answers `q`'s question (a response of opcode QUERY,
// same name in any case, same type and class).
bool AnswersQuestion(const Query& q, const knot_pkt* upstream);

// Drops every record that carries an address in `failed` (writes that did not
// land).  An HTTPS/SVCB record goes whole: its hints are not rewritten.
void RemoveAddresses(FilteredAnswer& a, const std::set<net::IpAddr>& failed);

// The client's answer: ID and question as it asked, `a`'s records, OPT when
// it used EDNS (with an extended error when ede_code >= 0).  Nullopt when it
// does not fit `max_size` (then TC).
std::optional<Bytes> BuildAnswer(const Query& q, const FilteredAnswer& a, size_t max_size, int ede_code = -1,
                                 const std::string& ede_text = {});

}  // namespace egressd::dns

#endif  // EGRESSD_USERSPACE_DNS_ANSWER_FILTER_H_
