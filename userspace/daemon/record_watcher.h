// The DNS proxy's view of the sandbox records: every registered sandbox with
// a DNS endpoint is served, and a record written or removed while the proxy
// runs is picked up through inotify on the records directory.  Hosted by
// `egressctl dns serve` and by the daemon, on their Asio loop (moved here
// from tools/egressctl/cmd_dns.cc unchanged, with run_dns.cc's
// DnsEndpointOf/DnsScopeOf).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <sys/inotify.h>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "absl/status/status.h"
#include "userspace/control/sandbox_record.h"
#include "userspace/dns/proxy.h"

namespace egressd::daemon {

// The endpoint and scope a record gives the proxy.
std::optional<dns::Endpoint> DnsEndpointOf(const control::SandboxRecord& r);
dns::SandboxScope DnsScopeOf(const control::SandboxRecord& r);

// The proxy's upstream sockets are exempt because its cgroup is no sandbox:
// FailedPrecondition when this process runs inside one (or below one).
// `who` names the process in the message ("egressctl dns serve").
absl::Status CheckOutsideSandboxes(const std::vector<control::SandboxRecord>& records, const std::string& who);

class RecordWatcher {
 public:
  // `say` is told "serving ID ENDPOINT" and "stopped ID" as sandboxes come
  // and go (egressctl prints them for whoever waits on it).
  using Say = std::function<void(const std::string&)>;
  RecordWatcher(boost::asio::io_context& io, const control::SandboxRecords& records, dns::DnsProxy& proxy,
                Say say = nullptr);

  absl::Status Start();
  // Serves or stops the sandbox of record `id` as its file now says.
  void Refresh(uint64_t id);

 private:
  void Read();
  // Events were lost: judge every record again, and stop what has none.
  void Rescan();
  void Tell(const std::string& line) {
    if (say_) say_(line);
  }

  const control::SandboxRecords& records_;
  dns::DnsProxy& proxy_;
  Say say_;
  boost::asio::posix::stream_descriptor sd_;
  alignas(inotify_event) std::array<char, 64 * 1024> buf_;
  bool overflowed_ = false;
};

}  // namespace egressd::daemon
