// Lab: namespaces, addresses, routes, cgroups, stale-object sweep.
#include "lab.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fmt/format.h"
#include "lab_internal.h"
#include "spdlog/spdlog.h"

namespace egressd::lab {
namespace fs = std::filesystem;
namespace {

constexpr char kNetnsDir[] = "/var/run/netns";

// Lab ids alive in this process (not stale even though their pid is ours).
std::mutex g_live_mu;
std::set<std::string> g_live_ids;

std::string RandomHex(int digits) {
  std::random_device rd;
  std::uniform_int_distribution<uint64_t> dist(0, (1ULL << (4 * digits)) - 1);
  return fmt::format("{:0{}x}", dist(rd), digits);
}

// Seconds since the epoch at which `pid` started, or -1.
double ProcessStartEpoch(pid_t pid) {
  std::string stat = ReadFileOr(absl::StrCat("/proc/", pid, "/stat"));
  size_t rp = stat.rfind(')');
  if (rp == std::string::npos) return -1;
  std::vector<std::string> f = absl::StrSplit(stat.substr(rp + 2), ' ');
  // After the comm field: f[0] is field 3 (state); starttime is field 22.
  uint64_t ticks;
  if (f.size() < 20 || !absl::SimpleAtoi(f[19], &ticks)) return -1;
  std::istringstream in(ReadFileOr("/proc/stat"));
  std::string line;
  uint64_t btime = 0;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "btime ")) (void)absl::SimpleAtoi(line.substr(6), &btime);
  }
  return static_cast<double>(btime) + static_cast<double>(ticks) / sysconf(_SC_CLK_TCK);
}

// An egl-<pid>-<hex> object made at `created` (epoch seconds) is stale when its
// owner is gone, or the pid now belongs to a process started after it.
bool OwnerGone(const std::string& id, pid_t pid, double created) {
  {
    std::lock_guard<std::mutex> l(g_live_mu);
    if (g_live_ids.count(id)) return false;
  }
  if (pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH) return true;
  double start = ProcessStartEpoch(pid);
  return start > 0 && start > created + 2;
}

double MtimeOf(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 0;
  return static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename());
  return out;
}

absl::Status IpBatch(const std::string& netns_name, const std::vector<std::string>& cmds) {
  std::string script;
  for (const auto& c : cmds) absl::StrAppend(&script, c, "\n");
  return RunChecked({"ip", "-n", netns_name, "-batch", "-"}, script);
}

absl::StatusOr<std::string> IpOutput(const std::vector<std::string>& argv) {
  RunSpec spec;
  spec.argv = argv;
  spec.timeout = std::chrono::seconds(5);
  RunResult r = Run(spec);
  if (r.exit_code != 0) return absl::InternalError(r.Describe());
  return r.out;
}

}  // namespace

// ---- sweep --------------------------------------------------------------------------

