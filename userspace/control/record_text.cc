// The record's file text, written directly rather than through a JSON DOM: a
// policy of 100,000 CIDRs is 5 MB of JSON, and building it as nlohmann
// objects costs more than writing its maps.  The text is exactly what
// ToJson(record).dump() describes (same keys, same values), which the unit
// test checks.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"
#include "userspace/control/sandbox_record.h"

namespace egressd::control {
namespace {

void AppendString(std::string& out, const std::string& s) {
  for (unsigned char c : s) {
    if (c >= 0x80) {
      // Rare (sources are paths and names are ASCII); let the library
      // handle UTF-8, replacing invalid bytes.
      out += nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      return;
    }
  }
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void AppendPolicy(std::string& out, const policy::CompiledPolicy& p) {
  out += "{\"default\":";
  AppendString(out, std::string(policy::ToString(p.default_verdict)));
  out += ",\"on_deny\":";
  AppendString(out, std::string(policy::ToString(p.deny_action)));
  if (p.audit.audit_only) out += ",\"audit_only\":true";
  if (p.audit.strict) out += ",\"strict_audit\":true";
  out += ",\"protected\":[";
  for (size_t i = 0; i < p.protected_cidrs.size(); ++i) {
    out += i ? ",{\"cidr\":" : "{\"cidr\":";
    AppendString(out, p.protected_cidrs[i].cidr.ToString());
    out += ",\"source\":";
    AppendString(out, p.protected_cidrs[i].source);
    out += '}';
  }
  out += "],\"allowed\":[";
  for (size_t i = 0; i < p.allowed.size(); ++i) {
    const auto& a = p.allowed[i];
    out += i ? ",{\"cidr\":" : "{\"cidr\":";
    AppendString(out, a.cidr.ToString());
    out += ",\"ports\":[";
    for (size_t k = 0; k < a.ports.size(); ++k) {
      if (k) out += ',';
      AppendString(out, policy::ToString(a.ports[k]));
    }
    out += "],\"source\":";
    AppendString(out, a.source);
    out += '}';
  }
  out += "],\"names\":[";
  for (size_t i = 0; i < p.names.size(); ++i) {
    out += i ? ",{\"name\":" : "{\"name\":";
    AppendString(out, p.names[i].name);
    out += ",\"source\":";
    AppendString(out, p.names[i].source);
    out += '}';
  }
  out += "],\"wildcards\":[";
  for (size_t i = 0; i < p.wildcard_suffixes.size(); ++i) {
    out += i ? ",{\"wildcard\":" : "{\"wildcard\":";
    AppendString(out, "*." + p.wildcard_suffixes[i].name);
    out += ",\"source\":";
    AppendString(out, p.wildcard_suffixes[i].source);
    out += '}';
  }
  out += "]}";
}

void AppendRef(std::string& out, const PolicyRef& r) {
  absl::StrAppend(&out, "{\"policy_id\":", r.policy_id, ",\"policy\":");
  if (r.policy) {
    AppendPolicy(out, *r.policy);
  } else {
    out += "null";
  }
}

void AppendLabels(std::string& out, const Labels& labels) {
  out += '{';
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ',';
    first = false;
    AppendString(out, k);
    out += ':';
    AppendString(out, v);
  }
  out += '}';
}

}  // namespace

std::string ToJsonText(const SandboxRecord& r) {
  std::string out;
  out.reserve(4096 + 64 * (r.current.policy ? r.current.policy->allowed.size() : 0));
  absl::StrAppend(&out, "{\"version\":1,\"cgroup_id\":", r.cgroup_id, ",\"cgroup_path\":");
  AppendString(out, r.cgroup_path);
  out += ",\"labels\":";
  AppendLabels(out, r.labels);
  absl::StrAppend(&out, ",\"netns_cookie\":", r.netns_cookie, ",\"netns_inode\":", r.netns_inode,
                  ",\"pidns_dev\":", r.pidns_dev, ",\"pidns_inode\":", r.pidns_inode, ",\"current\":");
  AppendRef(out, r.current);
  out += "},\"previous\":";
  if (r.previous) {
    AppendRef(out, *r.previous);
    out += ",\"labels\":";
    AppendLabels(out, r.previous_labels);
    out += '}';
  } else {
    out += "null";
  }
  if (r.dns) {
    out += ",\"dns\":{";
    if (r.dns->addr4) absl::StrAppend(&out, "\"addr4\":\"", r.dns->addr4->ToString(), "\",");
    if (r.dns->addr6) absl::StrAppend(&out, "\"addr6\":\"", r.dns->addr6->ToString(), "\",");
    absl::StrAppend(&out, "\"port\":", r.dns->port, "}");
  }
  if (!r.note.empty()) {
    out += ",\"note\":";
    AppendString(out, r.note);
  }
  if (r.ifindex) {
    out += ",\"interface\":";
    AppendString(out, r.interface);
    absl::StrAppend(&out, ",\"ifindex\":", r.ifindex);
  }
  out += "}\n";
  return out;
}

}  // namespace egressd::control

