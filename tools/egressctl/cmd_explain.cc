// explain SANDBOX DEST[:PORT]: which rule of a registered sandbox's policy
// allows or denies a destination, and why, as the daemon judges it
// (GET /v1/sandboxes/{id}/explain; userspace/policy/explain.h).
#include <cctype>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "tools/egressctl/commands.h"
#include "userspace/daemon/client.h"
#include "userspace/policy/explain.h"

namespace egressd::cli {
namespace {

// Percent-encodes everything but unreserved characters (an IPv6 address's
// colons and brackets travel as %3A, %5B, %5D).
std::string Escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

}  // namespace

int CmdExplain(const Paths& paths, const ApiFlags& api, const std::string& id, const std::string& dest,
               const std::string& proto) {
  // The caller's input is checked here too, so a typo is named before any
  // daemon is asked (and without one).
  auto parsed = policy::ParseDestination(dest);
  if (!parsed.ok()) {
    std::fprintf(stderr, "egressctl: %s\n", std::string(parsed.status().message()).c_str());
    return kExitBadInput;
  }
  if (auto p = policy::ParseProto(proto); !p.ok()) {
    std::fprintf(stderr, "egressctl: --proto: %s\n", std::string(p.status().message()).c_str());
    return kExitBadInput;
  }
  const std::string target = absl::StrCat("/v1/sandboxes/", Escape(id), "/explain?dest=", Escape(dest),
                                          "&proto=", Escape(proto));
  auto resp = daemon::Call(api.socket.empty() ? daemon::DefaultSocketPath(paths) : api.socket, "GET", target, "");
  if (!resp.ok()) {
    std::fprintf(stderr, "egressctl: %s\n", std::string(resp.status().message()).c_str());
    return kExitFailure;
  }
  if (resp->status != 200) {
    const nlohmann::json err = resp->body.is_object() ? resp->body.value("error", nlohmann::json::object())
                                                      : nlohmann::json::object();
    std::fprintf(stderr, "egressctl: the daemon answered %d (%s):\n", resp->status, err.value("code", "").c_str());
    for (const auto& line : err.value("reasons", nlohmann::json::array())) {
      std::fprintf(stderr, "  %s\n", line.get<std::string>().c_str());
    }
    return resp->status == 400 || resp->status == 404 ? kExitBadInput : kExitFailure;
  }
  if (api.output == "json") {
    std::printf("%s\n", resp->body.dump(2).c_str());
  } else {
    std::printf("%s %s port %d/%s: %s", id.c_str(), resp->body.value("dest", "").c_str(),
                resp->body.value("port", 0), resp->body.value("proto", "").c_str(),
                resp->body.value("text", "").c_str());
  }
  return kExitOk;
}

}  // namespace egressd::cli
