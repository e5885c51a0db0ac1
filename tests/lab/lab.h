// egressd test lab: a node with pods routed to a world of lab hosts, servers
// that count what arrives, a packet capture, scratch cgroups and a process
// runner. Everything a test sends stays inside the namespaces made here.
//
//   egl-<id>-p<N>  pod N (a sandbox's netns)  eth0 10.244.0.<N+2>/32, fd00:244::<N+2>/128
//                  routes: the gateway on-link, default via it (as a CNI sets up)
//        | veth
//   egl-<id>-n     the node (egressd's netns)  egl-<r>-p<N>: gateway 10.244.0.1/32,
//                  fd00:244::1/128 and the host route to pod N's /32 and /128;
//                  forwarding on; egl-<r>-up 203.0.113.1/30, 2001:db8:ffff::1/64,
//                  default route to the world
//        | veth
//   egl-<id>-w     the world                   egl-<r>-w 203.0.113.2/30, 2001:db8:ffff::2/64,
//                  routes to the pod range via the node; every lab destination
//                  below on `lo` (/32, /128); the servers, and the capture on
//                  egl-<r>-w (what arrives at the lab hosts)
//
// Pod 0 exists from the start (client_netns()); AddPod() adds more. <id> is
// "<pid>-<random hex>"; a Lab sweeps stale egl-* netns, cgroups and
// root-namespace veths whose owner process is gone before it builds its own.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace egressd::lab {

// ---- lab addresses ------------------------------------------------------------------
// Pods and their gateway (the node's address on every pod-facing veth).
inline constexpr const char* kPodGatewayV4 = "10.244.0.1";
inline constexpr const char* kPodGatewayV6 = "fd00:244::1";
inline constexpr const char* kPodRangeV4 = "10.244.0.0/24";
inline constexpr const char* kPodRangeV6 = "fd00:244::/64";
// The node's uplink and the world's end of it.
inline constexpr const char* kNodeUplinkV4 = "203.0.113.1";
inline constexpr const char* kNodeUplinkV6 = "2001:db8:ffff::1";
inline constexpr const char* kWorldLinkV4 = "203.0.113.2";
inline constexpr const char* kWorldLinkV6 = "2001:db8:ffff::2";

// Lab hosts (configured on lo in the world namespace).
inline constexpr const char* kPublicA4 = "192.0.2.10";
inline constexpr const char* kPublicB4 = "192.0.2.11";
inline constexpr const char* kPublicC4 = "192.0.2.200";
inline constexpr const char* kPublicD4 = "198.51.100.7";
inline constexpr const char* kPublicE4 = "198.51.100.8";
inline constexpr const char* kPublicF4 = "203.0.113.50";
inline constexpr const char* kImds4 = "169.254.169.254";        // cloud metadata
inline constexpr const char* kEcsMeta4 = "169.254.170.2";       // ECS task metadata
inline constexpr const char* kAlibabaMeta4 = "100.100.100.200"; // Alibaba metadata
inline constexpr const char* kDns4 = "8.8.8.8";
inline constexpr const char* kPrivate10 = "10.1.2.3";
inline constexpr const char* kPrivate172 = "172.16.5.5";
inline constexpr const char* kPrivate192 = "192.168.1.1";

inline constexpr const char* kPublicA6 = "2001:db8::10";
inline constexpr const char* kPublicB6 = "2001:db8::11";
inline constexpr const char* kPublicC6 = "2001:db8:1::5";
inline constexpr const char* kImds6 = "fd00:ec2::254";        // AWS IMDS over IPv6
inline constexpr const char* kEc2Dns6 = "fd00:ec2::23";
inline constexpr const char* kNat64Imds = "64:ff9b::a9fe:a9fe";   // 169.254.169.254
inline constexpr const char* kNat64PublicA = "64:ff9b::c000:20a"; // 192.0.2.10
inline constexpr const char* kUla6 = "fc00::5";

