// See gvisor_pod.h.  runsc 20221219 on a current kernel needs two things
// beyond the bundle:
//   - Its check that it was not handed the root network namespace asks
//     whether /proc/sys/net/core/rmem_default exists, which was true of the
//     root namespace only until those sysctls became per-namespace (6.x):
//     on this host every namespace has it, and runsc refuses with "cannot run
//     with network enabled in root network namespace".  So runsc runs in a
//     private mount namespace, entered from the pod's netns, whose
//     /proc/sys/net/core (that netns's) is an empty read-only tmpfs.  Nothing
//     outside that runsc sees the change.
//   - --ignore-cgroups: the lab host's cgroups are hybrid; the sandbox stays
//     in the caller's cgroup (which is the point: a cgroup registration of
//     that cgroup still sees nothing of the workload's sockets).
#include "gvisor_pod.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace egressd::lab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The pod's addresses and routes as `ip` prints them, to put back what runsc
// took (it removes the addresses it copied, so a second sandbox in the same
// pod would find none).
struct NetState {
  std::vector<std::string> addrs;   // "dev eth0 10.244.0.3/32" style arguments
  std::vector<std::string> routes[2];  // `ip -batch` lines: v4, v6
};

RunResult InNetns(const std::string& netns, std::vector<std::string> argv) {
  RunSpec s;
  s.argv = {"nsenter", "--net=" + netns, "--"};
  s.argv.insert(s.argv.end(), argv.begin(), argv.end());
  s.timeout = std::chrono::seconds(20);
  return Run(s);
}

NetState SaveNet(const std::string& netns) {
  NetState st;
  // "2: eth0    inet 10.244.0.3/32 scope global eth0\       valid_lft ..."
  RunResult a = InNetns(netns, {"ip", "-o", "addr", "show", "scope", "global"});
  for (absl::string_view line : absl::StrSplit(a.out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 4 || (f[2] != "inet" && f[2] != "inet6")) continue;
    std::string dev(absl::StripSuffix(f[1], ":"));
    st.addrs.push_back(absl::StrCat(f[3], " dev ", dev));
  }
  for (int f = 0; f < 2; ++f) {
    RunResult r = InNetns(netns, {"ip", f == 0 ? "-4" : "-6", "route", "show"});
    for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
      st.routes[f].push_back(absl::StrCat("route replace ", absl::StripAsciiWhitespace(line)));
    }
  }
  return st;
}

void RestoreNet(const std::string& netns, const NetState& st) {
  // Addresses first: a route via the gateway needs the on-link route back.
  RunSpec s;
  s.argv = {"nsenter", "--net=" + netns, "--", "ip", "-force", "-batch", "-"};
  for (const auto& a : st.addrs) absl::StrAppend(&s.stdin_data, "addr replace ", a, "\n");
  Run(s);
  for (int f = 0; f < 2; ++f) {
    s.argv = {"nsenter", "--net=" + netns, "--", "ip", f == 0 ? "-4" : "-6", "-force", "-batch", "-"};
    s.stdin_data.clear();
    // On-link routes before those via a gateway (`ip route show` lists the
    // default first).
    for (bool via : {false, true}) {
      for (const auto& r : st.routes[f]) {
        if (absl::StrContains(r, " via ") == via) absl::StrAppend(&s.stdin_data, r, "\n");
      }
    }
    Run(s);
  }
}

// Removes the container, its runsc state and its bundle when it goes.
class Sandbox {
 public:
  Sandbox() {
    static std::atomic<int> counter{0};
    id_ = absl::StrCat("egl-gvisor-", getpid(), "-", counter++);
    bundle_ = absl::StrCat("/tmp/", id_);
    root_ = absl::StrCat("/run/", id_);
  }
  ~Sandbox() {
    RunSpec del;
    del.argv = {"runsc", "--root", root_, "delete", "--force", id_};
    del.timeout = std::chrono::seconds(30);
    if (fs::exists(root_)) Run(del);
    std::error_code ec;
    fs::remove_all(bundle_, ec);
    fs::remove_all(root_, ec);
  }
  const std::string& id() const { return id_; }
  const std::string& bundle() const { return bundle_; }
  const std::string& root() const { return root_; }

 private:
  std::string id_, bundle_, root_;
};

json Bind(const std::string& path) {
  return {{"destination", path}, {"type", "bind"}, {"source", path}, {"options", {"rbind", "ro"}}};
}

