// Test helpers: DNS messages built and read with libknot directly (not with
// the proxy's own writer), so the tests judge the proxy's bytes
// independently.
#pragma once

#include "userspace/dns/knot.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "userspace/dns/learner.h"
#include "userspace/net/ip.h"

namespace egressd::dns::testing {

using Bytes = std::vector<uint8_t>;

struct QueryOpts {
  uint16_t id = 0x1234;
  uint16_t qtype = KNOT_RRTYPE_A;
  uint16_t qclass = KNOT_CLASS_IN;
  bool edns = false;
  uint16_t payload = 1232;
  bool dnssec_ok = false;
  bool rd = true;
  bool cd = false;
  uint8_t opcode = 0;
  bool client_subnet = false;  // an ECS option (which must not be forwarded)
};

Bytes MakeQuery(const std::string& name, const QueryOpts& o = {});

struct Rr {
  int section = 0;  // 0 answer, 1 authority, 2 additional
  std::string owner;
  uint16_t type = KNOT_RRTYPE_A;
  uint32_t ttl = 60;
  std::string value;  // A/AAAA: address; CNAME/NS: name; HTTPS: "hint4,hint4|hint6"
  uint16_t rclass = KNOT_CLASS_IN;
};

// An upstream answer to the question of `query` (its ID, its question).
Bytes MakeAnswer(const Bytes& query, const std::vector<Rr>& rrs, uint8_t rcode = 0, bool tc = false);

struct Seen {
  std::string owner;  // lower-case text, no trailing dot
  uint16_t type;
  std::string value;  // address text, or name text
  uint32_t ttl;
  int section;
};

struct Parsed {
  bool ok = false;
  uint16_t id = 0;
  bool qr = false, tc = false, rd = false, ra = false;
  uint8_t rcode = 0;
  uint16_t qdcount = 0;
  Bytes qname_wire;
  uint16_t qtype = 0;
  bool edns = false;
  uint16_t payload = 0;
  int ede_code = -1;
  std::string ede_text;
  bool has_ecs = false;
  std::vector<Seen> records;
  std::vector<std::string> Addresses() const;
};

Parsed Parse(const Bytes& wire);

// A sink that remembers what it was told and fails the addresses it is told to.
class FakeSink : public LearnedAddressSink {
 public:
  struct Entry {
    uint64_t sandbox;
    std::string addr;
    uint64_t expires;
    uint32_t name_id;
  };
  absl::Status Learn(uint64_t sandbox, const net::IpAddr& addr, uint64_t expires, uint32_t name_id) override;
  // Drops every learned entry of (sandbox, addr); NotFound when none.
  absl::Status Forget(uint64_t sandbox, const net::IpAddr& addr) override;
  // Whether `in_use` names the address.
  absl::StatusOr<bool> InUse(uint64_t sandbox, const net::IpAddr& addr) const override;
  std::vector<Entry> learned;
  std::vector<Entry> forgotten;
  std::vector<std::string> in_use;  // addresses a flow holds
  std::vector<std::string> fail;  // addresses whose write fails (ENOSPC-like)
  std::vector<std::string> Addresses() const;
};

}  // namespace egressd::dns::testing