int Lab::SweepStale() {
  int removed = 0;
  static const std::regex kCg("^egl-([0-9]+)-([0-9a-f]+)$");
  static const std::regex kNs("^egl-([0-9]+)-([0-9a-f]+)-[ch]$");
  static const std::regex kLink("^egl-[0-9a-f]{4}-[ch]$");
  std::smatch m;

  const std::string cgroot = cgroup2_root();
  for (const std::string& name : cgroot.empty() ? std::vector<std::string>{} : ListDir(cgroot)) {
    if (!std::regex_match(name, m, kCg)) continue;
    std::string path = cgroot + "/" + name;
    int pid = std::stoi(m[1]);
    if (!OwnerGone(name.substr(4), pid, MtimeOf(path))) continue;
    spdlog::info("lab: removing stale cgroup {}", path);
    if (auto s = RemoveCgroupTree(path); !s.ok()) spdlog::warn("lab: {}", s.ToString());
    ++removed;
  }
  for (const std::string& name : ListDir(kNetnsDir)) {
    if (!std::regex_match(name, m, kNs)) continue;
    std::string path = std::string(kNetnsDir) + "/" + name;
    int pid = std::stoi(m[1]);
    std::string id = name.substr(4, name.size() - 6);
    if (!OwnerGone(id, pid, MtimeOf(path))) continue;
    spdlog::info("lab: removing stale netns {}", name);
    KillProcessesInNetns(path);
    if (auto s = RunChecked({"ip", "netns", "del", name}); !s.ok()) {
      spdlog::warn("lab: {}", s.ToString());
      unlink(path.c_str());
    }
    ++removed;
  }
  // Lab veths are created directly inside the lab namespaces; one in the root
  // namespace can only be a leftover.
  if (auto links = IpOutput({"ip", "-o", "link", "show"}); links.ok()) {
    for (absl::string_view line : absl::StrSplit(*links, '\n')) {
      std::vector<std::string> f = absl::StrSplit(line, ": ");
      if (f.size() < 2) continue;
      std::string name = f[1].substr(0, f[1].find('@'));
      if (!std::regex_match(name, kLink)) continue;
      spdlog::info("lab: removing stale link {}", name);
      (void)RunChecked({"ip", "link", "del", name});
      ++removed;
    }
  }
  return removed;
}

// ---- lifecycle ----------------------------------------------------------------------

Lab::Lab() : impl_(std::make_unique<Impl>()) {}

Lab::~Lab() { Teardown(); }

std::string Lab::client_netns() const { return std::string(kNetnsDir) + "/" + client_netns_name(); }
std::string Lab::hosts_netns() const { return std::string(kNetnsDir) + "/" + hosts_netns_name(); }

absl::StatusOr<std::unique_ptr<Lab>> Lab::Create() {
  SweepStale();
  std::unique_ptr<Lab> lab(new Lab());
  for (int attempt = 0;; ++attempt) {
    lab->id_ = fmt::format("{}-{}", getpid(), RandomHex(4));
    std::error_code ec;
    if (!fs::exists(lab->client_netns(), ec) && !fs::exists(lab->hosts_netns(), ec)) break;
    if (attempt > 20) return absl::AlreadyExistsError("could not pick a free lab id");
  }
  {
    std::lock_guard<std::mutex> l(g_live_mu);
    g_live_ids.insert(lab->id_);
  }
  const std::string r = RandomHex(4);
  lab->client_if_ = "egl-" + r + "-c";
  lab->hosts_if_ = "egl-" + r + "-h";
  lab->impl_->cgroup_base = cgroup2_root() + "/egl-" + lab->id_;
  if (absl::Status s = lab->Setup(); !s.ok()) return s;  // ~Lab cleans up
  return lab;
}

absl::Status Lab::Setup() {
  if (auto s = SetupNamespaces(); !s.ok()) return s;
  return StartLabServers(impl_.get(), hosts_netns(), hosts_ifname());
}