const std::vector<std::string>& HostAddressesV4();
const std::vector<std::string>& HostAddressesV6();

// Servers in the world namespace (all bound to :: dual stack).
inline constexpr uint16_t kTcpPorts[] = {80, 443, 8080};  // count accepts, echo until EOF
inline constexpr uint16_t kUdpPorts[] = {7000, 7001};     // count datagrams, echo back
// Lab::Drain()'s markers go to the world's link addresses on this port, so no
// lab host's counters ever see them.
inline constexpr uint16_t kMarkerPort = 7999;

inline constexpr int kProtoIcmp = 1;
inline constexpr int kProtoTcp = 6;
inline constexpr int kProtoUdp = 17;
inline constexpr int kProtoRouting6 = 43;
inline constexpr int kProtoIcmp6 = 58;

// ---- processes ----------------------------------------------------------------------
struct RunSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH unless it has a '/'
  std::string netns;              // /var/run/netns/NAME path, or empty = stay
  std::string cgroup;             // absolute cgroup2 dir to join before exec, or empty
  // Exec under `setpriv --bounding-set -all,+net_raw --inh-caps -all --`: uid 0
  // with only CAP_NET_RAW, as a hostile sandbox would run.
  bool hostile = false;
  // The ceiling on the child's run; zero means the default: 10 s times
  // TimeScale(), since a ceiling is a hang guard, never the thing a test
  // measures (a dig's first start in a loaded emulated guest took ~10 s).
  std::chrono::milliseconds timeout{0};
  std::map<std::string, std::string> env;  // added to / overriding our environment
  std::string stdin_data;                  // Run() only: written to the child's stdin
};

struct RunResult {
  int exit_code = -1;  // -signal if killed by a signal
  bool timed_out = false;
  std::string out;
  std::string err;
  std::string Describe() const;  // one line for test failure messages
};

// Multiplier for time limits in tests: EGR_TIME_SCALE (vmtests sets it under
// software emulation, where programs run several times slower); 1 if unset.
double TimeScale();

// Blocking: captures stdout/stderr, SIGKILLs the process group on timeout.
// A failure to start shows as exit_code 127 with the reason in `err`.
// Inside a TEST body write `lab::Run(...)`: an unqualified Run names
// testing::Test::Run there.
RunResult Run(const RunSpec& spec);

// A running child in its own process group. It gets PR_SET_PDEATHSIG=SIGKILL,
// which fires when the *thread* that started it exits: start long-lived
// children from the test's main thread. stdout/stderr are drained by a
// thread, so the child never blocks on a full pipe.
class Background {
 public:
  Background();
  Background(Background&&) noexcept;
  Background& operator=(Background&&) noexcept;
  ~Background();  // Stop()

  pid_t pid() const;
  // Next complete stdout line (without '\n'); nullopt on timeout or EOF.
  std::optional<std::string> ReadOutLine(std::chrono::milliseconds timeout);
  // Waits for exit (SIGKILL after timeout); returns status and all remaining output.
  RunResult Wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));
  void Stop();  // SIGKILL the process group and reap
  bool running() const;
  std::string err() const;  // stderr so far

  struct State;

 private:
  friend absl::StatusOr<Background> Start(const RunSpec& spec);
  std::unique_ptr<State> st_;
};

absl::StatusOr<Background> Start(const RunSpec& spec);

// Finds a sibling binary of the build: next to /proc/self/exe, in $EGR_BIN_DIR,
// then walking up from the executable's directory: <p>/<name>, <p>/tests/lab/<name>,
// <p>/tools/<name>/<name>, <p>/tools/egressctl/<name>. Returns `name` unchanged
// (left to PATH) if nothing is found.
std::string BinaryPath(std::string_view name);
// A system tool as the test's own PATH finds it (absolute), for command lines
// run under another PATH (egressctl run's command; the 6.1 guest's BusyBox
// comes first there, whose setpriv has no --bounding-set).
std::string ResolveInPath(const std::string& name);

