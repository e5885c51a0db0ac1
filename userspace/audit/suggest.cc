#include "userspace/audit/suggest.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "userspace/net/ip.h"
#include "userspace/policy/floor.h"
#include "userspace/policy/names.h"

namespace egressd::audit {
namespace {

// Kernel denials the allow list decides; any other reason (protected,
// contained-root, loopback-leaves, unrecorded-open...) no entry would change.
bool AllowListDecides(const std::string& reason) {
  return reason == "default-deny" || reason == "backstop:default-deny";
}

bool IsDenial(const nlohmann::json& r) {
  const std::string v = r.value("verdict", "");
  return v == "deny" || v == "would-deny";
}

std::string Parent(const std::string& name) {
  size_t dot = name.find('.');
  return dot == std::string::npos ? "" : name.substr(dot + 1);
}

size_t Labels(const std::string& name) { return name.empty() ? 0 : std::count(name.begin(), name.end(), '.') + 1; }

// The longest run of whole labels every name ends with.
std::string CommonSuffix(const std::vector<std::string>& names) {
  std::vector<std::string> common = absl::StrSplit(names.front(), '.');
  for (const std::string& n : names) {
    std::vector<std::string> l = absl::StrSplit(n, '.');
    size_t k = 0;
    while (k < common.size() && k < l.size() && common[common.size() - 1 - k] == l[l.size() - 1 - k]) ++k;
    common.erase(common.begin(), common.end() - static_cast<long>(k));
  }
  return absl::StrJoin(common, ".");
}

std::string L4Text(const nlohmann::json& r) {
  if (!r.contains("l4") || !r["l4"].is_object()) return "";
  for (const auto& [proto, v] : r["l4"].items()) {
    if (!v.is_object()) continue;
    if (v.contains("destination_port")) return absl::StrCat(v["destination_port"].get<int>(), "/", proto);
    return proto;
  }
  return "";
}

std::string Plural(uint64_t n, const char* one, const char* many) { return absl::StrCat(n, " ", n == 1 ? one : many); }

struct AddrDenials {
  uint64_t count = 0;
  std::set<std::string> l4;    // "443/TCP"
  std::set<std::string> kinds; // connect, send, backstop
};

struct NameDenials {
  uint64_t count = 0;
  std::set<std::string> qtypes;
};

}  // namespace

std::optional<std::string> RegistrableDomain(const std::string& name, const policy::PublicSuffixes* psl) {
  if (Labels(name) < 2) return std::nullopt;
  auto is_public = [&](const std::string& s) {
    // The list's default rule "*": every top-level domain is a public suffix.
    return Labels(s) == 1 || (psl != nullptr && psl->IsPublicSuffix(s));
  };
  if (is_public(name)) return std::nullopt;
  // The longest public suffix the name ends with, plus one label.
  std::string below = name;
  for (std::string s = Parent(name); !s.empty(); below = s, s = Parent(s)) {
    if (is_public(s)) return below;
  }
  return std::nullopt;
}

SuggestResult Suggest(const std::vector<nlohmann::json>& records, const SuggestOptions& o) {
  SuggestResult out;
  std::map<std::string, std::set<std::string>> answered_for;  // address -> names
  std::set<std::string> asked;                                // every question name
  std::map<std::string, NameDenials> denied_names;
  std::map<std::string, AddrDenials> denied_addrs;
  std::map<std::pair<std::string, std::string>, uint64_t> other;  // (what, why) -> occurrences

  for (const nlohmann::json& r : records) {
    if (!r.is_object()) continue;
    if (o.sandbox) {
      if (!r.contains("sandbox") || r["sandbox"].value("id", uint64_t{0}) != *o.sandbox) continue;
    }
    const std::string type = r.value("type", "");
    if (type == "dns") {
      if (!r.contains("dns") || !r["dns"].contains("query")) continue;
      const nlohmann::json& d = r["dns"];
      const std::string q = policy::CanonicalQueryName(d["query"].get<std::string>());
      asked.insert(q);
      if (r.value("verdict", "") == "allow") {
        for (const char* key : {"ips"}) {
          if (d.contains(key)) {
            for (const auto& ip : d[key]) answered_for[ip.get<std::string>()].insert(q);
          }
        }
        if (d.contains("learned")) {
          for (const auto& l : d["learned"]) answered_for[l.value("ip", "")].insert(q);
        }
      } else if (r.value("reason", "") == "name-not-in-scope") {
        NameDenials& n = denied_names[q];
        ++n.count;
        ++out.denials;
        if (d.contains("qtypes")) {
          for (const auto& t : d["qtypes"]) n.qtypes.insert(t.get<std::string>());
        }
      }
      continue;
    }
    if (type != "connect" && type != "send" && type != "backstop") continue;
    if (!IsDenial(r) || !r.contains("IP")) continue;
    const uint64_t count = r.value("count", uint64_t{1});
    out.denials += count;
    const std::string ip = r["IP"].value("destination", "");
    const std::string reason = r.value("reason", "");
    const std::string l4 = L4Text(r);
    if (!AllowListDecides(reason)) {
      other[{absl::StrCat(ip, l4.empty() ? "" : " ", l4), absl::StrCat("denied as ", reason, ": no allow entry changes that")}] +=
          count;
      continue;
    }
    AddrDenials& a = denied_addrs[ip];
    a.count += count;
    if (!l4.empty()) a.l4.insert(l4);
    a.kinds.insert(type);
  }

  // Names wanted, each with what it covers.
  std::map<std::string, std::vector<std::string>> wanted;
  std::vector<Suggestion> addresses;
  for (const auto& [ip, a] : denied_addrs) {
    const std::string what = absl::StrCat(ip, a.l4.empty() ? "" : " ", absl::StrJoin(a.l4, ", "));
    const std::string line =
        absl::StrCat(absl::StrJoin(a.kinds, "/"), " to ", what, " denied ", Plural(a.count, "time", "times"));
    auto host = net::Cidr::Parse(ip);  // the host prefix
    if (!host.ok()) {
      other[{what, "not an address"}] += a.count;
      continue;
    }
    if (auto conflict = policy::CheckFloor(*host, o.protected_cidrs)) {
      other[{what, absl::StrCat("the deployment's floor protects ", conflict->entry->cidr.ToString(), " (",
                                conflict->entry->source, ")")}] += a.count;
      continue;
    }
    auto names = answered_for.find(ip);
    if (names != answered_for.end() && !names->second.empty()) {
      for (const std::string& n : names->second) wanted[n].push_back(absl::StrCat(line, " (answered for ", n, ")"));
      continue;
    }
    addresses.push_back(Suggestion{ip, {line}});
  }
  for (const auto& [q, n] : denied_names) {
    const std::string what = absl::StrCat("dns ", q);
    auto canonical = policy::CanonicalName(q);
    if (!canonical.ok()) {
      other[{what, std::string(canonical.status().message())}] += n.count;
      continue;
    }
    if (policy::IsSingleLabel(*canonical)) {
      other[{what, "a single-label name (the resolver's search domains expand it): declare the full name"}] +=
          n.count;
      continue;
    }
    // "api.example.com.svc.cluster.local" after "api.example.com" was asked:
    // the resolver's search walk, not a name the workload wants.
    std::string expands;
    for (const std::string& m : asked) {
      if (m != *canonical && absl::StartsWith(*canonical, absl::StrCat(m, ".")) && policy::CanonicalName(m).ok() &&
          !policy::IsSingleLabel(m)) {
        expands = m;
        break;
      }
    }
    if (!expands.empty()) {
      other[{what, absl::StrCat("a search-domain expansion of ", expands)}] += n.count;
      continue;
    }
    wanted[*canonical].push_back(absl::StrCat("dns ", absl::StrJoin(n.qtypes, ", "), " ", *canonical, " denied ",
                                              Plural(n.count, "time", "times")));
  }

  // Siblings below one registrable domain share a wildcard.
  std::map<std::string, std::vector<std::string>> below;  // registrable domain -> names strictly below it
  std::vector<Suggestion> names;
  for (const auto& [n, covers] : wanted) {
    auto r = RegistrableDomain(n, o.public_suffixes);
    if (r && *r != n) {
      below[*r].push_back(n);
    } else {
      names.push_back(Suggestion{n, covers});
    }
  }
  for (const auto& [reg, members] : below) {
    if (members.size() < 2) {
      for (const std::string& n : members) names.push_back(Suggestion{n, wanted[n]});
      continue;
    }
    std::string suffix = CommonSuffix(members);
    // A wildcard never matches its own apex: one level up if a member is it.
    if (std::find(members.begin(), members.end(), suffix) != members.end()) suffix = Parent(suffix);
    Suggestion w{absl::StrCat("*.", suffix), {}};
    for (const std::string& n : members) {
      for (const std::string& c : wanted[n]) w.covers.push_back(c);
    }
    names.push_back(std::move(w));
  }
  auto by_target = [](const Suggestion& a, const Suggestion& b) { return a.target < b.target; };
  std::sort(names.begin(), names.end(), by_target);
  std::sort(addresses.begin(), addresses.end(), by_target);
  out.allow = std::move(names);
  for (auto& a : addresses) out.allow.push_back(std::move(a));
  for (const auto& [key, count] : other) {
    out.not_suggested.push_back(NotSuggested{absl::StrCat(key.first, " (", Plural(count, "time", "times"), ")"), key.second});
  }
  return out;
}

std::string RenderTaskYaml(const SuggestResult& r, const std::string& input_name) {
  std::string y = absl::StrCat("# egressctl audit suggest: ", Plural(r.denials, "denial", "denials"), " read from ",
                               input_name, "\n# Start from `allow: []` and add what fails (docs/policy.md).\n");
  if (r.allow.empty()) {
    absl::StrAppend(&y, "egress:\n  allow: []\n");
  } else {
    absl::StrAppend(&y, "egress:\n  allow:\n");
    for (const Suggestion& s : r.allow) {
      for (const std::string& c : s.covers) absl::StrAppend(&y, "    # ", c, "\n");
      // Quoted: a wildcard's `*` is YAML's alias marker.
      absl::StrAppend(&y, "    - '", s.target, "'\n");
    }
  }
  if (!r.not_suggested.empty()) {
    absl::StrAppend(&y, "# Not suggested:\n");
    for (const NotSuggested& n : r.not_suggested) absl::StrAppend(&y, "#   ", n.what, ": ", n.why, "\n");
  }
  return y;
}

}  // namespace egressd::audit
