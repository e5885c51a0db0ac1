#include "userspace/control/sandbox_record.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "userspace/common/atomic_file.h"
#include "userspace/common/errors.h"
#include "userspace/common/unique_fd.h"

namespace egressd::control {
namespace {

using nlohmann::json;

bool KeyChar(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '/' || c == '-'; }
bool ValueChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("._:/@+-").find(c) != std::string_view::npos;
}

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(what); }

}  // namespace

absl::StatusOr<policy::PortRange> ParsePortRange(std::string_view text_view) {
  const std::string text(text_view);
  std::vector<std::string> parts = absl::StrSplit(text, '-');
  uint32_t first = 0, last = 0;
  if (parts.size() > 2 || !absl::SimpleAtoi(parts[0], &first) ||
      !absl::SimpleAtoi(parts.back(), &last) || first > last || last > 65535) {
    return Bad(absl::StrCat("bad port range \"", text, "\""));
  }
  return policy::PortRange{static_cast<uint16_t>(first), static_cast<uint16_t>(last)};
}

namespace {

// j[key] as a string, or an error naming the key.
absl::StatusOr<std::string> Str(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return Bad(absl::StrCat("record: \"", key, "\" missing or not a string"));
  return it->get<std::string>();
}

absl::StatusOr<net::Cidr> CidrOf(const json& j) {
  EGR_ASSIGN_OR_RETURN(std::string text, Str(j, "cidr"));
  return net::Cidr::Parse(text);
}

std::string SourceOf(const json& j) { return j.value("source", std::string()); }

json RefToJson(const PolicyRef& r) {
  json j;
  j["policy_id"] = r.policy_id;
  j["policy"] = r.policy ? policy::ToJson(*r.policy) : json(nullptr);
  return j;
}

absl::StatusOr<PolicyRef> RefFromJson(const json& j) {
  if (!j.is_object() || !j.contains("policy_id") || !j["policy_id"].is_number_unsigned()) {
    return Bad("record: policy reference without a policy_id");
  }
  PolicyRef r;
  r.policy_id = j["policy_id"].get<maps::PolicyId>();
  if (j.contains("policy") && !j["policy"].is_null()) {
    EGR_ASSIGN_OR_RETURN(auto p, PolicyFromJson(j["policy"]));
    r.policy = std::move(p);
  }
  return r;
}

// Everything SameContents compares, in one canonical form.
struct Canonical {
  policy::Verdict verdict;
  policy::DenyAction action;
  policy::AuditMode audit;
  std::vector<net::Cidr> prot;
  std::vector<std::pair<net::Cidr, std::vector<policy::PortRange>>> allowed;
  std::vector<std::string> names, wildcards;
  bool operator==(const Canonical&) const = default;
};

template <typename T>
void SortUnique(std::vector<T>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

Canonical CanonicalOf(const policy::CompiledPolicy& p) {
  Canonical c{p.default_verdict, p.deny_action, p.audit, {}, {}, {}, {}};
  for (const auto& x : p.protected_cidrs) c.prot.push_back(x.cidr);
  SortUnique(c.prot);
  // BuildAllowEntries is what the kernel gets; it can fail (too many ranges),
  // in which case compare the declared lists instead.
  if (auto entries = maps::BuildAllowEntries(p.allowed); entries.ok()) {
    for (const auto& e : *entries) {
      std::vector<policy::PortRange> ports;
      for (uint32_t i = 0; i < e.value.nranges && i < EGR_MAX_PORT_RANGES; ++i) {
        ports.push_back({e.value.ranges[i].first, e.value.ranges[i].last});
      }
      c.allowed.emplace_back(e.cidr, std::move(ports));
    }
  } else {
    for (const auto& a : p.allowed) c.allowed.emplace_back(a.cidr, a.ports);
  }
  SortUnique(c.allowed);
  for (const auto& n : p.names) c.names.push_back(n.name);
  for (const auto& w : p.wildcard_suffixes) c.wildcards.push_back(w.name);
  SortUnique(c.names);
  SortUnique(c.wildcards);
  return c;
}

absl::Status FsyncPath(const std::string& path, int flags) {
  UniqueFd fd(open(path.c_str(), flags | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("open ", path));
  if (fsync(fd.get()) != 0) return ErrnoStatus(errno, absl::StrCat("fsync ", path));
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseLabel(const std::string& text, Labels& into) {
  size_t eq = text.find('=');
  if (eq == std::string::npos) return Bad(absl::StrCat("--label \"", text, "\": expected KEY=VALUE"));
  std::string key = text.substr(0, eq), value = text.substr(eq + 1);
  if (key.empty() || key.size() > 63 || !(key[0] >= 'a' && key[0] <= 'z') ||
      !std::all_of(key.begin(), key.end(), KeyChar)) {
    return Bad(absl::StrCat("--label \"", text, "\": key \"", key,
                            "\" must be 1-63 of [a-z0-9._/-], starting with a letter"));
  }
  if (value.size() > 253 || !std::all_of(value.begin(), value.end(), ValueChar)) {
    return Bad(absl::StrCat("--label \"", text, "\": value \"", value,
                            "\" must be at most 253 of [A-Za-z0-9._:/@+-]"));
  }
  if (!into.emplace(key, value).second) return Bad(absl::StrCat("--label \"", text, "\": key \"", key, "\" given twice"));
  return absl::OkStatus();
}

absl::StatusOr<policy::CompiledPolicy> PolicyFromJson(const json& j) {
  if (!j.is_object()) return Bad("record: policy is not an object");
  policy::CompiledPolicy p;
  EGR_ASSIGN_OR_RETURN(std::string verdict, Str(j, "default"));
  if (verdict != "allow" && verdict != "deny") return Bad(absl::StrCat("record: bad default \"", verdict, "\""));
  p.default_verdict = verdict == "allow" ? policy::Verdict::kAllow : policy::Verdict::kDeny;
  EGR_ASSIGN_OR_RETURN(std::string action, Str(j, "on_deny"));
  EGR_ASSIGN_OR_RETURN(p.deny_action, policy::ParseDenyAction(action));
  for (auto [key, into] : {std::pair{"audit_only", &p.audit.audit_only}, std::pair{"strict_audit", &p.audit.strict}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_boolean()) return Bad(absl::StrCat("record: \"", key, "\" is not a boolean"));
    *into = j[key].get<bool>();
  }
  for (const char* list : {"protected", "allowed", "names", "wildcards"}) {
    if (!j.contains(list) || !j[list].is_array()) return Bad(absl::StrCat("record: \"", list, "\" missing"));
  }
  for (const auto& e : j["protected"]) {
    EGR_ASSIGN_OR_RETURN(net::Cidr c, CidrOf(e));
    p.protected_cidrs.push_back({c, SourceOf(e)});
  }
  for (const auto& e : j["allowed"]) {
    EGR_ASSIGN_OR_RETURN(net::Cidr c, CidrOf(e));
    policy::AllowedCidr a{c, {}, SourceOf(e)};
    if (!e.contains("ports") || !e["ports"].is_array()) return Bad("record: allowed entry without ports");
    for (const auto& r : e["ports"]) {
      if (!r.is_string()) return Bad("record: port range is not a string");
      EGR_ASSIGN_OR_RETURN(policy::PortRange pr, ParsePortRange(r.get<std::string>()));
      a.ports.push_back(pr);
    }
    p.allowed.push_back(std::move(a));
  }
  for (const auto& e : j["names"]) {
    EGR_ASSIGN_OR_RETURN(std::string n, Str(e, "name"));
    p.names.emplace_back(n, SourceOf(e));
  }
  for (const auto& e : j["wildcards"]) {
    EGR_ASSIGN_OR_RETURN(std::string w, Str(e, "wildcard"));
    if (w.rfind("*.", 0) != 0) return Bad(absl::StrCat("record: wildcard \"", w, "\" does not start with *."));
    p.wildcard_suffixes.emplace_back(w.substr(2), SourceOf(e));
  }
  return p;
}

json ToJson(const SandboxRecord& r) {
  json j;
  j["version"] = 1;
  j["cgroup_id"] = r.cgroup_id;
  j["cgroup_path"] = r.cgroup_path;
  j["labels"] = r.labels;
  j["netns_cookie"] = r.netns_cookie;
  j["netns_inode"] = r.netns_inode;
  j["pidns_dev"] = r.pidns_dev;
  j["pidns_inode"] = r.pidns_inode;
  j["current"] = RefToJson(r.current);
  j["previous"] = r.previous ? RefToJson(*r.previous) : json(nullptr);
  if (r.previous) j["previous"]["labels"] = r.previous_labels;
  if (r.dns) {
    json d;
    if (r.dns->addr4) d["addr4"] = r.dns->addr4->ToString();
    if (r.dns->addr6) d["addr6"] = r.dns->addr6->ToString();
    d["port"] = r.dns->port;
    j["dns"] = d;
  }
  if (!r.note.empty()) j["note"] = r.note;
  if (r.ifindex) {
    j["interface"] = r.interface;
    j["ifindex"] = r.ifindex;
  }
  return j;
}

absl::StatusOr<SandboxRecord> SandboxRecordFromJson(const json& j) {
  if (!j.is_object() || j.value("version", 0) != 1) return Bad("record: not a version 1 sandbox record");
  SandboxRecord r;
  if (!j.contains("cgroup_id") || !j["cgroup_id"].is_number_unsigned()) return Bad("record: no cgroup_id");
  r.cgroup_id = j["cgroup_id"].get<uint64_t>();
  r.cgroup_path = j.value("cgroup_path", std::string());
  if (j.contains("labels") && j["labels"].is_object()) {
    for (const auto& [k, v] : j["labels"].items()) {
      if (!v.is_string()) return Bad(absl::StrCat("record: label \"", k, "\" is not a string"));
      r.labels[k] = v.get<std::string>();
    }
  }
  r.netns_cookie = j.value("netns_cookie", uint64_t{0});
  r.netns_inode = j.value("netns_inode", uint64_t{0});
  r.pidns_dev = j.value("pidns_dev", uint64_t{0});
  r.pidns_inode = j.value("pidns_inode", uint64_t{0});
  r.interface = j.value("interface", std::string());
  r.ifindex = j.value("ifindex", uint32_t{0});
  if (!j.contains("current")) return Bad("record: no current policy");
  EGR_ASSIGN_OR_RETURN(r.current, RefFromJson(j["current"]));
  if (j.contains("previous") && !j["previous"].is_null()) {
    EGR_ASSIGN_OR_RETURN(auto prev, RefFromJson(j["previous"]));
    r.previous = std::move(prev);
    if (j["previous"].contains("labels") && j["previous"]["labels"].is_object()) {
      for (const auto& [k, v] : j["previous"]["labels"].items()) {
        if (v.is_string()) r.previous_labels[k] = v.get<std::string>();
      }
    }
  }
  if (j.contains("dns") && !j["dns"].is_null()) {
    const json& d = j["dns"];
    if (!d.is_object()) return Bad("record: \"dns\" is not an object");
    maps::DnsEndpoint ep;
    for (const char* key : {"addr4", "addr6"}) {
      if (!d.contains(key)) continue;
      if (!d[key].is_string()) return Bad(absl::StrCat("record: dns.", key, " is not a string"));
      auto a = net::IpAddr::Parse(d[key].get<std::string>());
      if (!a.ok()) return Bad(absl::StrCat("record: dns.", key, ": ", a.status().message()));
      (std::string(key) == "addr4" ? ep.addr4 : ep.addr6) = *a;
    }
    if (!d.contains("port") || !d["port"].is_number_unsigned()) return Bad("record: dns.port missing");
    uint64_t port = d["port"].get<uint64_t>();
    if (port == 0 || port > 65535) return Bad(absl::StrCat("record: dns.port ", port, " out of range"));
    ep.port = static_cast<uint16_t>(port);
    EGR_RETURN_IF_ERROR(CheckDnsEndpoint(ep));
    r.dns = ep;
  }
  r.note = j.value("note", std::string());
  return r;
}

absl::Status CheckDnsEndpoint(const maps::DnsEndpoint& ep) {
  if (ep.port == 0 || ep.port == 53) return Bad(absl::StrCat("DNS endpoint port ", ep.port, ": must be 1-65535, not 53"));
  if (!ep.addr4 && !ep.addr6) return Bad("DNS endpoint without an address");
  if (ep.addr4 && !ep.addr4->is_v4()) return Bad(absl::StrCat("DNS endpoint addr4 ", ep.addr4->ToString(), " is not IPv4"));
  if (ep.addr6 && ep.addr6->is_v4()) return Bad(absl::StrCat("DNS endpoint addr6 ", ep.addr6->ToString(), " is not IPv6"));
  return absl::OkStatus();
}

bool SameContents(const policy::CompiledPolicy& a, const policy::CompiledPolicy& b) {
  return CanonicalOf(a) == CanonicalOf(b);
}

SandboxRecords::SandboxRecords(const Paths& paths) : dir_(paths.runtime_dir + "/sandboxes") {}

std::string SandboxRecords::PathOf(uint64_t cgroup_id) const { return absl::StrCat(dir_, "/", cgroup_id, ".json"); }

namespace {

absl::StatusOr<SandboxRecord> ReadRecord(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus(errno, absl::StrCat("open sandbox record ", path));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return ErrnoStatus(errno, absl::StrCat("read sandbox record ", path));
  auto r = ParseRecordText(text);
  if (!r.ok()) return absl::DataLossError(absl::StrCat("sandbox record ", path, ": ", r.status().message()));
  return r;
}

}  // namespace

absl::StatusOr<std::optional<SandboxRecord>> SandboxRecords::Load(uint64_t cgroup_id) const {
  std::string path = PathOf(cgroup_id);
  if (access(path.c_str(), F_OK) != 0) {
    if (errno == ENOENT) return std::nullopt;
    return ErrnoStatus(errno, absl::StrCat("access ", path));
  }
  EGR_ASSIGN_OR_RETURN(auto r, ReadRecord(path));
  if (r.cgroup_id != cgroup_id) {
    return absl::DataLossError(absl::StrCat("sandbox record ", path, " names cgroup ", r.cgroup_id));
  }
  return r;
}

absl::StatusOr<std::vector<SandboxRecord>> SandboxRecords::List(std::vector<uint64_t>* corrupt) const {
  std::vector<SandboxRecord> out;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return out;
    return ErrnoStatus(errno, absl::StrCat("opendir ", dir_));
  }
  std::vector<uint64_t> ids;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    uint64_t id = 0;
    // Only "<id>.json": temp files of an interrupted write are not records.
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0 &&
        absl::SimpleAtoi(name.substr(0, name.size() - 5), &id)) {
      ids.push_back(id);
    }
  }
  closedir(d);
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) {
    auto r = Load(id);
    if (!r.ok() && corrupt != nullptr && absl::IsDataLoss(r.status())) {
      corrupt->push_back(id);
      continue;
    }
    if (!r.ok()) return r.status();
    if (*r) out.push_back(std::move(**r));
  }
  return out;
}

