#include "daemon_harness.h"

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "egressd_env.h"

namespace egressd::test {

std::string DaemonSocket() { return Shared().runtime_dir() + "/egressd.sock"; }

absl::StatusOr<lab::Background> StartDaemonProcess(const std::string& config,
                                                   const std::vector<std::string>& extra,
                                                   std::chrono::milliseconds ready_within) {
  lab::RunSpec s;
  s.netns = Shared().lab().node_netns();
  s.env = Shared().CtlEnv();
  s.argv = {lab::BinaryPath("egressd"), "--config", config, "--socket", DaemonSocket()};
  s.argv.insert(s.argv.end(), extra.begin(), extra.end());
  s.timeout = std::chrono::minutes(10);
  auto bg = lab::Start(s);
  if (!bg.ok()) return bg.status();
  auto line = bg->ReadOutLine(std::chrono::milliseconds(static_cast<int64_t>(ready_within.count() * TimeScale())));
  if (!line || !absl::StartsWith(*line, "ready:")) {
    const std::string why = absl::StrCat("egressd never said ready (its first line: ", line ? *line : "(none)",
                                         "); stderr: ", bg->err());
    bg->Stop();
    return absl::DeadlineExceededError(why);
  }
  return std::move(*bg);
}

daemon::ClientResponse CallDaemon(const std::string& method, const std::string& target,
                                  const nlohmann::json& body) {
  auto r = daemon::Call(DaemonSocket(), method, target, body.is_null() ? "" : body.dump());
  EXPECT_TRUE(r.ok()) << method << " " << target << ": " << r.status();
  return r.ok() ? *r : daemon::ClientResponse{};
}

void DeleteSandboxBestEffort(const std::string& socket_path, const std::string& id) {
  (void)daemon::Call(socket_path, "DELETE", "/v1/sandboxes/" + id);
}

nlohmann::json JsonObjectOut(const lab::RunResult& r) {
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_TRUE(j.is_object()) << r.Describe();
  return j.is_object() ? j : nlohmann::json::object();
}

}  // namespace egressd::test