// ---- probe output -------------------------------------------------------------------
// One JSON object per line as printed by egressd-probe, parsed with
// nlohmann-json; each member is kept as text: strings unquoted, anything else
// (numbers, booleans, null, arrays, objects) in its compact JSON form.
using ProbeLine = std::map<std::string, std::string>;
// Every line of `out` that is a JSON object (other lines are skipped).
std::vector<ProbeLine> ParseProbeLines(std::string_view out);
// InvalidArgument naming the line unless it is exactly one JSON object.
absl::StatusOr<ProbeLine> ParseProbeLine(std::string_view line);

// ---- misc ---------------------------------------------------------------------------
// Runs `fn` on a fresh thread that has joined the network namespace at
// `netns_path` (empty: stays in ours) and returns its status: sockets `fn`
// opens live in that namespace.
absl::Status InNetns(std::string_view netns_path, const std::function<absl::Status()>& fn);

// Writes /proc/sys/<key with '.' -> '/'> inside the namespace `netns_path`
// (empty = ours).
absl::Status SetSysctl(std::string_view netns_path, std::string_view key,
                       std::string_view value);
absl::StatusOr<std::string> GetSysctl(std::string_view netns_path, std::string_view key);

// Canonical 16-byte form of an address ("::ffff:1.2.3.4" == "1.2.3.4", brackets
// allowed). False if it does not parse.
bool CanonicalAddress(std::string_view text, std::array<uint8_t, 16>* out);
std::string AddressToString(const std::array<uint8_t, 16>& a);  // v4-mapped -> dotted

bool RunningAsRootWithSysAdmin();

// ---- the lab ------------------------------------------------------------------------
struct CapturedPacket {
  std::array<uint8_t, 16> src{}, dst{};
  int proto = -1;        // v4: protocol; v6: after skipping extension headers
  int first_header = -1; // v4: protocol; v6: the IPv6 header's next-header
  bool v6 = false;
  bool ip_options = false;  // v4 header longer than 20 bytes
  bool opens_flow = false;  // a TCP SYN without ACK, or any packet that is not TCP
  uint32_t length = 0;
};

// A pod: a network namespace behind a veth whose other end is in the node.
struct Pod {
  int index = 0;
  std::string netns_name;   // egl-<id>-p<N>
  std::string netns;        // /var/run/netns/egl-<id>-p<N>
  std::string ifname;       // "eth0", inside the pod
  std::string node_ifname;  // egl-<r>-p<N>, its peer in the node netns
  std::string v4, v6;       // the pod's addresses (/32, /128)
};

class Lab {
 public:
  static absl::StatusOr<std::unique_ptr<Lab>> Create();
  ~Lab();
  Lab(const Lab&) = delete;
  Lab& operator=(const Lab&) = delete;

  const std::string& id() const { return id_; }
  // Pod 0, the default sandbox netns.
  std::string client_netns() const { return pod().netns; }
  std::string client_netns_name() const { return pod().netns_name; }
  const std::string& client_ifname() const { return pod().ifname; }
  // The node: egressd's netns (EGRESSD_NODE_NETNS), the pods' router.
  std::string node_netns() const;        // /var/run/netns/egl-<id>-n
  std::string node_netns_name() const { return "egl-" + id_ + "-n"; }
  const std::string& node_uplink_ifname() const { return uplink_if_; }
  // The ifindex of an interface in the node netns (a pod's veth end, as the
  // tc program and egr_ifsandbox_v1 know it); 0 if there is none.
  uint32_t NodeIfindex(const std::string& ifname) const;
  // The world: the lab hosts, servers and capture.
  std::string world_netns() const;       // /var/run/netns/egl-<id>-w
  std::string world_netns_name() const { return "egl-" + id_ + "-w"; }
  const std::string& world_ifname() const { return world_if_; }

  // Another pod, routed by the node like the first; lives until the Lab does.
  absl::StatusOr<const Pod*> AddPod();
  const Pod& pod(size_t index = 0) const { return *pods_.at(index); }
  size_t pod_count() const { return pods_.size(); }