static absl::Status BumpGeneration(const std::string& dir);

absl::Status SandboxRecords::Write(const SandboxRecord& r) const {
  EGR_RETURN_IF_ERROR(MakeDirs(dir_, 0700));
  const std::string path = PathOf(r.cgroup_id);
  EGR_RETURN_IF_ERROR(WriteFileAtomically(path, ToJsonText(r)));
  return BumpGeneration(dir_);
}

absl::StatusOr<uint64_t> RecordsGeneration(const SandboxRecords& records) {
  const std::string path = records.dir() + "/generation";
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return uint64_t{0};
    return ErrnoStatus(errno, absl::StrCat("open ", path));
  }
  uint64_t g = 0;
  const ssize_t n = pread(fd.get(), &g, sizeof(g), 0);
  if (n < 0) return ErrnoStatus(errno, absl::StrCat("read ", path));
  return n == sizeof(g) ? g : 0;
}

// Not fsynced: the counter matters only to processes running now (a
// restarted one builds its index afresh).  A counter made anew (the file
// was removed) starts at a random value, not 0: counting up again from 0
// could reach a value an index or the DNS port ledger was current with, and
// a file made anew may even get the old one's inode number back, so they
// would trust what no longer holds (dns_port_ledger_test failed that way
// 2 runs in 6 on ext4).  Only equality is ever asked of the counter.
static absl::Status BumpGeneration(const std::string& dir) {
  const std::string path = dir + "/generation";
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("open ", path));
  uint64_t g = 0;
  if (pread(fd.get(), &g, sizeof(g), 0) != sizeof(g)) {
    if (getrandom(&g, sizeof(g), 0) != sizeof(g)) return ErrnoStatus(errno, "getrandom for " + path);
    g >>= 2;  // room to count up
  }
  ++g;
  if (pwrite(fd.get(), &g, sizeof(g), 0) != sizeof(g)) return ErrnoStatus(errno, absl::StrCat("write ", path));
  return absl::OkStatus();
}

absl::Status SandboxRecords::Quarantine(uint64_t cgroup_id) const {
  const std::string path = PathOf(cgroup_id), aside = path + ".corrupt";
  if (rename(path.c_str(), aside.c_str()) != 0) return ErrnoStatus(errno, absl::StrCat("rename ", path, " to ", aside));
  EGR_RETURN_IF_ERROR(BumpGeneration(dir_));
  return FsyncPath(dir_, O_RDONLY | O_DIRECTORY);
}

absl::Status SandboxRecords::Remove(uint64_t cgroup_id) const {
  const std::string path = PathOf(cgroup_id);
  if (unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, absl::StrCat("remove sandbox record ", path));
  }
  EGR_RETURN_IF_ERROR(BumpGeneration(dir_));
  return FsyncPath(dir_, O_RDONLY | O_DIRECTORY);
}

}  // namespace egressd::control
