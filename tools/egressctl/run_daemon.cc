#include "tools/egressctl/run_daemon.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/egressctl/api_request.h"
#include "userspace/daemon/client.h"

namespace egressd::cli {
namespace {

std::string Reasons(const daemon::ClientResponse& r) {
  if (!r.body.is_object() || !r.body.contains("error")) return absl::StrCat("the daemon answered ", r.status);
  std::vector<std::string> lines;
  for (const auto& l : r.body["error"].value("reasons", nlohmann::json::array())) lines.push_back(l.get<std::string>());
  return absl::StrJoin(lines, "\n");
}

}  // namespace

std::optional<std::string> RunDaemonSocket(const Paths& paths, const PolicyFlags& flags, const RunFlags& run) {
  const std::string socket = daemon::DefaultSocketPath(paths);
  auto health = daemon::Call(socket, "GET", "/healthz");
  if (!health.ok() || health->status != 200) return std::nullopt;
  if (flags.floor_given || !flags.config.empty() || !run.upstream_dns.empty()) {
    spdlog::info("a daemon answers on {}, but --floor, --config or --upstream-dns make this run its own "
                 "deployment: registered directly, with its own DNS proxy",
                 socket);
    return std::nullopt;
  }
  return socket;
}

absl::StatusOr<daemon::SandboxRequest> RunRequest(const PolicyFlags& flags, const SandboxFlags& sandbox,
                                                  const std::string& cgroup) {
  std::vector<std::string> bad;
  daemon::SandboxRequest r = RequestFromFlags(flags, sandbox, cgroup, bad);
  if (!bad.empty()) return absl::InvalidArgumentError(absl::StrJoin(bad, "\n"));
  return r;
}

absl::Status RegisterWithDaemon(const std::string& socket, const std::string& id, const daemon::SandboxRequest& r) {
  auto resp = daemon::Call(socket, "PUT", "/v1/sandboxes/" + id, daemon::ToJson(r).dump());
  if (!resp.ok()) return absl::UnavailableError(absl::StrCat("registering with the daemon: ", resp.status().message()));
  if (resp->status == 400) return absl::InvalidArgumentError(Reasons(*resp));
  if (resp->status == 409) return absl::FailedPreconditionError(Reasons(*resp));
  if (resp->status != 201 && resp->status != 200) {
    return absl::UnavailableError(absl::StrCat("the daemon refused the sandbox (", resp->status, "): ", Reasons(*resp)));
  }
  if (!resp->body.value("enforced", false) && !resp->body.value("audit_only", false)) {
    return absl::InternalError(absl::StrCat("the daemon registered the sandbox but does not say it is enforced: ",
                                            resp->body.dump()));
  }
  for (const auto& w : resp->body.value("warnings", nlohmann::json::array())) {
    spdlog::warn("{}", w.get<std::string>());
  }
  spdlog::info("sandbox {} registered with the daemon on {}", id, socket);
  return absl::OkStatus();
}

absl::Status DeleteFromDaemon(const std::string& socket, const std::string& id) {
  auto resp = daemon::Call(socket, "DELETE", "/v1/sandboxes/" + id);
  if (!resp.ok()) return absl::UnavailableError(absl::StrCat("unregistering with the daemon: ", resp.status().message()));
  if (resp->status == 404) return absl::NotFoundError(Reasons(*resp));
  if (resp->status != 200) return absl::InternalError(absl::StrCat("DELETE /v1/sandboxes/", id, ": ", Reasons(*resp)));
  return absl::OkStatus();
}

}  // namespace egressd::cli
