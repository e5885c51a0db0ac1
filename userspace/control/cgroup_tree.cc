#include "userspace/control/cgroup_tree.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"

namespace egressd::control {
namespace {

std::vector<std::string> Children(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (e->d_type == DT_DIR && n != "." && n != "..") out.push_back(dir + "/" + n);
    }
    closedir(d);
  }
  return out;
}

bool HasProcesses(const std::string& dir) {
  std::ifstream procs(dir + "/cgroup.procs");
  std::string line;
  if (std::getline(procs, line) && !line.empty()) return true;
  for (const auto& c : Children(dir)) {
    if (HasProcesses(c)) return true;
  }
  return false;
}

void KillAll(const std::string& dir) {
  if (std::ofstream kill_file(dir + "/cgroup.kill"); kill_file) {
    kill_file << "1";
    kill_file.flush();
    if (kill_file) return;
  }
  std::ifstream procs(dir + "/cgroup.procs");
  for (pid_t pid; procs >> pid;) kill(pid, SIGKILL);
  for (const auto& c : Children(dir)) KillAll(c);
}

absl::Status RemoveTree(const std::string& dir) {
  for (const auto& c : Children(dir)) EGR_RETURN_IF_ERROR(RemoveTree(c));
  if (rmdir(dir.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("rmdir ", dir));
  return absl::OkStatus();
}

}  // namespace

absl::Status KillAndRemoveCgroup(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return absl::OkStatus();
  for (int i = 0; i < 200 && HasProcesses(dir); ++i) {
    KillAll(dir);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (HasProcesses(dir)) return absl::DeadlineExceededError(absl::StrCat("processes in ", dir, " survived SIGKILL for 2 s"));
  return RemoveTree(dir);
}

}  // namespace egressd::control
