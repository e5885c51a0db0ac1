// Sandboxes registered the way the DNS tests need them: a fresh lab cgroup,
// `egressctl sandbox add` with the test's policy flags and (unless told
// otherwise) the pod gateway as its DNS endpoint, the port the registry gave
// it read back from its record.  Everything added is removed by RemoveAll()
// (or the destructor), whatever the test did.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lab.h"

namespace egressd::test {

struct DnsSandbox {
  std::string cgroup;
  uint64_t id = 0;    // its cgroup id
  uint16_t port = 0;  // its DNS endpoint's port, 0 when it has none
};

class DnsSandboxes {
 public:
  // Cgroup names are `prefix` and a number unique in this process.
  explicit DnsSandboxes(std::string prefix) : prefix_(std::move(prefix)) {}
  ~DnsSandboxes() { RemoveAll(); }
  DnsSandboxes(const DnsSandboxes&) = delete;
  DnsSandboxes& operator=(const DnsSandboxes&) = delete;

  // Registers a new cgroup with `args` (policy and sandbox flags); with
  // `pod_endpoint`, --dns-endpoint4/6 are the pod gateway's addresses.
  // Failures are test failures (the returned sandbox then has no port).
  DnsSandbox Add(const std::vector<std::string>& args, bool pod_endpoint = true);
  // Its persistent record (<runtime_dir>/sandboxes/<id>.json); a discarded
  // value (is_discarded()) when it cannot be read or parsed.
  static nlohmann::json Record(const DnsSandbox& s);
  // `sandbox remove` for every sandbox added.
  void RemoveAll();

 private:
  std::string prefix_;
  std::vector<DnsSandbox> added_;
};

// `egressctl dns serve ARGS...` in the node netns (outside every sandbox
// cgroup), returned once it said "ready:" (every endpoint bound).
absl::StatusOr<lab::Background> ServeDns(const std::vector<std::string>& args);

// An nftables counter in the node netns's input path for UDP to addr:port:
// what arrives at an endpoint whatever the payload (a DNS server logs only
// what parses as a query).  Its table is deleted with it.
class NodeUdpCounter {
 public:
  static absl::StatusOr<std::unique_ptr<NodeUdpCounter>> Add(const std::string& addr, uint16_t port);
  ~NodeUdpCounter();
  // ~0 when the table cannot be read.
  uint64_t Packets() const;

 private:
  explicit NodeUdpCounter(std::string table) : table_(std::move(table)) {}
  std::string table_;
};

}  // namespace egressd::test