absl::Status Lab::SetupNamespaces() {
  for (const std::string& ns : {client_netns_name(), hosts_netns_name()}) {
    if (auto s = RunChecked({"ip", "netns", "add", ns}); !s.ok()) return s;
    (ns == client_netns_name() ? impl_->client_ns_added : impl_->hosts_ns_added) = true;
  }
  // Defaults first, so the veth ends inherit them when they are created.
  const std::vector<std::pair<std::string, std::string>> sysctls = {
      {"net.ipv6.conf.all.accept_dad", "0"},     {"net.ipv6.conf.default.accept_dad", "0"},
      {"net.ipv6.conf.all.accept_ra", "0"},      {"net.ipv6.conf.default.accept_ra", "0"},
      {"net.ipv6.conf.all.router_solicitations", "0"},
      {"net.ipv6.conf.default.router_solicitations", "0"},
      {"net.ipv4.conf.all.rp_filter", "0"},      {"net.ipv4.conf.default.rp_filter", "0"},
      {"net.ipv4.conf.all.accept_local", "1"},   {"net.ipv4.conf.default.accept_local", "1"},
      {"net.ipv4.icmp_ratelimit", "0"},          {"net.ipv6.icmp.ratelimit", "0"},
  };
  for (const std::string& ns : {client_netns(), hosts_netns()}) {
    for (const auto& [k, v] : sysctls) {
      if (auto s = SetSysctl(ns, k, v); !s.ok()) return s;
    }
  }
  if (auto s = RunChecked({"ip", "link", "add", client_if_, "netns", client_netns_name(), "type",
                           "veth", "peer", "name", hosts_if_, "netns", hosts_netns_name()});
      !s.ok())
    return s;
  std::vector<std::string> client = {
      "link set lo up",
      absl::StrCat("link set ", client_if_, " up"),
      absl::StrCat("addr add ", kClientV4, "/24 dev ", client_if_),
      absl::StrCat("addr add ", kClientV6, "/64 dev ", client_if_, " nodad"),
      absl::StrCat("route add default via ", kGatewayV4, " dev ", client_if_),
      absl::StrCat("route add default via ", kGatewayV6, " dev ", client_if_),
  };
  std::vector<std::string> hosts = {
      "link set lo up",
      absl::StrCat("link set ", hosts_if_, " up"),
      absl::StrCat("addr add ", kGatewayV4, "/24 dev ", hosts_if_),
      absl::StrCat("addr add ", kGatewayV6, "/64 dev ", hosts_if_, " nodad"),
  };
  for (const auto& a : HostAddressesV4()) hosts.push_back(absl::StrCat("addr add ", a, "/32 dev lo"));
  for (const auto& a : HostAddressesV6()) hosts.push_back(absl::StrCat("addr add ", a, "/128 dev lo"));
  if (auto s = IpBatch(client_netns_name(), client); !s.ok()) return s;
  if (auto s = IpBatch(hosts_netns_name(), hosts); !s.ok()) return s;

  // Wait for carrier on both ends and no tentative address anywhere.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    bool ready = true;
    for (const auto& [ns, dev] : {std::pair{client_netns_name(), client_if_},
                                  std::pair{hosts_netns_name(), hosts_if_}}) {
      auto link = IpOutput({"ip", "-n", ns, "-o", "link", "show", "dev", dev});
      auto tent = IpOutput({"ip", "-n", ns, "-6", "-o", "addr", "show", "tentative"});
      if (!link.ok()) return link.status();
      if (!tent.ok()) return tent.status();
      if (!absl::StrContains(*link, "LOWER_UP") || !absl::StrContains(*link, "state UP") ||
          !tent->empty())
        ready = false;
    }
    if (ready) return absl::OkStatus();
    if (std::chrono::steady_clock::now() > deadline)
      return absl::DeadlineExceededError("lab links did not come up / addresses stayed tentative");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Lab::Teardown() {
  if (!impl_) return;
  StopLabServers(impl_.get());
  std::error_code ec;
  if (fs::exists(impl_->cgroup_base, ec)) {
    if (auto s = RemoveCgroupTree(impl_->cgroup_base); !s.ok())
      spdlog::warn("lab teardown: {}", s.ToString());
  }
  for (const auto& [added, name, path] :
       {std::tuple{impl_->client_ns_added, client_netns_name(), client_netns()},
        std::tuple{impl_->hosts_ns_added, hosts_netns_name(), hosts_netns()}}) {
    if (!added) continue;
    KillProcessesInNetns(path);
    if (auto s = RunChecked({"ip", "netns", "del", name}); !s.ok())
      spdlog::warn("lab teardown: {}", s.ToString());
  }
  std::lock_guard<std::mutex> l(g_live_mu);
  g_live_ids.erase(id_);
  impl_.reset();
}

// ---- cgroups ------------------------------------------------------------------------

std::string Lab::cgroup2_root() {
  std::istringstream in(ReadFileOr("/proc/mounts"));
  std::string dev, mnt, type;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    if (f >> dev >> mnt >> type && type == "cgroup2") return mnt;
  }
  return "";
}

