// sandbox apply|get|list|delete: the daemon's control API (docs/api.md) from
// the command line.  apply takes sandbox add's flags and sends them as the
// JSON body of PUT /v1/sandboxes/{id} (files are read here and sent as
// text); the daemon compiles under its own deployment config.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/egressctl/api_request.h"
#include "tools/egressctl/commands.h"
#include "tools/egressctl/detail_text.h"
#include "userspace/daemon/client.h"
#include "userspace/daemon/sandbox_request.h"

namespace egressd::cli {
namespace {

// Exit codes as sandbox add's: 2 for the caller's input, 3 when the node
// cannot contain, 1 otherwise.
int ExitFor(int status) {
  if (status >= 200 && status < 300) return kExitOk;
  if (status == 400 || status == 404) return kExitBadInput;
  if (status == 409) return kExitNodeCannotContain;
  return kExitFailure;
}

int Print(const daemon::ClientResponse& r, const ApiFlags& api, const std::function<void(const nlohmann::json&)>& text) {
  const bool ok = r.status >= 200 && r.status < 300;
  if (!ok) {
    if (r.body.is_object() && r.body.contains("error")) {
      std::fprintf(stderr, "egressctl: the daemon answered %d (%s):\n", r.status,
                   r.body["error"].value("code", "").c_str());
      for (const auto& line : r.body["error"].value("reasons", nlohmann::json::array())) {
        std::fprintf(stderr, "  %s\n", line.get<std::string>().c_str());
      }
    } else {
      std::fprintf(stderr, "egressctl: the daemon answered %d\n", r.status);
    }
    if (r.status == 409 && r.body.is_object() && r.body.contains("error") &&
        r.body["error"].value("code", "") != "node_cannot_contain") {
      return kExitBadInput;
    }
    return ExitFor(r.status);
  }
  if (api.output == "json") {
    std::printf("%s\n", r.body.dump(2).c_str());
  } else {
    text(r.body);
  }
  return kExitOk;
}

void SandboxLine(const nlohmann::json& s) {
  // Where it is judged: its cgroup, and the node end of its veth (an
  // interface-only sandbox has no cgroup).
  std::string where;
  if (!s.value("cgroup", "").empty()) where = "cgroup " + s.value("cgroup", "");
  if (!s.value("interface", "").empty()) {
    where += absl::StrCat(where.empty() ? "" : " ", "interface ", s.value("interface", ""));
  }
  std::printf("%-24s %-8s %s%s\n", s["id"].is_string() ? s["id"].get<std::string>().c_str() : "-",
              s.value("enforced", false) ? "enforced" : s.value("audit_only", false) ? "AUDIT-ONLY" : "NOT-ENFORCED",
              where.c_str(),
              s["dns"].is_object() ? absl::StrCat(" dns ", s["dns"].value("endpoint", ""),
                                                  s["dns"].value("served", false) ? "" : " (not served)").c_str()
                                   : "");
}

absl::StatusOr<daemon::ClientResponse> Ask(const Paths& paths, const ApiFlags& api, const std::string& method,
                                           const std::string& target, const std::string& body = "") {
  return daemon::Call(api.socket.empty() ? daemon::DefaultSocketPath(paths) : api.socket, method, target, body);
}

}  // namespace

int CmdSandboxApply(const Paths& paths, const ApiFlags& api, const std::string& id, const std::string& cgroup,
                    const PolicyFlags& flags, const SandboxFlags& sandbox) {
  std::vector<std::string> bad;
  if (flags.floor_given || !flags.config.empty()) {
    bad.push_back("--floor and --config: the daemon's deployment config sets the floor (no request lowers it)");
  }
  if (!sandbox.netns.empty()) bad.push_back("--netns: not part of the API yet");
  if (flags.accept_uncontained_packet_sockets) {
    bad.push_back("--accept-uncontained-packet-sockets: the daemon's own setting (egressd --accept-uncontained-packet-sockets)");
  }
  daemon::SandboxRequest r = RequestFromFlags(flags, sandbox, cgroup, bad);
  if (!bad.empty()) {
    std::fprintf(stderr, "egressctl: invalid input, nothing was changed:\n  %s\n", absl::StrJoin(bad, "\n  ").c_str());
    return kExitBadInput;
  }
  auto resp = Ask(paths, api, "PUT", "/v1/sandboxes/" + id, daemon::ToJson(r).dump());
  if (!resp.ok()) {
    std::fprintf(stderr, "egressctl: %s\n", std::string(resp.status().message()).c_str());
    return kExitFailure;
  }
  return Print(*resp, api, [](const nlohmann::json& s) {
    for (const auto& w : s.value("warnings", nlohmann::json::array())) {
      std::fprintf(stderr, "egressctl: warning: %s\n", w.get<std::string>().c_str());
    }
    SandboxLine(s);
  });
}

int CmdSandboxGet(const Paths& paths, const ApiFlags& api, const std::string& id) {
  auto resp = Ask(paths, api, "GET", "/v1/sandboxes/" + id);
  if (!resp.ok()) {
    std::fprintf(stderr, "egressctl: %s\n", std::string(resp.status().message()).c_str());
    return kExitFailure;
  }
  return Print(*resp, api, [](const nlohmann::json& s) {
    SandboxLine(s);
    if (s["policy"].is_object()) std::printf("%s\n", s["policy"].dump(2).c_str());
    PrintSandboxDetail(s);
  });
}

int CmdSandboxList(const Paths& paths, const ApiFlags& api) {
  auto resp = Ask(paths, api, "GET", "/v1/sandboxes");
  if (!resp.ok()) {
    std::fprintf(stderr, "egressctl: %s\n", std::string(resp.status().message()).c_str());
    return kExitFailure;
  }
  return Print(*resp, api, [](const nlohmann::json& b) {
    for (const auto& s : b["sandboxes"]) SandboxLine(s);
  });
}

int CmdSandboxDelete(const Paths& paths, const ApiFlags& api, const std::string& id) {
  auto resp = Ask(paths, api, "DELETE", "/v1/sandboxes/" + id);
  if (!resp.ok()) {
    std::fprintf(stderr, "egressctl: %s\n", std::string(resp.status().message()).c_str());
    return kExitFailure;
  }
  return Print(*resp, api, [&](const nlohmann::json&) { std::printf("deleted %s\n", id.c_str()); });
}

}  // namespace egressd::cli
