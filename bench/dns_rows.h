// The DNS rows (issue 10, measurement 6): a pod's queries answered by
// egressd's proxy (`egressctl dns serve` in the node netns, the pod's port-53
// traffic steered there by the kernel redirect) and by the incumbent's
// forwarder (egr-nft-forwarder in the pod's own netns behind an nft redirect,
// one nft transaction per answer), against the floor: the same client asking
// the lab's dnsmasq directly.  Allowed and denied names are separate rows.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_stats.h"
#include "egressd_env.h"
#include "serve_audit.h"

namespace egressd::bench {

// The names the lab's resolver answers: the allowed name (the server's
// address), a denied one, and fresh names, each with an address of its own
// (configured on the world host's lo), for measurements that need an
// address no enforcer has learned yet.
inline constexpr const char* kBenchScope = "*.bench.test";
inline constexpr const char* kAllowedName = "allowed.bench.test";
inline constexpr const char* kDeniedName = "denied.example";
inline constexpr int kFreshNames = 80;
std::string FreshName(int i);     // fresh<i>.bench.test
std::string FreshAddress(int i);  // 192.0.2.(100 + i)

// The incumbent's set and the mark that exempts its forwarder.
inline constexpr const char* kForwarderMark = "4e46";
inline constexpr uint16_t kForwarderPort = 5353;

// What the DNS rows and the resolved-address axis share: the resolver in the
// world, an egressd sandbox (pod 2's netns, a cgroup of its own registered
// with a DNS endpoint and the names-only policy) served by `dns serve`, and
// pod 1 with the incumbent's ruleset for the same policy, its port-53
// redirect and its forwarder.  Torn down (sandbox removed, processes
// stopped, pod 1's tables deleted) by the destructor.
class DnsLab {
 public:
  static absl::StatusOr<std::unique_ptr<DnsLab>> Start(test::Egressd& e, const std::string (&netns)[3],
                                                       const std::string& dir);
  ~DnsLab();

  const std::string& netns(int idx) const { return netns_[idx]; }
  // The cgroup a client of enforcer idx joins ("" but for egressd).
  const std::string& cgroup(int idx) const { return cgroups_[idx]; }
  uint64_t sandbox_id() const { return sandbox_id_; }
  const char* resolver() const;
  // The processes on each enforcer's resolver path (for their CPU): the
  // resolver; and egressctl dns serve, or the forwarder.
  std::vector<pid_t> PathPids(int idx) const;
  pid_t forwarder_pid() const { return forwarder_.pid(); }
  // Stops the forwarder (SIGTERM) and returns the counters it prints then.
  json StopForwarder();
  pid_t serve_pid() const { return serve_.pid(); }
  // The forwarder's answer-to-set times (µs) since the last call (SIGUSR1).
  absl::StatusOr<std::vector<double>> ForwarderAnswerToSetUs();
  // `dns serve`'s audit records, read (and its finished pending files
  // removed) as they come: serve_audit.h.
  ServeAudit& serve_audit() { return *serve_audit_; }
  const std::string& dir() const { return dir_; }

 private:
  DnsLab(test::Egressd& e, const std::string (&netns)[3], std::string dir) : e_(e), dir_(std::move(dir)) {
    for (int i = 0; i < 3; ++i) netns_[i] = netns[i];
  }
  test::Egressd& e_;
  std::string netns_[3], cgroups_[3], dir_;
  uint64_t sandbox_id_ = 0;
  lab::Background resolver_, serve_, forwarder_;
  std::unique_ptr<ServeAudit> serve_audit_;
};

// The rows: latency (p50/p99 at a modest fixed rate, added to and as a ratio
// of the floor's) and the highest rate with under 1% loss, per enforcer,
// interleaved with the order rotated; the resolver path's CPU per query.
json DnsRows(DnsLab& d, bool quick, bool& all_ran);

// Kernel-reported resident memory of a process, in KiB (VmRSS).
double RssKib(pid_t pid);
// /proc/PID/smaps_rollup's Rss, Pss, Private_Clean and Private_Dirty, in
// bytes (Pss: shared pages divided among the processes mapping them; the
// private ones are what one more such process adds at least).
json SmapsRollupBytes(pid_t pid);
// utime + stime of a process so far, in seconds.
double ProcessCpuSeconds(pid_t pid);

}  // namespace egressd::bench