  // Counters (thread-safe). Addresses compare canonically.
  uint64_t TcpAccepts(std::string_view addr, uint16_t port) const;
  uint64_t UdpDatagrams(std::string_view addr, uint16_t port) const;
  // Captured arriving at the world from the node (any pod, or the node itself).
  uint64_t PacketsTo(std::string_view addr) const;
  uint64_t PacketsTo(std::string_view addr, int ip_proto) const; // final protocol
  // Packets that open a flow (CapturedPacket::opens_flow): what a new attempt
  // sends, never a previous connection's FIN or ACK.
  uint64_t FlowsOpenedTo(std::string_view addr) const;
  uint64_t PacketsFirstHeader(std::string_view addr, int first_header) const;
  uint64_t PacketsToWithIpOptions(std::string_view addr) const;  // v4 only
  std::vector<CapturedPacket> Captured() const;  // last 4096 packets, oldest first
  std::string CountersSummary() const;           // for failure messages
  void ResetCounters();
  // Pauses (false) or resumes (true) the packet capture. Every frame to the
  // world wakes the capture's thread from whatever context delivers it (a
  // DNS proxy's send to its upstream pays for the copy and the wake-up), so
  // benchmarks that count nothing turn it off: it is machine load that no
  // enforcer would meet on a node. Paused, the socket's filter drops every
  // frame before it is copied; PacketsTo() and friends count nothing and
  // Drain() refuses (it cannot prove "nothing arrived" without the capture).
  absl::Status SetCapture(bool on);

  // Polls `pred` every 5 ms until it is true or `timeout` passes.
  static bool WaitFor(const std::function<bool()>& pred,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(3000));
  // Waits long enough for anything in flight to arrive. Only where no ordering
  // signal exists; prefer Drain().
  static void Settle(std::chrono::milliseconds d = std::chrono::milliseconds(300));
  // Sends a marker datagram (v4 and v6) from `netns` (empty: pod 0) to the
  // world over the same veths and router a sandbox's packets take, from
  // outside any lab cgroup, and waits until the world's marker server read
  // both and the capture counted both (two threads on two sockets: either can
  // lag the other). Anything a sandbox sent from that netns before was queued
  // ahead of the markers, so after Drain() a zero count is "nothing arrived",
  // not "not yet".
  absl::Status Drain(const std::string& netns = "") const;

  // Cgroups: <cgroup2>/egl-<id>/<relative> (nested allowed), removed (members
  // killed) by the destructor. cgroup_base() is <cgroup2>/egl-<id>.
  static std::string cgroup2_root();
  absl::StatusOr<std::string> MakeCgroup(std::string_view relative);
  std::string cgroup_base() const;

  // Convenience: egressd-probe in pod 0's namespace.
  RunResult Probe(const std::vector<std::string>& args, std::string_view cgroup = "",
                  bool hostile = true,
                  std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) const;
  absl::StatusOr<Background> StartProbe(const std::vector<std::string>& args,
                                        std::string_view cgroup = "",
                                        bool hostile = true) const;
  // egressd-probe in another namespace (a pod's, the node's).
  RunResult ProbeIn(const std::string& netns, const std::vector<std::string>& args,
                    std::string_view cgroup = "", bool hostile = true,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) const;

  // Removes egl-* netns / cgroups / root-ns veths whose owner process is gone.
  // Called by Create(); returns how many objects were removed.
  static int SweepStale();

  struct Impl;

 private:
  Lab();
  absl::Status Setup();
  absl::Status SetupNodeAndWorld();
  absl::Status AddNamespace(const std::string& name);
  void Teardown();

  std::string id_;
  std::string link_tag_;  // "egl-<r>": prefix of every veth end outside the pods
  std::string uplink_if_, world_if_;
  std::vector<std::unique_ptr<Pod>> pods_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace egressd::lab
