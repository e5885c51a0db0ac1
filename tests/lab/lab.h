// egressd test lab: a pair of network namespaces with lab hosts, servers
// that count what arrives, a packet capture, scratch cgroups and a process
// runner. Everything a test sends stays inside the namespaces made here.
//
//   egl-<id>-c  "client" (the sandbox side)   veth 203.0.113.2/24, 2001:db8:ffff::2/64
//                default routes via the hosts side
//   egl-<id>-h  "hosts"                      veth 203.0.113.1/24, 2001:db8:ffff::1/64
//                every lab destination below on `lo` (/32, /128)
//
// <id> is "<pid>-<random hex>"; a Lab sweeps stale egl-* netns, cgroups and
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
// Link between the namespaces.
inline constexpr const char* kClientV4 = "203.0.113.2";
inline constexpr const char* kClientV6 = "2001:db8:ffff::2";
inline constexpr const char* kGatewayV4 = "203.0.113.1";
inline constexpr const char* kGatewayV6 = "2001:db8:ffff::1";

// Lab hosts (configured on lo in the hosts namespace).
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

// Servers in the hosts namespace (all bound to :: dual stack).
inline constexpr uint16_t kTcpPorts[] = {80, 443, 8080};  // count accepts, echo until EOF
inline constexpr uint16_t kUdpPorts[] = {7000, 7001};     // count datagrams, echo back

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
  std::chrono::milliseconds timeout{10000};
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

// ---- probe output -------------------------------------------------------------------
// One flat JSON object per line as printed by egressd-probe; values are kept as
// text (strings unquoted, numbers/booleans as written).
using ProbeLine = std::map<std::string, std::string>;
std::vector<ProbeLine> ParseProbeLines(std::string_view out);
absl::StatusOr<ProbeLine> ParseProbeLine(std::string_view line);

// ---- misc ---------------------------------------------------------------------------
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
  uint32_t length = 0;
};

class Lab {
 public:
  static absl::StatusOr<std::unique_ptr<Lab>> Create();
  ~Lab();
  Lab(const Lab&) = delete;
  Lab& operator=(const Lab&) = delete;

  const std::string& id() const { return id_; }
  std::string client_netns() const;  // /var/run/netns/egl-<id>-c
  std::string hosts_netns() const;   // /var/run/netns/egl-<id>-h
  std::string client_netns_name() const { return "egl-" + id_ + "-c"; }
  std::string hosts_netns_name() const { return "egl-" + id_ + "-h"; }
  const std::string& client_ifname() const { return client_if_; }
  const std::string& hosts_ifname() const { return hosts_if_; }

  // Counters (thread-safe). Addresses compare canonically.
  uint64_t TcpAccepts(std::string_view addr, uint16_t port) const;
  uint64_t UdpDatagrams(std::string_view addr, uint16_t port) const;
  uint64_t PacketsTo(std::string_view addr) const;               // captured from the client
  uint64_t PacketsTo(std::string_view addr, int ip_proto) const; // final protocol
  uint64_t PacketsFirstHeader(std::string_view addr, int first_header) const;
  uint64_t PacketsToWithIpOptions(std::string_view addr) const;  // v4 only
  std::vector<CapturedPacket> Captured() const;  // last 4096 packets, oldest first
  std::string CountersSummary() const;           // for failure messages
  void ResetCounters();

  // Polls `pred` every 5 ms until it is true or `timeout` passes.
  static bool WaitFor(const std::function<bool()>& pred,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(3000));
  // Waits long enough for anything in flight to arrive; use before asserting a zero.
  static void Settle(std::chrono::milliseconds d = std::chrono::milliseconds(300));

  // Cgroups: <cgroup2>/egl-<id>/<relative> (nested allowed), removed (members
  // killed) by the destructor. cgroup_base() is <cgroup2>/egl-<id>.
  static std::string cgroup2_root();
  absl::StatusOr<std::string> MakeCgroup(std::string_view relative);
  std::string cgroup_base() const;

  // Convenience: egressd-probe in the client namespace.
  RunResult Probe(const std::vector<std::string>& args, std::string_view cgroup = "",
                  bool hostile = true,
                  std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) const;
  absl::StatusOr<Background> StartProbe(const std::vector<std::string>& args,
                                        std::string_view cgroup = "",
                                        bool hostile = true) const;

  // Removes egl-* netns / cgroups / root-ns veths whose owner process is gone.
  // Called by Create(); returns how many objects were removed.
  static int SweepStale();

  struct Impl;

 private:
  Lab();
  absl::Status Setup();
  absl::Status SetupNamespaces();
  absl::Status StartServers();
  void Teardown();

  std::string id_;
  std::string client_if_, hosts_if_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace egressd::lab