// ---- reading ---------------------------------------------------------------
// Parsed with nlohmann's SAX interface straight into the record: no DOM of a
// 5 MB policy (which costs more than deleting its keys).
namespace egressd::control {
namespace {

using Json = nlohmann::json;

class RecordSax : public nlohmann::json_sax<Json> {
 public:
  explicit RecordSax(SandboxRecord& r) : r_(r) {}

  bool null() override {
    if (Is({"current", "policy"})) r_.current.policy.reset();
    return true;
  }
  bool boolean(bool v) override {
    if (Is({"current", "policy", "audit_only"})) Policy().audit.audit_only = v;
    if (Is({"current", "policy", "strict_audit"})) Policy().audit.strict = v;
    return true;
  }
  bool number_integer(number_integer_t v) override { return v >= 0 ? Number(static_cast<uint64_t>(v)) : Fail("negative number"); }
  bool number_unsigned(number_unsigned_t v) override { return Number(v); }
  bool number_float(number_float_t, const string_t&) override { return Fail("unexpected float"); }
  bool binary(binary_t&) override { return Fail("unexpected binary"); }
  bool string(string_t& s) override;
  bool start_object(std::size_t) override;
  bool end_object() override {
    frames_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    frames_.push_back({});
    return true;
  }
  bool end_array() override {
    frames_.pop_back();
    return true;
  }
  bool key(string_t& k) override {
    frames_.back() = k;
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) override {
    return Fail(absl::StrCat("not JSON at byte ", pos, ": ", e.what()));
  }

  absl::Status status() const { return error_.empty() ? absl::OkStatus() : absl::DataLossError(error_); }
  bool saw_version = false, saw_cgroup = false, saw_current = false;
  // Each policy must say its default and deny action (2 per policy).
  int policies = 0, verdict_fields = 0;

 private:
  // Whether the path of keys (array levels skipped) from the root ends at
  // `keys`, under "current" or "previous" for policy paths.
  bool Is(std::initializer_list<const char*> keys) const {
    size_t i = 0;
    for (const std::string& f : frames_) {
      if (f.empty()) continue;  // an array level, or an object before its first key
      if (i == keys.size()) return false;
      if (i == 0 && std::string(*keys.begin()) == "current" && f == "previous") {
        ++i;
        continue;
      }
      if (f != *(keys.begin() + i)) return false;
      ++i;
    }
    return i == keys.size();
  }
  bool InPrevious() const { return !frames_.empty() && frames_[0] == "previous"; }
  PolicyRef& Ref() { return InPrevious() ? *r_.previous : r_.current; }
  policy::CompiledPolicy& Policy() { return *Ref().policy; }
  bool Fail(const std::string& why) {
    if (error_.empty()) error_ = why;
    return false;
  }
  bool Number(uint64_t v) {
    if (Is({"version"})) {
      saw_version = v == 1;
      return saw_version || Fail("not a version 1 sandbox record");
    }
    if (Is({"cgroup_id"})) {
      saw_cgroup = true;
      r_.cgroup_id = v;
    } else if (Is({"netns_cookie"})) {
      r_.netns_cookie = v;
    } else if (Is({"netns_inode"})) {
      r_.netns_inode = v;
    } else if (Is({"pidns_dev"})) {
      r_.pidns_dev = v;
    } else if (Is({"pidns_inode"})) {
      r_.pidns_inode = v;
    } else if (Is({"ifindex"})) {
      if (v > UINT32_MAX) return Fail("ifindex out of range");
      r_.ifindex = static_cast<uint32_t>(v);
    } else if (Is({"dns", "port"}) && r_.dns) {
      if (v == 0 || v > 65535) return Fail(absl::StrCat("dns.port ", v, " out of range"));
      r_.dns->port = static_cast<uint16_t>(v);
    } else if (Is({"current", "policy_id"})) {
      if (v > UINT32_MAX) return Fail("policy_id out of range");
      Ref().policy_id = static_cast<maps::PolicyId>(v);
      saw_current |= !InPrevious();
    }
    return true;
  }

