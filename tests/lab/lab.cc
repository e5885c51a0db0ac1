// Lab: namespaces, addresses, routes, cgroups, stale-object sweep.
#include "lab.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <linux/filter.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
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
  // n(ode), w(orld), p<N> (pods); c and h are the two-namespace lab's.
  static const std::regex kNs("^egl-([0-9]+)-([0-9a-f]+)-(n|w|p[0-9]+|c|h)$");
  static const std::regex kLink("^egl-[0-9a-f]{4}-(up|w|p[0-9]+|c|h)$");
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
    std::string id = absl::StrCat(m[1].str(), "-", m[2].str());
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

namespace {

// Namespace defaults, set before any veth end exists so the ends inherit them.
const std::vector<std::pair<std::string, std::string>>& NamespaceSysctls() {
  static const std::vector<std::pair<std::string, std::string>> v = {
      {"net.ipv6.conf.all.accept_dad", "0"},     {"net.ipv6.conf.default.accept_dad", "0"},
      {"net.ipv6.conf.all.accept_ra", "0"},      {"net.ipv6.conf.default.accept_ra", "0"},
      {"net.ipv6.conf.all.router_solicitations", "0"},
      {"net.ipv6.conf.default.router_solicitations", "0"},
      {"net.ipv4.conf.all.rp_filter", "0"},      {"net.ipv4.conf.default.rp_filter", "0"},
      {"net.ipv4.conf.all.accept_local", "1"},   {"net.ipv4.conf.default.accept_local", "1"},
      {"net.ipv4.icmp_ratelimit", "0"},          {"net.ipv6.icmp.ratelimit", "0"},
  };
  return v;
}

// The node routes as a CNI's host does: forwarding on, no redirects (each pod
// is its own link), and source-routed IPv4 handled rather than dropped on
// receipt, so a loose source route reaches the world as a real node forwards
// it and the lab can show where egressd stops it.
const std::vector<std::pair<std::string, std::string>>& NodeSysctls() {
  static const std::vector<std::pair<std::string, std::string>> v = {
      {"net.ipv4.ip_forward", "1"},
      {"net.ipv6.conf.all.forwarding", "1"},
      {"net.ipv6.conf.default.forwarding", "1"},
      {"net.ipv4.conf.all.send_redirects", "0"},
      {"net.ipv4.conf.default.send_redirects", "0"},
      {"net.ipv4.conf.all.accept_source_route", "1"},
      {"net.ipv4.conf.default.accept_source_route", "1"},
  };
  return v;
}

// Waits for carrier on every (netns, device) and no tentative address in them.
absl::Status WaitLinksUp(const std::vector<std::pair<std::string, std::string>>& links) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    bool ready = true;
    for (const auto& [ns, dev] : links) {
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
    // Carrier and DAD state change without a signal we can wait on here.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

Lab::Lab() : impl_(std::make_unique<Impl>()) {}

Lab::~Lab() { Teardown(); }

std::string Lab::node_netns() const { return std::string(kNetnsDir) + "/" + node_netns_name(); }
std::string Lab::world_netns() const { return std::string(kNetnsDir) + "/" + world_netns_name(); }

uint32_t Lab::NodeIfindex(const std::string& ifname) const {
  uint32_t idx = 0;
  absl::Status st = InNetns(node_netns(), [&] {
    idx = if_nametoindex(ifname.c_str());
    return absl::OkStatus();
  });
  return st.ok() ? idx : 0;
}

absl::StatusOr<std::unique_ptr<Lab>> Lab::Create() {
  SweepStale();
  std::unique_ptr<Lab> lab(new Lab());
  for (int attempt = 0;; ++attempt) {
    lab->id_ = fmt::format("{}-{}", getpid(), RandomHex(4));
    std::error_code ec;
    if (!fs::exists(lab->node_netns(), ec) && !fs::exists(lab->world_netns(), ec)) break;
    if (attempt > 20) return absl::AlreadyExistsError("could not pick a free lab id");
  }
  {
    std::lock_guard<std::mutex> l(g_live_mu);
    g_live_ids.insert(lab->id_);
  }
  lab->link_tag_ = "egl-" + RandomHex(4);
  lab->uplink_if_ = lab->link_tag_ + "-up";
  lab->world_if_ = lab->link_tag_ + "-w";
  lab->impl_->cgroup_base = cgroup2_root() + "/egl-" + lab->id_;
  if (absl::Status s = lab->Setup(); !s.ok()) return s;  // ~Lab cleans up
  return lab;
}

absl::Status Lab::Setup() {
  if (auto s = SetupNodeAndWorld(); !s.ok()) return s;
  if (auto pod = AddPod(); !pod.ok()) return pod.status();
  return StartLabServers(impl_.get(), world_netns(), world_if_);
}

absl::Status Lab::AddNamespace(const std::string& name) {
  if (auto s = RunChecked({"ip", "netns", "add", name}); !s.ok()) return s;
  impl_->netns_added.push_back(name);
  for (const auto& [k, v] : NamespaceSysctls()) {
    if (auto s = SetSysctl(std::string(kNetnsDir) + "/" + name, k, v); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Lab::SetupNodeAndWorld() {
  if (auto s = AddNamespace(node_netns_name()); !s.ok()) return s;
  if (auto s = AddNamespace(world_netns_name()); !s.ok()) return s;
  for (const auto& [k, v] : NodeSysctls()) {
    if (auto s = SetSysctl(node_netns(), k, v); !s.ok()) return s;
  }
  if (auto s = RunChecked({"ip", "link", "add", uplink_if_, "netns", node_netns_name(), "type",
                           "veth", "peer", "name", world_if_, "netns", world_netns_name()});
      !s.ok())
    return s;
  std::vector<std::string> node = {
      "link set lo up",
      absl::StrCat("link set ", uplink_if_, " up"),
      absl::StrCat("addr add ", kNodeUplinkV4, "/30 dev ", uplink_if_),
      absl::StrCat("addr add ", kNodeUplinkV6, "/64 dev ", uplink_if_, " nodad"),
      absl::StrCat("route add default via ", kWorldLinkV4, " dev ", uplink_if_),
      absl::StrCat("route add default via ", kWorldLinkV6, " dev ", uplink_if_),
  };
  std::vector<std::string> world = {
      "link set lo up",
      absl::StrCat("link set ", world_if_, " up"),
      absl::StrCat("addr add ", kWorldLinkV4, "/30 dev ", world_if_),
      absl::StrCat("addr add ", kWorldLinkV6, "/64 dev ", world_if_, " nodad"),
      absl::StrCat("route add ", kPodRangeV4, " via ", kNodeUplinkV4, " dev ", world_if_),
      absl::StrCat("route add ", kPodRangeV6, " via ", kNodeUplinkV6, " dev ", world_if_),
  };
  for (const auto& a : HostAddressesV4()) world.push_back(absl::StrCat("addr add ", a, "/32 dev lo"));
  for (const auto& a : HostAddressesV6()) world.push_back(absl::StrCat("addr add ", a, "/128 dev lo"));
  if (auto s = IpBatch(node_netns_name(), node); !s.ok()) return s;
  if (auto s = IpBatch(world_netns_name(), world); !s.ok()) return s;
  return WaitLinksUp({{node_netns_name(), uplink_if_}, {world_netns_name(), world_if_}});
}

absl::StatusOr<const Pod*> Lab::AddPod() {
  const int n = static_cast<int>(pods_.size());
  if (n > 200) return absl::ResourceExhaustedError("a lab has at most 201 pods");
  auto pod = std::make_unique<Pod>();
  pod->index = n;
  pod->netns_name = absl::StrCat("egl-", id_, "-p", n);
  pod->netns = std::string(kNetnsDir) + "/" + pod->netns_name;
  pod->ifname = "eth0";
  pod->node_ifname = absl::StrCat(link_tag_, "-p", n);
  pod->v4 = absl::StrCat("10.244.0.", n + 2);
  pod->v6 = fmt::format("fd00:244::{:x}", n + 2);
  if (auto s = AddNamespace(pod->netns_name); !s.ok()) return s;
  // The pod's MAC is fixed (02:00:00:00:00:<n+2>, pod 0's the one crafted
  // frames carry): the tc program checks every frame's source MAC against it.
  if (auto s = RunChecked({"ip", "link", "add", pod->ifname, "address", fmt::format("02:00:00:00:00:{:02x}", n + 2),
                           "netns", pod->netns_name, "type", "veth", "peer", "name", pod->node_ifname, "netns",
                           node_netns_name()});
      !s.ok())
    return s;
  // As a point-to-point CNI: the pod's only addresses are host routes, its
  // gateway is the node's address on the peer, and the node reaches the pod
  // by a host route over that veth.
  std::vector<std::string> in_pod = {
      "link set lo up",
      absl::StrCat("link set ", pod->ifname, " up"),
      absl::StrCat("addr add ", pod->v4, "/32 dev ", pod->ifname),
      absl::StrCat("addr add ", pod->v6, "/128 dev ", pod->ifname, " nodad"),
      absl::StrCat("route add ", kPodGatewayV4, "/32 dev ", pod->ifname, " scope link"),
      absl::StrCat("route add ", kPodGatewayV6, "/128 dev ", pod->ifname),
      absl::StrCat("route add default via ", kPodGatewayV4, " dev ", pod->ifname),
      absl::StrCat("route add default via ", kPodGatewayV6, " dev ", pod->ifname),
  };
  std::vector<std::string> in_node = {
      absl::StrCat("link set ", pod->node_ifname, " up"),
      absl::StrCat("addr add ", kPodGatewayV4, "/32 dev ", pod->node_ifname),
      absl::StrCat("addr add ", kPodGatewayV6, "/128 dev ", pod->node_ifname, " nodad"),
      absl::StrCat("route add ", pod->v4, "/32 dev ", pod->node_ifname),
      absl::StrCat("route add ", pod->v6, "/128 dev ", pod->node_ifname),
  };
  if (auto s = IpBatch(pod->netns_name, in_pod); !s.ok()) return s;
  if (auto s = IpBatch(node_netns_name(), in_node); !s.ok()) return s;
  if (auto s = WaitLinksUp({{pod->netns_name, pod->ifname}, {node_netns_name(), pod->node_ifname}});
      !s.ok())
    return s;
  pods_.push_back(std::move(pod));
  return pods_.back().get();
}

void Lab::Teardown() {
  if (!impl_) return;
  StopLabServers(impl_.get());
  std::error_code ec;
  if (fs::exists(impl_->cgroup_base, ec)) {
    if (auto s = RemoveCgroupTree(impl_->cgroup_base); !s.ok())
      spdlog::warn("lab teardown: {}", s.ToString());
  }
  // Pods first (newest first), then the world and the node: deleting a
  // namespace deletes the veths in it, and with them their peers.
  for (auto it = impl_->netns_added.rbegin(); it != impl_->netns_added.rend(); ++it) {
    KillProcessesInNetns(std::string(kNetnsDir) + "/" + *it);
    if (auto s = RunChecked({"ip", "netns", "del", *it}); !s.ok())
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

uint64_t Lab::FlowsOpenedTo(std::string_view addr) const {
  Addr16 a;
  return Parse(addr, &a) ? impl_->counters.FlowsOpened(a) : 0;
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

absl::Status Lab::SetCapture(bool on) {
  if (impl_->capture_fd < 0) return absl::FailedPreconditionError("lab capture: not running");
  if (on) {
    const int unused = 0;  // setsockopt wants an int-sized value even here
    if (setsockopt(impl_->capture_fd, SOL_SOCKET, SO_DETACH_FILTER, &unused, sizeof(unused)) != 0 && errno != ENOENT)
      return ErrnoStatus("lab capture: SO_DETACH_FILTER", errno);
  } else {
    // Classic BPF "ret #0": packet_rcv() runs the filter before it copies or
    // queues the frame, so a paused capture costs the sender one filter run.
    sock_filter drop_all[] = {BPF_STMT(BPF_RET | BPF_K, 0)};
    sock_fprog prog{1, drop_all};
    if (setsockopt(impl_->capture_fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) != 0)
      return ErrnoStatus("lab capture: SO_ATTACH_FILTER", errno);
  }
  impl_->capture_paused = !on;
  return absl::OkStatus();
}

bool Lab::WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Lab::Settle(std::chrono::milliseconds d) { std::this_thread::sleep_for(d); }

absl::Status Lab::Drain(const std::string& netns) const {
  if (impl_->capture_paused) {
    return absl::FailedPreconditionError("drain: the capture is paused (Lab::SetCapture): it would prove nothing");
  }
  static std::atomic<uint64_t> seq{0};
  const std::string from = netns.empty() ? client_netns() : netns;
  std::vector<std::string> tokens;
  absl::Status sent = InNetns(from, [&]() -> absl::Status {
    for (const char* dst : {kWorldLinkV4, kWorldLinkV6}) {
      Addr16 a;
      CanonicalAddress(dst, &a);
      sockaddr_in6 sa{};
      sa.sin6_family = AF_INET6;
      sa.sin6_port = htons(kMarkerPort);
      std::memcpy(&sa.sin6_addr, a.data(), 16);
      int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return ErrnoStatus("marker socket", errno);
      std::string token = absl::StrCat("egl-drain-", id_, "-", seq++);
      ssize_t n = sendto(fd, token.data(), token.size(), 0, reinterpret_cast<sockaddr*>(&sa),
                         sizeof(sa));
      int e = errno;
      close(fd);
      if (n != static_cast<ssize_t>(token.size()))
        return ErrnoStatus(absl::StrCat("marker to ", dst, " from ", from), n < 0 ? e : EIO);
      tokens.push_back(std::move(token));
    }
    return absl::OkStatus();
  });
  if (!sent.ok()) return sent;
  for (const auto& t : tokens) {
    if (!impl_->counters.WaitMarker(t, std::chrono::milliseconds(5000)))
      return absl::DeadlineExceededError(
          absl::StrCat("drain marker ", t, " from ", from, " never reached the world"));
  }
  return absl::OkStatus();
}

// ---- probe --------------------------------------------------------------------------

namespace {
RunSpec ProbeSpec(const std::string& netns, const std::vector<std::string>& args,
                  std::string_view cgroup, bool hostile) {
  RunSpec spec;
  spec.argv.push_back(BinaryPath("egressd-probe"));
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.netns = netns;
  spec.cgroup = std::string(cgroup);
  spec.hostile = hostile;
  return spec;
}
}  // namespace

RunResult Lab::Probe(const std::vector<std::string>& args, std::string_view cgroup, bool hostile,
                     std::chrono::milliseconds timeout) const {
  return ProbeIn(client_netns(), args, cgroup, hostile, timeout);
}

RunResult Lab::ProbeIn(const std::string& netns, const std::vector<std::string>& args,
                       std::string_view cgroup, bool hostile,
                       std::chrono::milliseconds timeout) const {
  RunSpec spec = ProbeSpec(netns, args, cgroup, hostile);
  spec.timeout = timeout;
  return Run(spec);
}

absl::StatusOr<Background> Lab::StartProbe(const std::vector<std::string>& args,
                                           std::string_view cgroup, bool hostile) const {
  return Start(ProbeSpec(client_netns(), args, cgroup, hostile));
}

}  // namespace egressd::lab
