#include "userspace/daemon/sandbox_request.h"

#include <cstdlib>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "userspace/control/sandbox_runtime.h"
#include "userspace/daemon/pod_cgroup.h"

namespace egressd::daemon {
namespace {

std::string Quote(const std::string& s) { return nlohmann::json(s).dump(); }

const char* TypeName(const nlohmann::json& v) { return v.type_name(); }

class Reader {
 public:
  explicit Reader(const nlohmann::json& body) : body_(body) {}

  std::optional<std::string> String(const char* key) {
    seen_.insert(key);
    auto it = body_.find(key);
    if (it == body_.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) {
      Error(key, absl::StrCat("must be a string, not ", TypeName(*it)));
      return std::nullopt;
    }
    return it->get<std::string>();
  }
  // A declaration: YAML text, or a JSON object (JSON is YAML).
  std::optional<std::string> Document(const char* key) {
    seen_.insert(key);
    auto it = body_.find(key);
    if (it == body_.end() || it->is_null()) return std::nullopt;
    if (it->is_object()) return it->dump();
    if (!it->is_string()) {
      Error(key, absl::StrCat("must be a YAML text or a JSON object, not ", TypeName(*it)));
      return std::nullopt;
    }
    return it->get<std::string>();
  }
  std::vector<std::string> Strings(const char* key) {
    seen_.insert(key);
    std::vector<std::string> out;
    auto it = body_.find(key);
    if (it == body_.end() || it->is_null()) return out;
    if (!it->is_array()) {
      Error(key, absl::StrCat("must be a list of strings, not ", TypeName(*it)));
      return out;
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const auto& v = (*it)[i];
      if (!v.is_string()) {
        Error(absl::StrCat(key, "[", i, "]"), absl::StrCat("must be a string, not ", TypeName(v)));
        continue;
      }
      out.push_back(v.get<std::string>());
    }
    return out;
  }
  bool Bool(const char* key) {
    seen_.insert(key);
    auto it = body_.find(key);
    if (it == body_.end() || it->is_null()) return false;
    if (!it->is_boolean()) {
      Error(key, absl::StrCat("must be true or false, not ", TypeName(*it)));
      return false;
    }
    return it->get<bool>();
  }
  void Labels(control::Labels& into) {
    seen_.insert("labels");
    auto it = body_.find("labels");
    if (it == body_.end() || it->is_null()) return;
    if (!it->is_object()) {
      Error("labels", absl::StrCat("must be an object of strings, not ", TypeName(*it)));
      return;
    }
    for (const auto& [k, v] : it->items()) {
      const std::string field = absl::StrCat("labels.", k);
      if (!v.is_string()) {
        Error(field, absl::StrCat("must be a string, not ", TypeName(v)));
        continue;
      }
      if (absl::StartsWith(k, "egressd/")) {
        Error(field, "labels under \"egressd/\" are the daemon's own");
        continue;
      }
      if (absl::Status s = control::ParseLabel(absl::StrCat(k, "=", v.get<std::string>()), into); !s.ok()) {
        Error(field, std::string(s.message()));
      }
    }
  }
  void Unknown() {
    for (const auto& [k, v] : body_.items()) {
      if (!seen_.count(k)) Error(k, "is not a field of a sandbox (docs/api.md)");
    }
  }
  void Error(const std::string& field, const std::string& what) {
    errors_.push_back(absl::StrCat("field ", field, ": ", what));
  }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  const nlohmann::json& body_;
  std::set<std::string> seen_;
  std::vector<std::string> errors_;
};

}  // namespace

absl::Status CheckSandboxId(const std::string& id) {
  bool ok = !id.empty() && id.size() <= 63 && absl::ascii_isalnum(static_cast<unsigned char>(id[0]));
  for (char c : id) ok &= absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("sandbox id ", Quote(id),
                   ": 1 to 63 of A-Z a-z 0-9 . _ - starting with a letter or digit (a pod name or UID)"));
}