  SandboxRecord& r_;
  // One entry per open object (its current key) or array (empty).
  std::vector<std::string> frames_;
  std::string error_;
};

bool RecordSax::start_object(std::size_t) {
  if (Is({"dns"})) {
    r_.dns = maps::DnsEndpoint{};
  } else if (Is({"current", "policy"})) {
    Ref().policy = policy::CompiledPolicy{};
    ++policies;
  } else if (Is({"current"}) && InPrevious()) {
    r_.previous = PolicyRef{};
  } else if (Is({"current", "policy", "protected"})) {
    Policy().protected_cidrs.emplace_back();
  } else if (Is({"current", "policy", "allowed"})) {
    Policy().allowed.emplace_back();
  } else if (Is({"current", "policy", "names"})) {
    Policy().names.emplace_back();
  } else if (Is({"current", "policy", "wildcards"})) {
    Policy().wildcard_suffixes.emplace_back();
  }
  frames_.push_back({});
  return true;
}

bool RecordSax::string(string_t& s) {
  auto cidr = [&](net::Cidr& into) {
    auto c = net::Cidr::Parse(s);
    if (!c.ok()) return Fail(std::string(c.status().message()));
    into = *c;
    return true;
  };
  auto dns_addr = [&](std::optional<net::IpAddr>& into) {
    auto a = net::IpAddr::Parse(s);
    if (!a.ok()) return Fail(absl::StrCat("dns: ", a.status().message()));
    into = *a;
    return true;
  };
  if (Is({"cgroup_path"})) {
    r_.cgroup_path = std::move(s);
  } else if (Is({"interface"})) {
    r_.interface = std::move(s);
  } else if (Is({"dns", "addr4"}) && r_.dns) {
    return dns_addr(r_.dns->addr4);
  } else if (Is({"dns", "addr6"}) && r_.dns) {
    return dns_addr(r_.dns->addr6);
  } else if (Is({"note"})) {
    r_.note = std::move(s);
  } else if (frames_.size() == 2 && frames_[0] == "labels") {
    r_.labels[frames_[1]] = std::move(s);
  } else if (frames_.size() == 3 && frames_[0] == "previous" && frames_[1] == "labels") {
    r_.previous_labels[frames_[2]] = std::move(s);
  } else if (Is({"current", "policy", "default"})) {
    if (s != "allow" && s != "deny") return Fail("bad default \"" + s + "\"");
    Policy().default_verdict = s == "allow" ? policy::Verdict::kAllow : policy::Verdict::kDeny;
    ++verdict_fields;
  } else if (Is({"current", "policy", "on_deny"})) {
    auto a = policy::ParseDenyAction(s);
    if (!a.ok()) return Fail(std::string(a.status().message()));
    Policy().deny_action = *a;
    ++verdict_fields;
  } else if (Is({"current", "policy", "protected", "cidr"})) {
    return cidr(Policy().protected_cidrs.back().cidr);
  } else if (Is({"current", "policy", "protected", "source"})) {
    Policy().protected_cidrs.back().source = std::move(s);
  } else if (Is({"current", "policy", "allowed", "cidr"})) {
    return cidr(Policy().allowed.back().cidr);
  } else if (Is({"current", "policy", "allowed", "source"})) {
    Policy().allowed.back().source = std::move(s);
  } else if (Is({"current", "policy", "allowed", "ports"})) {
    auto r = ParsePortRange(s);
    if (!r.ok()) return Fail(std::string(r.status().message()));
    Policy().allowed.back().ports.push_back(*r);
  } else if (Is({"current", "policy", "names", "name"})) {
    Policy().names.back().name = std::move(s);
  } else if (Is({"current", "policy", "names", "source"})) {
    Policy().names.back().source = std::move(s);
  } else if (Is({"current", "policy", "wildcards", "wildcard"})) {
    if (s.rfind("*.", 0) != 0) return Fail("wildcard \"" + s + "\" does not start with *.");
    Policy().wildcard_suffixes.back().name = s.substr(2);
  } else if (Is({"current", "policy", "wildcards", "source"})) {
    Policy().wildcard_suffixes.back().source = std::move(s);
  }
  return true;
}

}  // namespace

absl::StatusOr<SandboxRecord> ParseRecordText(std::string_view text) {
  SandboxRecord r;
  RecordSax sax(r);
  bool ok = Json::sax_parse(text.begin(), text.end(), &sax);
  EGR_RETURN_IF_ERROR(sax.status());
  if (!ok) return absl::DataLossError("not JSON");
  if (!sax.saw_version) return absl::DataLossError("not a version 1 sandbox record");
  if (!sax.saw_cgroup) return absl::DataLossError("no cgroup_id");
  if (!sax.saw_current) return absl::DataLossError("no current policy");
  if (sax.verdict_fields != 2 * sax.policies) return absl::DataLossError("a policy without its default or on_deny");
  if (r.dns) {
    if (absl::Status s = CheckDnsEndpoint(*r.dns); !s.ok()) return absl::DataLossError(absl::StrCat("dns: ", s.message()));
  }
  return r;
}

}  // namespace egressd::control
