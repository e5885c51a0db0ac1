// egressctl's subcommands.  Each returns the process exit code: 0 success,
// 1 a failure at run time, 2 bad input (nothing was changed).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loader/environment.h"

namespace egressd::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitBadInput = 2;

struct PolicyFlags {
  std::vector<std::string> egress;
  std::string floor = "connected";
  std::string on_deny = "reject";
};

int CmdLoad(const Paths& paths);
int CmdUnload(const Paths& paths, bool force);
int CmdProbe(const Paths& paths);
int CmdStatus(const Paths& paths, bool json);

int CmdSandboxAdd(const Paths& paths, const std::string& cgroup, const PolicyFlags& flags);
int CmdSandboxRemove(const Paths& paths, const std::string& cgroup);
int CmdSandboxContain(const Paths& paths, const std::string& cgroup);

int CmdRun(const Paths& paths, const PolicyFlags& flags, const std::string& user,
           const std::vector<std::string>& command);

}  // namespace egressd::cli