std::string Lab::cgroup_base() const { return impl_->cgroup_base; }

absl::StatusOr<std::string> Lab::MakeCgroup(std::string_view relative) {
  if (cgroup2_root().empty()) return absl::FailedPreconditionError("no cgroup2 mount");
  std::string rel(relative);
  while (!rel.empty() && rel.front() == '/') rel.erase(0, 1);
  while (!rel.empty() && rel.back() == '/') rel.pop_back();
  for (absl::string_view part : absl::StrSplit(rel, '/')) {
    if (part == ".." || part == ".")
      return absl::InvalidArgumentError(absl::StrCat("bad cgroup path: ", rel));
  }
  fs::path p = rel.empty() ? fs::path(impl_->cgroup_base) : fs::path(impl_->cgroup_base) / rel;
  std::error_code ec;
  fs::create_directories(p, ec);
  if (ec) return absl::InternalError(absl::StrCat("mkdir ", p.string(), ": ", ec.message()));
  return p.string();
}

// ---- counters -----------------------------------------------------------------------

namespace {
bool Parse(std::string_view addr, Addr16* a) {
  if (CanonicalAddress(addr, a)) return true;
  spdlog::error("lab: not an address: '{}'", addr);
  return false;
}
}  // namespace

uint64_t Lab::TcpAccepts(std::string_view addr, uint16_t port) const {
  Addr16 a;
  return Parse(addr, &a) ? impl_->counters.Tcp(a, port) : 0;
}

uint64_t Lab::UdpDatagrams(std::string_view addr, uint16_t port) const {
  Addr16 a;
  return Parse(addr, &a) ? impl_->counters.Udp(a, port) : 0;
}

uint64_t Lab::PacketsTo(std::string_view addr) const {
  Addr16 a;
  return Parse(addr, &a) ? impl_->counters.Packets(a, -1, -1, false) : 0;
}

uint64_t Lab::PacketsTo(std::string_view addr, int ip_proto) const {
  Addr16 a;
  return Parse(addr, &a) ? impl_->counters.Packets(a, ip_proto, -1, false) : 0;
}

uint64_t Lab::PacketsFirstHeader(std::string_view addr, int first_header) const {
  Addr16 a;
  return Parse(addr, &a) ? impl_->counters.Packets(a, -1, first_header, false) : 0;
}

uint64_t Lab::PacketsToWithIpOptions(std::string_view addr) const {
  Addr16 a;
  return Parse(addr, &a) ? impl_->counters.Packets(a, -1, -1, true) : 0;
}

std::vector<CapturedPacket> Lab::Captured() const { return impl_->counters.Log(); }
std::string Lab::CountersSummary() const { return impl_->counters.Summary(); }
void Lab::ResetCounters() { impl_->counters.Reset(); }

bool Lab::WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Lab::Settle(std::chrono::milliseconds d) { std::this_thread::sleep_for(d); }

// ---- probe --------------------------------------------------------------------------

namespace {
RunSpec ProbeSpec(const Lab& lab, const std::vector<std::string>& args, std::string_view cgroup,
                  bool hostile) {
  RunSpec spec;
  spec.argv.push_back(BinaryPath("egressd-probe"));
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.netns = lab.client_netns();
  spec.cgroup = std::string(cgroup);
  spec.hostile = hostile;
  return spec;
}
}  // namespace

RunResult Lab::Probe(const std::vector<std::string>& args, std::string_view cgroup, bool hostile,
                     std::chrono::milliseconds timeout) const {
  RunSpec spec = ProbeSpec(*this, args, cgroup, hostile);
  spec.timeout = timeout;
  return Run(spec);
}

absl::StatusOr<Background> Lab::StartProbe(const std::vector<std::string>& args,
                                           std::string_view cgroup, bool hostile) const {
  return Start(ProbeSpec(*this, args, cgroup, hostile));
}

}  // namespace egressd::lab
