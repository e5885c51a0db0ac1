// DNS messages on the wire, parsed and built with libknot: the one place the
// proxy touches bytes a client or an upstream chose.  A client query is parsed
// into Query (only what the proxy keeps of it); everything that leaves the
// proxy is built afresh from a Query, never by relaying the bytes that came in.
#ifndef EGRESSD_USERSPACE_DNS_MESSAGE_H_
#define EGRESSD_USERSPACE_DNS_MESSAGE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

struct knot_pkt;

namespace egressd::dns {

using Bytes = std::vector<uint8_t>;

inline constexpr uint16_t kClassIn = 1;
inline constexpr uint16_t kTypeA = 1;
inline constexpr uint16_t kTypeCname = 5;
inline constexpr uint16_t kTypeSoa = 6;
inline constexpr uint16_t kTypeAaaa = 28;
inline constexpr uint16_t kTypeOpt = 41;
inline constexpr uint16_t kTypeSvcb = 64;
inline constexpr uint16_t kTypeHttps = 65;

inline constexpr uint8_t kRcodeNoError = 0;
inline constexpr uint8_t kRcodeFormErr = 1;
inline constexpr uint8_t kRcodeServFail = 2;
inline constexpr uint8_t kRcodeNxDomain = 3;
inline constexpr uint8_t kRcodeNotImp = 4;

// Without EDNS a UDP answer is at most 512 bytes (RFC 1035); with it the
// client's advertised size, capped where fragmentation starts to bite
// (DNS flag day 2020).
inline constexpr uint16_t kClassicUdpSize = 512;
inline constexpr uint16_t kMaxUdpPayload = 1232;
inline constexpr size_t kMaxMessage = 65535;

struct PktDeleter {
  void operator()(knot_pkt* p) const;
};
using PktPtr = std::unique_ptr<knot_pkt, PktDeleter>;

// A client query the proxy accepted: one question of class IN, opcode QUERY.
struct Query {
  uint16_t id = 0;
  bool rd = false;
  bool cd = false;
  Bytes qname_wire;   // the question name exactly as the client wrote it (0x20 case)
  std::string qname;  // lower-case text, no trailing dot; "" for the root
  uint16_t qtype = 0;
  uint16_t qclass = kClassIn;
  bool edns = false;
  uint16_t udp_payload = kClassicUdpSize;  // what the client can take over UDP
  bool dnssec_ok = false;
};

// Why a message is not a query the proxy answers from policy.
enum class Refusal {
  kDrop,     // not a query at all (too short, a response): never answered
  kFormErr,  // malformed, or not exactly one question
  kNotImp,   // an opcode other than QUERY, a class other than IN, a zone transfer
};

struct ParsedQuery {
  std::optional<Query> query;  // set when accepted
  Refusal refusal = Refusal::kDrop;
  // For a refusal that is answered: the header fields to echo, and the
  // question when there was exactly one that parsed.
  uint16_t id = 0;
  uint8_t opcode = 0;
  bool rd = false;
  std::optional<Query> question;
  std::string why;  // for the debug log
};

ParsedQuery ParseQuery(std::span<const uint8_t> wire);

// A message from an upstream, parsed; nullptr when it does not parse.
PktPtr ParseMessage(std::span<const uint8_t> wire);
// Only its header and question (a truncated answer's records may be cut).
PktPtr ParseQuestionOnly(std::span<const uint8_t> wire);

// The query egressd sends upstream for `q`: a fresh ID (the transport sets
// its own), the question in lower case, RD and CD as asked, and EDNS only when
// the client used it (its buffer size, DO as asked, no options, so no client
// subnet or cookie leaves).
Bytes BuildUpstreamQuery(const Query& q);

// Lower-case text of a wire name ("www.example.com", "" for the root).
std::string NameText(const uint8_t* wire_name);

// Builds one message into a buffer of at most `max_size` bytes.  An OPT
// record's room is reserved up front, so whatever fits leaves room for it.
class MessageWriter {
 public:
  MessageWriter(size_t max_size);
  ~MessageWriter();
  MessageWriter(const MessageWriter&) = delete;
  MessageWriter& operator=(const MessageWriter&) = delete;

  // The header of an answer to `q` (QR, RA, RD/CD echoed) and its question
  // in the client's case.  False when not even that fits.
  bool StartAnswer(const Query& q, uint8_t rcode);
  // A header without a question (FORMERR of an unparsable query).
  void StartHeaderOnly(uint16_t id, uint8_t opcode, bool rd, uint8_t rcode);
  // Reserves the OPT record: payload size, DO, and an extended error
  // (RFC 8914) when ede_code >= 0.  Call before any record.
  bool ReserveOpt(uint16_t payload, bool dnssec_ok, int ede_code = -1, const std::string& ede_text = {});
  // 0 answer, 1 authority, 2 additional, in that order.
  bool BeginSection(int section);
  // One record; false when it does not fit (nothing of it is written).
  bool Put(const uint8_t* owner, uint16_t type, uint16_t rclass, uint32_t ttl,
           std::span<const uint8_t> rdata);
  void SetFlags(bool aa, bool ad, bool tc);
  // The finished message (writes the OPT record).
  Bytes Finish();

 private:
  Bytes buf_;
  knot_pkt* pkt_ = nullptr;
  struct Opt;
  std::unique_ptr<Opt> opt_;
};

}  // namespace egressd::dns

#endif  // EGRESSD_USERSPACE_DNS_MESSAGE_H_
