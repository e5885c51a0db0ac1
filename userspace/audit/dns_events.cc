#include "userspace/audit/dns_events.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "userspace/audit/record.h"

namespace egressd::audit {

std::string QtypeName(uint16_t t) {
  switch (t) {
    case 1: return "A";
    case 2: return "NS";
    case 5: return "CNAME";
    case 6: return "SOA";
    case 12: return "PTR";
    case 15: return "MX";
    case 16: return "TXT";
    case 28: return "AAAA";
    case 33: return "SRV";
    case 35: return "NAPTR";
    case 41: return "OPT";
    case 43: return "DS";
    case 48: return "DNSKEY";
    case 64: return "SVCB";
    case 65: return "HTTPS";
    case 99: return "SPF";
    case 252: return "AXFR";
    case 255: return "ANY";
    case 257: return "CAA";
  }
  return absl::StrCat("TYPE", t);
}

std::string RcodeName(uint8_t r) {
  switch (r) {
    case 0: return "NOERROR";
    case 1: return "FORMERR";
    case 2: return "SERVFAIL";
    case 3: return "NXDOMAIN";
    case 4: return "NOTIMP";
    case 5: return "REFUSED";
  }
  return absl::StrCat("RCODE", r);
}

nlohmann::json DnsJson(const dns::QueryEvent& e) {
  nlohmann::json j;
  j["schema"] = kSchema;
  j["time"] = FormatTime(e.realtime_ns);
  j["type"] = "dns";
  j["verdict"] = e.allowed ? "allow" : "deny";
  j["reason"] = e.reason;
  j["sandbox"]["id"] = e.sandbox_id;
  nlohmann::json& d = j["dns"];
  d["transport"] = e.over_tcp ? "tcp" : "udp";
  if (e.parsed) {
    // Hubble writes the question as a fully qualified name.
    d["query"] = absl::StrCat(e.qname, ".");
    d["qtypes"] = nlohmann::json::array({QtypeName(e.qtype)});
  }
  if (!e.rule.empty()) d["rule"] = e.rule;
  if (e.rcode) {
    d["rcode"] = *e.rcode;
    d["rcode_name"] = RcodeName(*e.rcode);
  }
  if (e.truncated) d["truncated"] = true;
  nlohmann::json ips = nlohmann::json::array(), cnames = nlohmann::json::array(),
                 answers = nlohmann::json::array();
  std::optional<uint32_t> ttl;
  for (const auto& a : e.answers) {
    nlohmann::json r = {{"name", absl::StrCat(a.name, ".")}, {"type", QtypeName(a.type)}, {"ttl", a.ttl}};
    if (!a.data.empty()) r["data"] = a.type == 5 ? absl::StrCat(a.data, ".") : a.data;
    answers.push_back(std::move(r));
    if (a.type == 5) cnames.push_back(absl::StrCat(a.data, "."));
    if ((a.type == 1 || a.type == 28) && !a.data.empty()) ips.push_back(a.data);
    ttl = ttl ? std::min(*ttl, a.ttl) : a.ttl;
  }
  if (e.rcode) {
    d["ips"] = ips;
    d["cnames"] = cnames;
    d["answers"] = answers;
    if (ttl) d["ttl"] = *ttl;  // the smallest of the answer's records
  }
  if (!e.learned.empty()) {
    d["learned"] = nlohmann::json::array();
    for (const auto& l : e.learned) d["learned"].push_back({{"ip", l.addr.ToString()}, {"ttl", l.ttl}});
  }
  if (!e.refused.empty()) {
    d["refused"] = nlohmann::json::array();
    for (const auto& r : e.refused) d["refused"].push_back({{"ip", r.addr.ToString()}, {"why", r.why}});
  }
  if (!e.evicted.empty()) {
    // Forgotten from the kernel's map under the name's cap (issue 12).
    d["evicted"] = nlohmann::json::array();
    for (const auto& a : e.evicted) d["evicted"].push_back({{"ip", a.ToString()}, {"why", "name-cap"}});
  }
  if (e.held) d["held"] = {{"name", e.held->name}, {"sandbox", e.held->sandbox}};
  if (e.upstream_ns) d["upstream_latency_ns"] = *e.upstream_ns;
  if (e.learn_ns) d["learn_latency_ns"] = *e.learn_ns;
  if (!e.upstream_error.empty()) d["upstream_error"] = e.upstream_error;
  return j;
}

namespace {

void Key(std::string& out, bool& first, const char* k) {
  if (!first) out.push_back(',');
  first = false;
  out.push_back('"');
  out.append(k);
  out.append("\":");
}

void Str(std::string& out, std::string_view s) { AppendJsonString(out, s); }

}  // namespace

// Keys in nlohmann's (std::map) order, so the line is byte for byte DnsJson's
// dump; dns_line_test holds the two equal.
std::string DnsLine(const dns::QueryEvent& e) {
  std::string out;
  out.reserve(512);
  out.append("{\"dns\":{");
  bool f = true;
  std::optional<uint32_t> ttl;
  if (e.rcode) {
    Key(out, f, "answers");
    out.push_back('[');
    for (size_t i = 0; i < e.answers.size(); ++i) {
      const auto& a = e.answers[i];
      if (i) out.push_back(',');
      out.push_back('{');
      bool g = true;
      if (!a.data.empty()) {
        Key(out, g, "data");
        Str(out, a.type == 5 ? absl::StrCat(a.data, ".") : a.data);
      }
      Key(out, g, "name");
      Str(out, absl::StrCat(a.name, "."));
      Key(out, g, "ttl");
      absl::StrAppend(&out, a.ttl);
      Key(out, g, "type");
      Str(out, QtypeName(a.type));
      out.push_back('}');
      ttl = ttl ? std::min(*ttl, a.ttl) : a.ttl;
    }
    out.push_back(']');
    Key(out, f, "cnames");
    out.push_back('[');
    bool g = true;
    for (const auto& a : e.answers) {
      if (a.type != 5) continue;
      if (!g) out.push_back(',');
      g = false;
      Str(out, absl::StrCat(a.data, "."));
    }
    out.push_back(']');
    Key(out, f, "ips");
    out.push_back('[');
    g = true;
    for (const auto& a : e.answers) {
      if ((a.type != 1 && a.type != 28) || a.data.empty()) continue;
      if (!g) out.push_back(',');
      g = false;
      Str(out, a.data);
    }
    out.push_back(']');
  }
  if (e.learn_ns) {
    Key(out, f, "learn_latency_ns");
    absl::StrAppend(&out, *e.learn_ns);
  }
  if (!e.learned.empty()) {
    Key(out, f, "learned");
    out.push_back('[');
    for (size_t i = 0; i < e.learned.size(); ++i) {
      if (i) out.push_back(',');
      out.append("{\"ip\":");
      Str(out, e.learned[i].addr.ToString());
      absl::StrAppend(&out, ",\"ttl\":", e.learned[i].ttl, "}");
    }
    out.push_back(']');
  }
  if (e.parsed) {
    Key(out, f, "qtypes");
    out.push_back('[');
    Str(out, QtypeName(e.qtype));
    out.push_back(']');
    Key(out, f, "query");
    Str(out, absl::StrCat(e.qname, "."));
  }
  if (e.rcode) {
    Key(out, f, "rcode");
    absl::StrAppend(&out, *e.rcode);
    Key(out, f, "rcode_name");
    Str(out, RcodeName(*e.rcode));
  }
  if (!e.refused.empty()) {
    Key(out, f, "refused");
    out.push_back('[');
    for (size_t i = 0; i < e.refused.size(); ++i) {
      if (i) out.push_back(',');
      out.append("{\"ip\":");
      Str(out, e.refused[i].addr.ToString());
      out.append(",\"why\":");
      Str(out, e.refused[i].why);
      out.push_back('}');
    }
    out.push_back(']');
  }
  if (!e.rule.empty()) {
    Key(out, f, "rule");
    Str(out, e.rule);
  }
  Key(out, f, "transport");
  Str(out, e.over_tcp ? "tcp" : "udp");
  if (e.truncated) {
    Key(out, f, "truncated");
    out.append("true");
  }
  if (e.rcode && ttl) {
    Key(out, f, "ttl");
    absl::StrAppend(&out, *ttl);
  }
  if (!e.upstream_error.empty()) {
    Key(out, f, "upstream_error");
    Str(out, e.upstream_error);
  }
  if (e.upstream_ns) {
    Key(out, f, "upstream_latency_ns");
    absl::StrAppend(&out, *e.upstream_ns);
  }
  out.append("},\"reason\":");
  Str(out, e.reason);
  absl::StrAppend(&out, ",\"sandbox\":{\"id\":", e.sandbox_id, "},\"schema\":");
  Str(out, kSchema);
  out.append(",\"time\":");
  out.push_back('"');  // digits, '-', ':', '.', 'T', 'Z': nothing to escape
  AppendRfc3339(out, e.realtime_ns);
  out.push_back('"');
  out.append(",\"type\":\"dns\",\"verdict\":");
  Str(out, e.allowed ? "allow" : "deny");
  out.push_back('}');
  return out;
}

}  // namespace egressd::audit
