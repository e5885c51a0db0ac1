#include "userspace/audit/record.h"
#include "userspace/audit/record_names.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <ctime>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "userspace/dns/scope.h"
#include "userspace/net/ip.h"

namespace egressd::audit {
namespace {

constexpr uint8_t kAfInet = 2;

const char* BareReason(uint8_t reason, uint8_t action) {
  switch (reason) {
    case EGR_REASON_NOT_SANDBOX: return "not-sandbox";
    case EGR_REASON_CONTAINED: return "contained-root";
    case EGR_REASON_NO_POLICY: return "no-policy";
    case EGR_REASON_PROTECTED: return "protected";
    case EGR_REASON_ALLOWED: return "allowed-cidr";
    case EGR_REASON_RESOLVED: return "resolved-name";
    case EGR_REASON_DEFAULT: return action == 0 ? "default-allow" : "default-deny";
    case EGR_REASON_OWN_LOOPBACK: return "own-loopback";
    case EGR_REASON_CONNECTED: return "connected";
    case EGR_REASON_INBOUND_TCP: return "inbound-tcp";
    case EGR_REASON_NOT_IP: return "not-ip";
    case EGR_REASON_MALFORMED: return "malformed";
    case EGR_REASON_ROUTING_HOP: return "routing-hop";
    case EGR_REASON_FAMILY: return "family";
    case EGR_REASON_FOREIGN_PEER: return "foreign-peer";
    case EGR_REASON_LOOPBACK_LEAVES: return "loopback-leaves";
    case EGR_REASON_UNRECORDED_OPEN: return "unrecorded-open";
    case EGR_REASON_DNS_REDIRECT: return "dns-redirect";
    case EGR_REASON_DNS_REFUSED: return "dns-refused";
    case EGR_REASON_DNS_ENDPOINT: return "dns-endpoint";
    case EGR_REASON_AUDIT_UNRECORDED: return "audit-unrecorded";
    case EGR_REASON_LINK_LOCAL: return "link-local";
    case EGR_REASON_FRAME: return "frame";
    case EGR_REASON_SPOOFED: return "spoofed";
    case EGR_REASON_FLOW: return "flow";
    case EGR_REASON_FLOW_UNTRACKED: return "flow-untracked";
  }
  return nullptr;
}

// `match`: the name id a resolved address was learned under, or the allowed
// or protected CIDR that matched: the destination (or the IPv4 form embedded
// in it) masked to the entry's own prefix length, which the kernel read from
// the entry's value (egressd_abi.h, EGR_LPM_PLEN_SET).
void PutMatch(nlohmann::json& j, const egr_event_key& k, uint8_t plen, uint8_t mflags, uint32_t match_id,
              const std::optional<SandboxInfo>& sandbox) {
  if (k.reason == EGR_REASON_RESOLVED && match_id) {
    j["match"]["name_id"] = match_id;
    if (sandbox) {
      if (auto it = sandbox->names.find(match_id); it != sandbox->names.end()) j["match"]["name"] = it->second;
    }
  }
  if (auto cidr = MatchCidr(k, plen, mflags, match_id)) j["match"]["cidr"] = *cidr;
}

void PutSandbox(nlohmann::json& j, uint64_t sandbox_id, const std::optional<SandboxInfo>& sb) {
  j["sandbox"]["id"] = sandbox_id;
  if (!sb) return;
  j["sandbox"]["labels"] = sb->labels;
  auto pod = sb->labels.find("pod");
  auto ns = sb->labels.find("namespace");
  if (pod != sb->labels.end()) j["pod"]["name"] = pod->second;
  if (ns != sb->labels.end()) j["pod"]["namespace"] = ns->second;
  for (const char* k : {"task", "run"}) {
    auto it = sb->labels.find(k);
    if (it != sb->labels.end()) j[k] = it->second;
  }
}

void PutNames(nlohmann::json& j, const Enrichment& x) {
  if (!x.destination_names.empty()) j["destination_names"] = x.destination_names;
}

// Hubble's `interface` of a tc record: the host-side veth it came in on.
void PutInterface(nlohmann::json& j, const egr_event_key& k, const Enrichment& x) {
  if (k.ifindex == 0) return;
  j["interface"]["index"] = k.ifindex;
  if (x.interface_name) j["interface"]["name"] = *x.interface_name;
}

void PutFlow(nlohmann::json& j, const egr_event_key& k) {
  j["type"] = KindName(k.kind);
  j["verdict"] = VerdictName(k.action);
  j["action"] = ActionName(k.action);
  j["reason"] = ReasonName(k.kind, k.action, k.reason);
  if (k.family == 0) return;  // a backstop drop whose header could not be read
  std::array<uint8_t, 16> b;
  __builtin_memcpy(b.data(), k.daddr, 16);
  const net::IpAddr dst = net::IpAddr::V6(b);
  j["IP"]["destination"] = dst.ToString();
  j["IP"]["ipVersion"] = dst.is_v4() ? "IPv4" : "IPv6";
  if (k.family != kAfInet && dst.is_v4()) j["IP"]["v4_mapped"] = true;
  const char* l4 = L4Name(k.protocol);
  if (l4) {
    j["l4"][l4] = nlohmann::json::object();
    if (k.dport) j["l4"][l4]["destination_port"] = k.dport;
  } else {
    j["l4"]["protocol"] = k.protocol;
  }
}

void PutTask(nlohmann::json& j, const egr_event_task& t, uint16_t flags, const Enrichment& x) {
  j["cgroup_id"] = t.cgroup_id;
  if (flags & EGR_EVENT_HAS_TASK) {
    j["process"]["pid"] = t.tgid;
    j["process"]["tid"] = t.pid;
    if (x.ns_pid) j["process"]["ns_pid"] = *x.ns_pid;
    if (x.ns_tid) j["process"]["ns_tid"] = *x.ns_tid;
    j["process"]["binary"] = std::string(t.comm, strnlen(t.comm, sizeof(t.comm)));
  }
  if (flags & EGR_EVENT_HAS_UID) {
    j["process"]["uid"] = t.uid;
    if (flags & EGR_EVENT_HAS_TASK) j["process"]["gid"] = t.gid;
  }
}

}  // namespace

const char* KindName(uint8_t kind) {
  switch (kind) {
    case EGR_EVENT_CONNECT: return "connect";
    case EGR_EVENT_SEND: return "send";
    case EGR_EVENT_BACKSTOP: return "backstop";
    case EGR_EVENT_TC: return "tc";
  }
  return "unknown";
}

const char* ActionName(uint8_t action) {
  switch (action) {
    case 0: return "pass";
    case 1: return "reject";
    case 2: return "drop";
    case 3: return "pass";  // would-deny: an audit-only sandbox's denial, let through
  }
  return "unknown";
}

const char* VerdictName(uint8_t action) {
  switch (action) {
    case 0: return "allow";
    case 3: return "would-deny";
  }
  return "deny";
}

const char* L4Name(uint8_t proto) {
  switch (proto) {
    case 6: return "TCP";
    case 17: return "UDP";
    case 136: return "UDPLite";
    case 132: return "SCTP";
    case 33: return "DCCP";
    case 1: return "ICMPv4";
    case 58: return "ICMPv6";
  }
  return nullptr;
}

std::map<uint32_t, std::string> NameRulesById(const policy::CompiledPolicy& policy) {
  std::map<uint32_t, std::string> out;
  for (const auto& r : policy.names) out.emplace(dns::NameId(r.name), r.name);
  for (const auto& r : policy.wildcard_suffixes) {
    std::string rule = "*." + r.name;
    out.emplace(dns::NameId(rule), std::move(rule));
  }
  return out;
}

std::optional<std::string> MatchCidr(const egr_event_key& k, uint8_t plen, uint8_t mflags, uint32_t match_id) {
  if (!(mflags & EGR_MATCH_CIDR) || k.family == 0) return std::nullopt;
  std::array<uint8_t, 16> b;
  __builtin_memcpy(b.data(), k.daddr, 16);
  net::IpAddr dst = net::IpAddr::V6(b);  // v4-mapped comes back as IPv4
  if (mflags & EGR_MATCH_CIDR_EMBEDDED_V4) {
    std::array<uint8_t, 4> v4;
    __builtin_memcpy(v4.data(), &match_id, 4);  // network order
    dst = net::IpAddr::V4(v4);
  }
  if (plen > dst.bits()) return std::nullopt;  // not a length this family has
  std::array<uint8_t, 16> m = dst.bytes();
  for (int bit = plen; bit < dst.bits(); ++bit) m[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  const net::IpAddr net = dst.is_v4() ? net::IpAddr::V4({m[0], m[1], m[2], m[3]}) : net::IpAddr::V6(m);
  return absl::StrCat(net.ToString(), "/", plen);
}

std::string ReasonName(uint8_t kind, uint8_t action, uint8_t reason) {
  const char* bare = BareReason(reason, action);
  std::string name = bare ? bare : absl::StrCat("reason-", reason);
  return kind == EGR_EVENT_BACKSTOP ? absl::StrCat("backstop:", name) : name;
}

void AppendRfc3339(std::string& out, uint64_t realtime_ns) {
  // Every audit record carries one, and records come in runs within the same
  // second: the date and time of day are formatted once per second (per
  // thread), the nanoseconds by hand.  absl::StrFormat of the whole was 3.8k
  // of a denied DNS query's 22k instructions (bench/dns_ir.sh).
  thread_local uint64_t cached_secs = ~0ull;
  thread_local char prefix[40];
  thread_local size_t prefix_len = 0;
  const uint64_t secs = realtime_ns / 1000000000ull;
  if (secs != cached_secs) {
    const time_t t = static_cast<time_t>(secs);
    struct tm tm;
    gmtime_r(&t, &tm);
    const int n = std::snprintf(prefix, sizeof(prefix), "%04d-%02d-%02dT%02d:%02d:%02d.", tm.tm_year + 1900,
                                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    prefix_len = n > 0 ? std::min(static_cast<size_t>(n), sizeof(prefix) - 1) : 0;
    cached_secs = secs;
  }
  out.append(prefix, prefix_len);
  uint32_t frac = static_cast<uint32_t>(realtime_ns % 1000000000ull);
  char digits[10];
  for (int i = 8; i >= 0; --i) {
    digits[i] = static_cast<char>('0' + frac % 10);
    frac /= 10;
  }
  digits[9] = 'Z';
  out.append(digits, 10);
}

std::string FormatTime(uint64_t realtime_ns) {
  std::string out;
  out.reserve(32);
  AppendRfc3339(out, realtime_ns);
  return out;
}

nlohmann::json EventJson(const egr_event& e, uint64_t realtime_ns,
                         const std::optional<SandboxInfo>& sandbox, const Enrichment& x) {
  nlohmann::json j;
  j["schema"] = kSchema;
  j["time"] = FormatTime(realtime_ns);
  PutFlow(j, e.key);
  j["count"] = 1;
  PutSandbox(j, e.key.sandbox_id, sandbox);
  PutTask(j, e.task, e.flags, x);
  PutMatch(j, e.key, e.match_plen, e.match_flags, e.match_id, sandbox);
  PutNames(j, x);
  PutInterface(j, e.key, x);
  j["kernel"] = {{"cpu", e.cpu}, {"seq", e.seq}, {"boot_ns", e.boot_ns}};
  return j;
}

nlohmann::json SummaryJson(const egr_event_key& k, const egr_fold_val& v, uint64_t first_realtime_ns,
                           uint64_t now_realtime_ns, const std::optional<SandboxInfo>& sandbox,
                           const Enrichment& x) {
  nlohmann::json j;
  j["schema"] = kSchema;
  j["time"] = FormatTime(now_realtime_ns);
  PutFlow(j, k);
  j["summary"] = true;  // `count` occurrences folded in the kernel
  j["count"] = v.count;
  j["first_time"] = FormatTime(first_realtime_ns);
  PutSandbox(j, k.sandbox_id, sandbox);
  PutTask(j, v.task, v.flags, x);
  PutMatch(j, k, v.match_plen, v.match_flags, v.match_id, sandbox);
  PutNames(j, x);
  PutInterface(j, k, x);
  return j;
}

nlohmann::json LossJson(uint64_t sandbox_id, uint64_t lost, uint64_t now_realtime_ns,
                        const std::optional<SandboxInfo>& sandbox) {
  nlohmann::json j;
  j["schema"] = kSchema;
  j["time"] = FormatTime(now_realtime_ns);
  j["type"] = "loss";
  j["lost"] = lost;
  if (sandbox_id) PutSandbox(j, sandbox_id, sandbox);
  return j;
}

nlohmann::json GapJson(uint32_t cpu, uint64_t first, uint64_t last, uint64_t now_realtime_ns) {
  nlohmann::json j;
  j["schema"] = kSchema;
  j["time"] = FormatTime(now_realtime_ns);
  j["type"] = "gap";
  j["kernel"] = {{"cpu", cpu}, {"first_seq", first}, {"last_seq", last}};
  j["lost"] = last - first + 1;
  return j;
}

std::string Line(nlohmann::json& record, uint64_t seq) {
  record["seq"] = seq;
  // dump() escapes control characters, so a comm with a newline stays one line.
  return record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool Matches(const nlohmann::json& r, const Filter& f) {
  if (f.sandbox) {
    if (!r.contains("sandbox") || r["sandbox"].value("id", uint64_t{0}) != *f.sandbox) return false;
  }
  if (f.verdict) {
    if (!r.contains("verdict") || r["verdict"] != *f.verdict) return false;
  }
  if (f.type) {
    if (!r.contains("type") || r["type"] != *f.type) return false;
  }
  if (f.since) {
    if (!r.contains("time") || !r["time"].is_string() || r["time"].get<std::string>() < *f.since) return false;
  }
  return true;
}

absl::StatusOr<Filter> ParseFilter(const std::string& sandbox, const std::string& verdict, const std::string& type,
                                   const std::string& since) {
  Filter f;
  if (!sandbox.empty()) {
    uint64_t id = 0;
    if (!absl::SimpleAtoi(sandbox, &id) || id == 0) {
      return absl::InvalidArgumentError(absl::StrCat("sandbox \"", sandbox, "\": not a sandbox id (its cgroup id)"));
    }
    f.sandbox = id;
  }
  if (!verdict.empty()) {
    if (verdict != "allow" && verdict != "deny" && verdict != "would-deny") {
      return absl::InvalidArgumentError(absl::StrCat("verdict \"", verdict, "\": allow, deny or would-deny"));
    }
    f.verdict = verdict;
  }
  if (!type.empty()) {
    static const char* const kTypes[] = {"connect", "send", "backstop", "tc", "dns", "engine", "sandbox", "policy", "loss", "gap"};
    if (std::find(std::begin(kTypes), std::end(kTypes), type) == std::end(kTypes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "type \"", type, "\": one of connect, send, backstop, tc, dns, engine, sandbox, policy, loss, gap"));
    }
    f.type = type;
  }
  if (!since.empty()) {
    absl::Time t;
    std::string err;
    if (!absl::ParseTime(absl::RFC3339_full, since, &t, &err)) {
      return absl::InvalidArgumentError(absl::StrCat("since \"", since, "\": not an RFC 3339 time (", err, ")"));
    }
    f.since = FormatTime(static_cast<uint64_t>(absl::ToUnixNanos(t)));
  }
  return f;
}

std::string Compact(const nlohmann::json& r) {
  std::string out = absl::StrCat(r.value("time", ""), " #", r.value("seq", uint64_t{0}), " ",
                                 r.value("type", "?"));
  if (r.contains("sandbox")) absl::StrAppend(&out, " sandbox=", r["sandbox"].value("id", uint64_t{0}));
  if (r.contains("pod")) {
    absl::StrAppend(&out, " pod=", r["pod"].value("namespace", ""), "/", r["pod"].value("name", ""));
  }
  if (r.contains("verdict")) absl::StrAppend(&out, " ", r.value("verdict", ""), " (", r.value("reason", ""), ")");
  if (r.contains("IP")) {
    std::string l4 = "ip", port;
    if (r.contains("l4")) {
      for (auto& [name, v] : r["l4"].items()) {
        if (v.is_object()) {
          l4 = name;
          if (v.contains("destination_port")) port = absl::StrCat(":", v["destination_port"].get<int>());
        }
      }
    }
    absl::StrAppend(&out, " ", l4, " ", r["IP"].value("destination", ""), port);
  }
  if (r.contains("interface") && r["interface"].is_object()) {
    const auto& i = r["interface"];
    absl::StrAppend(&out, " if=", i.contains("name") ? i["name"].get<std::string>()
                                                      : absl::StrCat("#", i.value("index", 0u)));
  }
  if (r.contains("process")) {
    const auto& p = r["process"];
    if (p.contains("pid")) absl::StrAppend(&out, " pid=", p["pid"].get<uint64_t>());
    if (p.contains("binary")) absl::StrAppend(&out, " comm=", p["binary"].get<std::string>());
  }
  if (r.contains("count") && r["count"].get<uint64_t>() != 1) {
    absl::StrAppend(&out, " count=", r["count"].get<uint64_t>());
  }
  if (r.contains("lost")) absl::StrAppend(&out, " lost=", r["lost"].get<uint64_t>());
  // User-space sources (user_events.h): the DNS question and answer, the
  // lifecycle event.
  if (r.contains("dns") && r["dns"].is_object()) {
    const auto& d = r["dns"];
    if (d.contains("qtypes") && !d["qtypes"].empty()) absl::StrAppend(&out, " ", d["qtypes"][0].get<std::string>());
    absl::StrAppend(&out, " ", d.value("query", "?"), " ", d.value("rcode_name", "no-answer"));
    if (d.contains("ips") && !d["ips"].empty()) absl::StrAppend(&out, " ips=", d["ips"].dump());
  }
  if (r.contains("event")) absl::StrAppend(&out, " ", r.value("event", ""));
  return out;
}

}  // namespace egressd::audit
