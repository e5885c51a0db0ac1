// The exporter's hot path: kernel records straight into a reusable buffer,
// the same bytes as Line(EventJson(...), seq) / Line(SummaryJson(...), seq)
// (nlohmann's dump: keys sorted, no spaces, control characters escaped,
// invalid UTF-8 replaced), with no JSON object built per record.  Keys are
// written in nlohmann's order (std::map<std::string>, byte order:
// upper case first).  tests/unit/audit_encoder_test.cc compares the two
// over a table of records; a field added to EventJson must be added here.
#include <arpa/inet.h>

#include <array>
#include <cstring>

#include <fmt/format.h>

#include "userspace/audit/record.h"
#include "userspace/audit/record_names.h"

namespace egressd::audit {
namespace {

constexpr uint8_t kAfInet = 2;

// ReasonName depends on (backstop or not, allowed or not, reason): built
// once, already escaped and quoted.
const std::string& QuotedReason(uint8_t kind, uint8_t action, uint8_t reason) {
  static const auto* table = [] {
    auto* t = new std::array<std::string, 4 * 256>;
    for (int b = 0; b < 2; ++b) {
      for (int a = 0; a < 2; ++a) {
        for (int r = 0; r < 256; ++r) {
          std::string q;
          AppendJsonString(q, ReasonName(b ? EGR_EVENT_BACKSTOP : EGR_EVENT_CONNECT, a ? 1 : 0,
                                         static_cast<uint8_t>(r)));
          (*t)[(b * 2 + a) * 256 + r] = std::move(q);
        }
      }
    }
    return t;
  }();
  return (*table)[((kind == EGR_EVENT_BACKSTOP) * 2 + (action != 0)) * 256 + reason];
}

void Append(std::string& out, std::string_view s) { out.append(s.data(), s.size()); }

void AppendU64(std::string& out, uint64_t v) {
  char buf[20];
  char* p = buf + sizeof(buf);
  do {
    *--p = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  out.append(p, buf + sizeof(buf) - p);
}

void AppendTime(std::string& out, uint64_t realtime_ns) {
  out.push_back('"');
  AppendRfc3339(out, realtime_ns);
  out.push_back('"');
}

void AppendIp(std::string& out, const egr_event_key& k) {
  const uint8_t* b = k.daddr;
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  const bool v4 = std::memcmp(b, kMapped, 12) == 0;
  Append(out, "\"IP\":{\"destination\":\"");
  if (v4) {
    for (int i = 12; i < 16; ++i) {
      if (i > 12) out.push_back('.');
      AppendU64(out, b[i]);
    }
  } else {
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(AF_INET6, b, buf, sizeof(buf));
    out.append(buf);
  }
  Append(out, v4 ? "\",\"ipVersion\":\"IPv4\"" : "\",\"ipVersion\":\"IPv6\"");
  if (k.family != kAfInet && v4) Append(out, ",\"v4_mapped\":true");
  Append(out, "},");
}

void AppendL4(std::string& out, const egr_event_key& k) {
  const char* l4 = L4Name(k.protocol);
  Append(out, "\"l4\":{");
  if (l4) {
    out.push_back('"');
    out.append(l4);
    Append(out, "\":{");
    if (k.dport) {
      Append(out, "\"destination_port\":");
      AppendU64(out, k.dport);
    }
    out.push_back('}');
  } else {
    Append(out, "\"protocol\":");
    AppendU64(out, k.protocol);
  }
  Append(out, "},");
}

void AppendProcess(std::string& out, const egr_event_task& t, uint16_t flags, const Enrichment& x) {
  const bool task = flags & EGR_EVENT_HAS_TASK, uid = flags & EGR_EVENT_HAS_UID;
  if (!task && !uid) return;
  Append(out, "\"process\":{");
  if (task) {
    Append(out, "\"binary\":");
    AppendJsonString(out, std::string_view(t.comm, strnlen(t.comm, sizeof(t.comm))));
    if (uid) {
      Append(out, ",\"gid\":");
      AppendU64(out, t.gid);
    }
    if (x.ns_pid) {
      Append(out, ",\"ns_pid\":");
      AppendU64(out, *x.ns_pid);
    }
    if (x.ns_tid) {
      Append(out, ",\"ns_tid\":");
      AppendU64(out, *x.ns_tid);
    }
    Append(out, ",\"pid\":");
    AppendU64(out, t.tgid);
    Append(out, ",\"tid\":");
    AppendU64(out, t.pid);
    if (uid) out.push_back(',');
  }
  if (uid) {
    Append(out, "\"uid\":");
    AppendU64(out, t.uid);
  }
  Append(out, "},");
}

// What every kernel record has between "l4"/"match" and "seq", and after it.
void AppendTail(std::string& out, const egr_event_key& k, const EncodedSandbox& sb, const egr_event_task& t,
                uint16_t flags, uint64_t seq, const Enrichment& x) {
  Append(out, sb.pod);
  AppendProcess(out, t, flags, x);
  Append(out, "\"reason\":");
  Append(out, QuotedReason(k.kind, k.action, k.reason));
  out.push_back(',');
  Append(out, sb.run);
  Append(out, sb.sandbox);
  Append(out, "\"schema\":\"egressd.audit/v1\",\"seq\":");
  AppendU64(out, seq);
  out.push_back(',');
}

void AppendKindAndVerdict(std::string& out, const egr_event_key& k) {
  Append(out, "\"type\":\"");
  out.append(KindName(k.kind));
  Append(out, "\",\"verdict\":\"");
  out.append(VerdictName(k.action));
  Append(out, "\"}");
}

void AppendNames(std::string& out, const Enrichment& x) {
  if (x.destination_names.empty()) return;
  Append(out, "\"destination_names\":[");
  for (size_t i = 0; i < x.destination_names.size(); ++i) {
    if (i) out.push_back(',');
    AppendJsonString(out, x.destination_names[i]);
  }
  Append(out, "],");
}

// As record.cc's PutInterface: {"index":N,"name":"..."}.
void AppendInterface(std::string& out, const egr_event_key& k, const Enrichment& x) {
  if (k.ifindex == 0) return;
  Append(out, "\"interface\":{\"index\":");
  AppendU64(out, k.ifindex);
  if (x.interface_name) {
    Append(out, ",\"name\":");
    AppendJsonString(out, *x.interface_name);
  }
  Append(out, "},");
}

// As record.cc's PutMatch: {"cidr":...,"name_id":...}, keys in order.
void AppendMatch(std::string& out, const egr_event_key& k, uint8_t plen, uint8_t mflags, uint32_t match_id,
                 const EncodedSandbox& sb) {
  const bool name = k.reason == EGR_REASON_RESOLVED && match_id;
  const std::optional<std::string> cidr = MatchCidr(k, plen, mflags, match_id);
  if (!name && !cidr) return;
  Append(out, "\"match\":{");
  if (cidr) {
    Append(out, "\"cidr\":");
    AppendJsonString(out, *cidr);
    if (name) out.push_back(',');
  }
  if (name) {
    if (auto it = sb.names.find(match_id); it != sb.names.end()) {
      Append(out, "\"name\":");
      AppendJsonString(out, it->second);
      out.push_back(',');
    }
    Append(out, "\"name_id\":");
    AppendU64(out, match_id);
  }
  Append(out, "},");
}

}  // namespace

void AppendJsonString(std::string& out, std::string_view s) {
  bool plain = true, ascii = true;
  for (unsigned char c : s) {
    if (c >= 0x80) {
      ascii = false;
      break;
    }
    if (c < 0x20 || c == '"' || c == '\\') plain = false;
  }
  if (!ascii) {
    // nlohmann's own UTF-8 check and replacement, for the rare non-ASCII text.
    Append(out, nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return;
  }
  out.push_back('"');
  if (plain) {
    Append(out, s);
  } else {
    for (unsigned char c : s) {
      switch (c) {
        case '"': Append(out, "\\\""); break;
        case '\\': Append(out, "\\\\"); break;
        case '\b': Append(out, "\\b"); break;
        case '\f': Append(out, "\\f"); break;
        case '\n': Append(out, "\\n"); break;
        case '\r': Append(out, "\\r"); break;
        case '\t': Append(out, "\\t"); break;
        default:
          if (c < 0x20) {
            fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
    }
  }
  out.push_back('"');
}

EncodedSandbox EncodeSandbox(uint64_t sandbox_id, const std::optional<SandboxInfo>& sb) {
  EncodedSandbox e;
  e.id = sandbox_id;
  if (sb) e.names = sb->names;
  e.sandbox = "\"sandbox\":{\"id\":";
  AppendU64(e.sandbox, sandbox_id);
  if (sb) {
    Append(e.sandbox, ",\"labels\":{");
    bool first = true;
    for (const auto& [k, v] : sb->labels) {
      if (!first) e.sandbox.push_back(',');
      first = false;
      AppendJsonString(e.sandbox, k);
      e.sandbox.push_back(':');
      AppendJsonString(e.sandbox, v);
    }
    e.sandbox.push_back('}');
    auto pod = sb->labels.find("pod");
    auto ns = sb->labels.find("namespace");
    if (pod != sb->labels.end() || ns != sb->labels.end()) {
      e.pod = "\"pod\":{";
      if (pod != sb->labels.end()) {
        Append(e.pod, "\"name\":");
        AppendJsonString(e.pod, pod->second);
        if (ns != sb->labels.end()) e.pod.push_back(',');
      }
      if (ns != sb->labels.end()) {
        Append(e.pod, "\"namespace\":");
        AppendJsonString(e.pod, ns->second);
      }
      Append(e.pod, "},");
    }
    auto field = [&](const char* name, std::string& into) {
      auto it = sb->labels.find(name);
      if (it == sb->labels.end()) return;
      into.push_back('"');
      into.append(name);
      Append(into, "\":");
      AppendJsonString(into, it->second);
      into.push_back(',');
    };
    field("run", e.run);
    field("task", e.task);
  }
  Append(e.sandbox, "},");
  return e;
}

void AppendEventLine(std::string& out, const egr_event& e, uint64_t realtime_ns, const EncodedSandbox& sb,
                     uint64_t seq, const Enrichment& x) {
  const egr_event_key& k = e.key;
  out.push_back('{');
  if (k.family != 0) AppendIp(out, k);
  Append(out, "\"action\":\"");
  out.append(ActionName(k.action));
  Append(out, "\",\"cgroup_id\":");
  AppendU64(out, e.task.cgroup_id);
  Append(out, ",\"count\":1,");
  AppendNames(out, x);
  AppendInterface(out, k, x);
  Append(out, "\"kernel\":{\"boot_ns\":");
  AppendU64(out, e.boot_ns);
  Append(out, ",\"cpu\":");
  AppendU64(out, e.cpu);
  Append(out, ",\"seq\":");
  AppendU64(out, e.seq);
  Append(out, "},");
  if (k.family != 0) AppendL4(out, k);
  AppendMatch(out, k, e.match_plen, e.match_flags, e.match_id, sb);
  AppendTail(out, k, sb, e.task, e.flags, seq, x);
  Append(out, sb.task);
  Append(out, "\"time\":");
  AppendTime(out, realtime_ns);
  out.push_back(',');
  AppendKindAndVerdict(out, k);
}

void AppendSummaryLine(std::string& out, const egr_event_key& k, const egr_fold_val& v,
                       uint64_t first_realtime_ns, uint64_t now_realtime_ns, const EncodedSandbox& sb,
                       uint64_t seq, const Enrichment& x) {
  out.push_back('{');
  if (k.family != 0) AppendIp(out, k);
  Append(out, "\"action\":\"");
  out.append(ActionName(k.action));
  Append(out, "\",\"cgroup_id\":");
  AppendU64(out, v.task.cgroup_id);
  Append(out, ",\"count\":");
  AppendU64(out, v.count);
  out.push_back(',');
  AppendNames(out, x);
  Append(out, "\"first_time\":");
  AppendTime(out, first_realtime_ns);
  out.push_back(',');
  AppendInterface(out, k, x);
  if (k.family != 0) AppendL4(out, k);
  AppendMatch(out, k, v.match_plen, v.match_flags, v.match_id, sb);
  AppendTail(out, k, sb, v.task, v.flags, seq, x);
  Append(out, "\"summary\":true,");
  Append(out, sb.task);
  Append(out, "\"time\":");
  AppendTime(out, now_realtime_ns);
  out.push_back(',');
  AppendKindAndVerdict(out, k);
}

}  // namespace egressd::audit
