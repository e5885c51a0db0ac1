// The exporter's fast encoder (userspace/audit/line_encoder.cc) against the
// nlohmann-built records it replaces on the hot path: byte for byte, over a
// table of records that walks every kind, action, reason, protocol, flag bit,
// address form and label shape, and text that needs escaping or is not UTF-8.
#include <cstring>
#include <ctime>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "userspace/audit/record.h"

namespace egressd::audit {
namespace {

egr_event Base() {
  egr_event e{};
  e.key.sandbox_id = 4242;
  e.key.kind = EGR_EVENT_CONNECT;
  e.key.action = 1;
  e.key.reason = EGR_REASON_DEFAULT;
  e.key.family = 2;
  e.key.protocol = 6;
  e.key.dport = 443;
  e.key.daddr[10] = e.key.daddr[11] = 0xff;
  e.key.daddr[12] = 192, e.key.daddr[13] = 0, e.key.daddr[14] = 2, e.key.daddr[15] = 10;
  e.task.cgroup_id = 4243;
  e.task.tgid = 77;
  e.task.pid = 78;
  e.task.uid = 1000;
  e.task.gid = 1001;
  std::strcpy(e.task.comm, "curl");
  e.flags = EGR_EVENT_HAS_TASK | EGR_EVENT_HAS_UID;
  e.cpu = 1;
  e.seq = 99;
  e.boot_ns = 14762255597658ull;
  return e;
}

std::vector<std::optional<SandboxInfo>> Sandboxes() {
  std::vector<std::optional<SandboxInfo>> out;
  out.push_back(std::nullopt);
  out.push_back(SandboxInfo{});
  out.push_back(SandboxInfo{{{"pod", "web-1"}, {"namespace", "ci"}, {"task", "T-17"}, {"run", "r9"}}});
  out.push_back(SandboxInfo{{{"pod", "only-pod"}}});
  out.push_back(SandboxInfo{{{"namespace", "only-ns"}, {"Zeta", "upper"}, {"a\"b", "c\\d\n\x01"}}});
  out.push_back(SandboxInfo{{{"run", "caf\xc3\xa9"}, {"task", "bad\xff\xfeutf8"}, {"x", "\x7f"}}});
  // match.name: the rules behind the name ids the table's records carry.
  out.push_back(SandboxInfo{{{"pod", "named"}}, {{77u, "api.example.com"}, {0xffffffffu, "*.ex\"ample.net"}}});
  return out;
}

std::vector<egr_event> Events() {
  std::vector<egr_event> out;
  for (uint8_t kind = 0; kind <= 4; ++kind) {
    for (uint8_t action = 0; action <= 3; ++action) {
      for (int reason = 0; reason < 40; ++reason) {
        egr_event e = Base();
        e.key.kind = kind;
        e.key.action = action;
        e.key.reason = static_cast<uint8_t>(reason);
        out.push_back(e);
      }
    }
  }
  egr_event e = Base();
  e.key.reason = 255;
  out.push_back(e);
  for (int proto : {0, 1, 6, 17, 33, 58, 132, 136, 41, 255}) {
    for (int dport : {0, 1, 65535}) {
      egr_event p = Base();
      p.key.protocol = static_cast<uint8_t>(proto);
      p.key.dport = static_cast<uint16_t>(dport);
      out.push_back(p);
    }
  }
  for (int bit = 0; bit < 16; ++bit) {
    for (uint16_t also : {0, 1, 2, 3}) {
      egr_event f = Base();
      f.flags = static_cast<uint16_t>((1u << bit) | also);
      out.push_back(f);
    }
  }
  egr_event none = Base();
  none.flags = 0;
  out.push_back(none);
  // Address forms: v4 named as v4 and as mapped v6, v6, the backstop's
  // unreadable header (family 0), all-zero and all-ones.
  egr_event mapped = Base();
  mapped.key.family = 10;
  out.push_back(mapped);
  egr_event v6 = Base();
  v6.key.family = 10;
  const uint8_t doc6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  std::memcpy(v6.key.daddr, doc6, 16);
  out.push_back(v6);
  egr_event zero = Base();
  std::memset(zero.key.daddr, 0, 16);
  zero.key.family = 10;
  out.push_back(zero);
  egr_event ones = Base();
  std::memset(ones.key.daddr, 0xff, 16);
  out.push_back(ones);
  egr_event unread = Base();
  unread.key.family = 0;
  unread.key.kind = EGR_EVENT_BACKSTOP;
  out.push_back(unread);
  // tc records: an interface (the smallest and largest index), no task.
  for (uint32_t ifindex : {1u, ~0u}) {
    egr_event tc = Base();
    tc.key.kind = EGR_EVENT_TC;
    tc.key.ifindex = ifindex;
    tc.flags = 0;
    tc.task = {};
    out.push_back(tc);
  }
  // Comms: full 16 bytes without NUL, escapes, control bytes, not UTF-8.
  for (const char* comm : {"", "a\nb", "q\"uote\\", "\t\b\f\r\x1f", "\xc3\xa9t\xc3\xa9", "\xff\xfe", "0123456789abcdef"}) {
    egr_event c = Base();
    std::memset(c.task.comm, 0, sizeof(c.task.comm));
    std::memcpy(c.task.comm, comm, std::min(std::strlen(comm), sizeof(c.task.comm)));
    out.push_back(c);
  }
  egr_event matched = Base();
  matched.key.reason = EGR_REASON_RESOLVED;
  matched.match_id = 0xffffffffu;
  out.push_back(matched);
  // match: the CIDR an allowed or protected entry matched (v4, v4 named as
  // mapped v6, v6, the IPv4 embedded in a v6 destination, lengths 0 and
  // full, one a family cannot have), with and without a name id; and every
  // match_flags bit.
  for (uint8_t reason : {uint8_t(EGR_REASON_ALLOWED), uint8_t(EGR_REASON_PROTECTED), uint8_t(EGR_REASON_RESOLVED)}) {
    for (int plen : {0, 1, 8, 24, 31, 32, 33, 64, 127, 128, 200}) {
      for (int form = 0; form < 4; ++form) {
        egr_event m = Base();
        m.key.reason = reason;
        m.match_plen = static_cast<uint8_t>(plen);
        m.match_flags = EGR_MATCH_CIDR;
        if (form == 1) m.key.family = 10;
        if (form == 2) {
          m.key.family = 10;
          std::memcpy(m.key.daddr, doc6, 16);
        }
        if (form == 3) {
          m.key.family = 10;
          std::memcpy(m.key.daddr, doc6, 16);
          m.match_flags |= EGR_MATCH_CIDR_EMBEDDED_V4;
          m.match_id = 0x0a0200c0u;  // 192.0.2.10, network order
        }
        if (reason == EGR_REASON_RESOLVED && form != 3) m.match_id = 77;
        out.push_back(m);
      }
    }
  }
  for (int f = 0; f < 256; ++f) {
    egr_event m = Base();
    m.key.reason = EGR_REASON_ALLOWED;
    m.match_plen = 16;
    m.match_flags = static_cast<uint8_t>(f);
    m.match_id = 0x01020304u;
    out.push_back(m);
  }
  egr_event big = Base();
  big.seq = ~0ull;
  big.boot_ns = ~0ull / 4;
  big.cpu = ~0u;
  big.task.cgroup_id = ~0ull;
  big.key.sandbox_id = ~0ull;
  out.push_back(big);
  return out;
}

// What the exporter adds: ids in the sandbox's pid namespace (either, both,
// none; 0 and the largest) and the names a destination was learned for.
std::vector<Enrichment> Enrichments() {
  std::vector<Enrichment> out(1);
  out.push_back(Enrichment{1, 2, {}});
  out.push_back(Enrichment{0, std::nullopt, {}});
  out.push_back(Enrichment{std::nullopt, ~0u, {}});
  out.push_back(Enrichment{std::nullopt, std::nullopt, {"api.example.com"}});
  out.push_back(Enrichment{7, 8, {"a.example.net", "b.ex\"ample.net", "caf\xc3\xa9.example", "\xff.bad"}});
  out.push_back(Enrichment{std::nullopt, std::nullopt, {}, "egl-1234-p0"});
  out.push_back(Enrichment{std::nullopt, std::nullopt, {"api.example.com"}, "we\"ird\n"});
  return out;
}

TEST(AuditEncoder, EventLinesAreTheSameBytesAsNlohmanns) {
  const uint64_t times[] = {0, 1764591378024190179ull, 1764591378999999999ull, 4102444800000000001ull};
  int compared = 0;
  std::string fast;
  for (const auto& sb : Sandboxes()) {
    for (const egr_event& e : Events()) {
      const EncodedSandbox enc = EncodeSandbox(e.key.sandbox_id, sb);
      for (uint64_t t : times) {
        for (const Enrichment& x : Enrichments()) {
          nlohmann::json j = EventJson(e, t, sb, x);
          const std::string slow = Line(j, e.seq + 7);
          fast.clear();
          AppendEventLine(fast, e, t, enc, e.seq + 7, x);
          ASSERT_EQ(fast, slow) << "kind " << int(e.key.kind) << " action " << int(e.key.action) << " reason "
                                << int(e.key.reason) << " flags " << e.flags;
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 4000);
}

TEST(AuditEncoder, EnrichmentLandsWhereItBelongs) {
  egr_event e = Base();
  const Enrichment x{5, 6, {"api.example.com"}};
  nlohmann::json j = EventJson(e, 1, std::nullopt, x);
  EXPECT_EQ(j["process"]["ns_pid"], 5);
  EXPECT_EQ(j["process"]["ns_tid"], 6);
  EXPECT_EQ(j["process"]["pid"], 77);  // the node's, unchanged
  EXPECT_EQ(j["destination_names"], nlohmann::json::array({"api.example.com"}));
  // A record without a task (a backstop drop) names no pid in any namespace.
  e.flags = EGR_EVENT_HAS_UID;
  j = EventJson(e, 1, std::nullopt, x);
  EXPECT_FALSE(j["process"].contains("ns_pid"));
  EXPECT_FALSE(j["process"].contains("pid"));
  // A tc record names its interface (index, and the name when known) and
  // no process.
  e.key.kind = EGR_EVENT_TC;
  e.key.ifindex = 42;
  e.flags = 0;
  j = EventJson(e, 1, std::nullopt, Enrichment{std::nullopt, std::nullopt, {}, "egl-1-p0"});
  EXPECT_EQ(j["type"], "tc");
  EXPECT_EQ(j["interface"]["index"], 42);
  EXPECT_EQ(j["interface"]["name"], "egl-1-p0");
  EXPECT_FALSE(j.contains("process"));
  j = EventJson(e, 1, std::nullopt, {});
  EXPECT_EQ(j["interface"], nlohmann::json({{"index", 42}}));
  e.key.ifindex = 0;
  EXPECT_FALSE(EventJson(e, 1, std::nullopt, {}).contains("interface"));
}

TEST(AuditEncoder, SummaryLinesAreTheSameBytesAsNlohmanns) {
  std::string fast;
  for (const auto& sb : Sandboxes()) {
    for (const egr_event& e : Events()) {
      egr_fold_val v{};
      v.task = e.task;
      v.flags = e.flags;
      v.match_id = e.match_id;
      v.match_plen = e.match_plen;
      v.match_flags = e.match_flags;
      for (uint64_t count : {1ull, 99999ull, ~0ull}) {
        v.count = count;
        v.first_boot_ns = e.boot_ns;
        const uint64_t first = 1764591378033059349ull, now = 1764591378745010386ull;
        for (const Enrichment& x : Enrichments()) {
          nlohmann::json j = SummaryJson(e.key, v, first, now, sb, x);
          const std::string slow = Line(j, 12345);
          fast.clear();
          AppendSummaryLine(fast, e.key, v, first, now, EncodeSandbox(e.key.sandbox_id, sb), 12345, x);
          ASSERT_EQ(fast, slow);
        }
      }
    }
  }
}

TEST(AuditEncoder, StringsEscapeAsNlohmannDumps) {
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  for (const std::string& s : {std::string(), std::string("plain"), all, std::string("\xe2\x82\xac ok"),
                              std::string("\xe2\x82 cut"), std::string(1, '\0')}) {
    std::string fast;
    AppendJsonString(fast, s);
    EXPECT_EQ(fast, nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
}

// A record's `time`: RFC 3339 in UTC with nine digits of nanoseconds, the
// same bytes as strftime and a %09u, whatever second came before (the date
// part is kept from the previous call while the second is the same).
std::string ReferenceTime(uint64_t ns) {
  const time_t secs = static_cast<time_t>(ns / 1000000000ull);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char date[64], out[96];
  strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out, sizeof(out), "%s.%09uZ", date, static_cast<unsigned>(ns % 1000000000ull));
  return out;
}

TEST(AuditTime, IsRfc3339WithNanosecondsWhateverCameBefore) {
  const uint64_t s = 1000000000ull;
  const std::vector<uint64_t> times = {
      0,                                  // the epoch
      1,                                  // one ns: eight leading zeros
      999999999,                          // the last ns of a second
      s,                                  // the next second, same thread: the date part is redone
      1764799241ull * s + 123456789,      // 2025-12-03T22:00:41
      1764799241ull * s + 987654321,      // the same second again: the kept part
      1764799242ull * s,                  // one later
      1764799241ull * s + 5,              // back to the earlier second
      951782400ull * s + 42,              // 2000-02-29
      4102444799ull * s + 999999999,      // 2099-12-31T23:59:59
      2147483648ull * s,                  // past 2038's 32-bit limit
  };
  for (uint64_t t : times) EXPECT_EQ(FormatTime(t), ReferenceTime(t)) << t;
  EXPECT_EQ(FormatTime(1764799241ull * s + 7), "2025-12-03T22:00:41.000000007Z");
}

}  // namespace
}  // namespace egressd::audit