absl::Status WriteBundle(const Sandbox& sb, const GvisorSpec& spec) {
  std::error_code ec;
  const fs::path rootfs = fs::path(sb.bundle()) / "rootfs";
  for (const char* d : {"usr", "etc", "proc", "tmp", "dev"}) fs::create_directories(rootfs / d, ec);
  if (ec) return absl::InternalError(absl::StrCat("mkdir ", rootfs.string(), ": ", ec.message()));
  // Merged /usr, as on the host.
  for (const char* l : {"bin", "lib", "lib64", "sbin"}) fs::create_directory_symlink(absl::StrCat("usr/", l), rootfs / l, ec);
  json mounts = json::array({{{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
                             {{"destination", "/tmp"}, {"type", "tmpfs"}, {"source", "tmpfs"}},
                             Bind("/usr"), Bind("/etc")});
  for (const auto& d : spec.readable) {
    fs::create_directories(rootfs / fs::path(d).relative_path(), ec);
    mounts.push_back(Bind(d));
  }
  // After /etc's bind, so they lie over it (OCI mounts in order).
  for (const auto& [source, destination] : spec.files) {
    if (!fs::is_regular_file(source, ec) || fs::path(destination).is_relative()) {
      return absl::InvalidArgumentError(
          absl::StrCat("RunInGvisor: file \"", source, "\" -> \"", destination, "\" (a host file, an absolute path)"));
    }
    mounts.push_back({{"destination", destination}, {"type", "bind"}, {"source", source}, {"options", {"bind", "ro"}}});
  }
  const json caps = json::array({"CAP_NET_RAW"});
  json config = {
      {"ociVersion", "1.0.2"},
      {"process",
       {{"user", {{"uid", 0}, {"gid", 0}}},
        {"args", spec.argv},
        {"env", {"PATH=/usr/sbin:/usr/bin"}},
        {"cwd", "/"},
        {"capabilities", {{"bounding", caps}, {"effective", caps}, {"permitted", caps}}}}},
      {"root", {{"path", "rootfs"}, {"readonly", true}}},
      {"hostname", sb.id()},
      {"mounts", mounts},
      {"linux",
       {{"namespaces", json::array({{{"type", "pid"}},
                                    {{"type", "mount"}},
                                    {{"type", "ipc"}},
                                    {{"type", "uts"}},
                                    {{"type", "network"}, {"path", spec.netns}}})}}}};
  std::ofstream out(fs::path(sb.bundle()) / "config.json");
  out << config.dump(2);
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("writing ", sb.bundle(), "/config.json"));
  return absl::OkStatus();
}

}  // namespace

absl::Status GvisorUsable() {
  if (access("/vmtest/config", F_OK) == 0) {
    return absl::FailedPreconditionError(
        "the vmtests guest (6.1 under TCG) has no runsc: gVisor's ptrace platform traces every syscall of the "
        "sandbox, which software emulation makes unusably slow; the gVisor pod runs on the host kernel");
  }
  if (ResolveInPath("runsc").find('/') == std::string::npos) {
    return absl::FailedPreconditionError("runsc is not installed (scripts/install-deps.sh installs Debian's)");
  }
  return absl::OkStatus();
}

absl::StatusOr<RunResult> RunInGvisor(const GvisorSpec& spec) {
  if (absl::Status s = GvisorUsable(); !s.ok()) return s;
  if (spec.argv.empty() || spec.argv[0].empty() || spec.argv[0][0] != '/') {
    return absl::InvalidArgumentError("RunInGvisor: argv[0] must be an absolute path");
  }
  Sandbox sb;
  if (absl::Status s = WriteBundle(sb, spec); !s.ok()) return s;
  const NetState net = SaveNet(spec.netns);
  RunSpec run;
  run.argv = {"nsenter",
              "--net=" + spec.netns,
              "--",
              "unshare",
              "--mount",
              "--propagation",
              "private",
              "--",
              "sh",
              "-ec",
              "mount -t tmpfs -o ro,size=4k egl-gvisor /proc/sys/net/core; exec \"$@\"",
              "sh",
              ResolveInPath("runsc"),
              "--root",
              sb.root(),
              "--platform=ptrace",
              "--network=sandbox",
              "--ignore-cgroups",
              "run",
              "--bundle",
              sb.bundle(),
              sb.id()};
  run.cgroup = spec.cgroup;
  run.timeout = spec.timeout;
  RunResult r = Run(run);
  RestoreNet(spec.netns, net);
  return r;
}

}  // namespace egressd::lab