absl::StatusOr<SandboxRequest> ParseSandboxRequest(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded()) return absl::InvalidArgumentError("the request body is not JSON");
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat("the request body must be a JSON object, not ", j.type_name()));
  Reader r(j);
  SandboxRequest out;
  if (auto c = r.String("cgroup")) out.cgroup = *c;
  if (auto u = r.String("pod_uid")) out.pod_uid = *u;
  if (auto v = r.String("interface")) out.interface = *v;
  if (auto v = r.String("interface_netns")) out.interface_netns = *v;
  if (!out.cgroup.empty() && !out.pod_uid.empty()) {
    r.Error("cgroup", absl::StrCat(Quote(out.cgroup), " and pod_uid ", Quote(out.pod_uid),
                                   " are both given: exactly one of them names the sandbox"));
  } else if (out.cgroup.empty() && out.pod_uid.empty()) {
    if (!out.by_interface()) {
      r.Error("cgroup", "is required, or pod_uid, interface or interface_netns: the sandbox's cgroup v2 "
                        "directory, its Kubernetes pod UID, or the node end of its pod's veth");
    }
  } else if (!out.cgroup.empty() && out.cgroup[0] != '/') {
    r.Error("cgroup", absl::StrCat(Quote(out.cgroup), " must be an absolute path"));
  } else if (!out.pod_uid.empty()) {
    if (absl::Status s = CheckPodUid(out.pod_uid); !s.ok()) {
      r.Error("pod_uid", std::string(absl::StripPrefix(s.message(), "field pod_uid ")));
    }
  }
  r.Labels(out.labels);
  out.task = r.Document("task");
  out.runtime = r.Document("runtime");
  out.kind = r.String("kind");
  out.egress = r.Strings("egress");
  out.grants = r.Strings("grants");
  out.compose = r.Bool("compose");
  out.on_deny = r.String("on_deny");
  out.audit_only = r.Bool("audit_only");
  out.strict_audit = r.Bool("strict_audit");
  if (auto v = r.String("dns_endpoint4")) out.dns_endpoint4 = *v;
  if (auto v = r.String("dns_endpoint6")) out.dns_endpoint6 = *v;
  out.require_socket_containment = r.Bool("require_socket_containment");
  if (auto v = r.String("sandbox_runtime")) out.sandbox_runtime = *v;
  if (auto v = r.String("runtime_class")) out.runtime_class = *v;
  if (auto hint = control::ParseRuntimeHint(out.sandbox_runtime, "field sandbox_runtime"); !hint.ok()) {
    r.Error("sandbox_runtime", std::string(absl::StripPrefix(hint.status().message(), "field sandbox_runtime ")));
  } else if (auto s = control::CheckRuntimeRegistration(*hint, out.by_interface(), "field sandbox_runtime",
                                                        "field interface or interface_netns");
             !s.ok()) {
    r.Error("sandbox_runtime", std::string(absl::StripPrefix(s.message(), "field sandbox_runtime ")));
  }
  if (!out.interface.empty() && !out.interface_netns.empty()) {
    r.Error("interface_netns", "and field interface: give one of the two");
  }
  r.Unknown();
  if (!r.errors().empty()) return absl::InvalidArgumentError(absl::StrJoin(r.errors(), "\n"));
  return out;
}

policy::PolicyInputs ToPolicyInputs(const SandboxRequest& r, const std::optional<policy::InputText>& config,
                                    bool dns_served) {
  policy::PolicyInputs in;  // the labels are the JSON field names already
  in.config = config;
  if (r.on_deny) in.on_deny = *r.on_deny;
  if (r.task) in.task = policy::InputText::Inline("task", *r.task);
  if (r.runtime) in.runtime = policy::InputText::Inline("runtime", *r.runtime);
  in.kind = r.kind;
  in.run_targets = r.egress;
  in.grants = r.grants;
  in.ships_services = r.compose;
  in.dns_served = dns_served;
  in.audit = {.audit_only = r.audit_only, .strict = r.strict_audit};
  const char* psl = std::getenv("EGRESSD_PUBLIC_SUFFIX_LIST");
  if (psl != nullptr && *psl != '\0') in.public_suffix_path = psl;
  return in;
}

nlohmann::json ToJson(const SandboxRequest& r) {
  nlohmann::json j = nlohmann::json::object();
  if (!r.cgroup.empty()) j["cgroup"] = r.cgroup;
  if (!r.pod_uid.empty()) j["pod_uid"] = r.pod_uid;
  if (!r.labels.empty()) j["labels"] = r.labels;
  if (r.task) j["task"] = *r.task;
  if (r.runtime) j["runtime"] = *r.runtime;
  if (r.kind) j["kind"] = *r.kind;
  if (!r.egress.empty()) j["egress"] = r.egress;
  if (!r.grants.empty()) j["grants"] = r.grants;
  if (r.compose) j["compose"] = true;
  if (r.on_deny) j["on_deny"] = *r.on_deny;
  if (r.audit_only) j["audit_only"] = true;
  if (r.strict_audit) j["strict_audit"] = true;
  if (!r.dns_endpoint4.empty()) j["dns_endpoint4"] = r.dns_endpoint4;
  if (!r.dns_endpoint6.empty()) j["dns_endpoint6"] = r.dns_endpoint6;
  if (r.require_socket_containment) j["require_socket_containment"] = true;
  if (!r.interface.empty()) j["interface"] = r.interface;
  if (!r.interface_netns.empty()) j["interface_netns"] = r.interface_netns;
  if (!r.sandbox_runtime.empty()) j["sandbox_runtime"] = r.sandbox_runtime;
  if (!r.runtime_class.empty()) j["runtime_class"] = r.runtime_class;
  return j;
}

absl::Status ResolveRuntimeClass(SandboxRequest& req, const std::map<std::string, std::string>& classes) {
  if (req.runtime_class.empty()) return absl::OkStatus();
  const std::string field = absl::StrCat("field runtime_class ", Quote(req.runtime_class));
  auto it = classes.find(req.runtime_class);
  if (it == classes.end()) {
    std::vector<std::string> known;
    for (const auto& [name, runtime] : classes) known.push_back(Quote(name));
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": the deployment's runtimeClasses do not name it (",
        known.empty() ? std::string("they name none") : "they name " + absl::StrJoin(known, ", "),
        "): egressd cannot tell whether the node's cgroup hooks see its pods' traffic"));
  }
  if (!req.sandbox_runtime.empty() && req.sandbox_runtime != it->second) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is runtime ", Quote(it->second),
                                                   " in the deployment's runtimeClasses, but field sandbox_runtime "
                                                   "says ",
                                                   Quote(req.sandbox_runtime)));
  }
  req.sandbox_runtime = it->second;
  auto hint = control::ParseRuntimeHint(req.sandbox_runtime, field);
  if (!hint.ok()) return hint.status();
  return control::CheckRuntimeRegistration(*hint, req.by_interface(),
                                           absl::StrCat(field, " is runtime"),
                                           "field interface or interface_netns");
}

}  // namespace egressd::daemon
