#include "userspace/daemon/record_watcher.h"

#include <unistd.h>

#include <fstream>
#include <set>

#include <spdlog/spdlog.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "userspace/common/errors.h"
#include "userspace/common/node.h"

namespace egressd::daemon {

namespace asio = boost::asio;

std::optional<dns::Endpoint> DnsEndpointOf(const control::SandboxRecord& r) {
  if (!r.dns || r.dns->port == 0 || (!r.dns->addr4 && !r.dns->addr6)) return std::nullopt;
  return dns::Endpoint{r.dns->addr4, r.dns->addr6, r.dns->port};
}

dns::SandboxScope DnsScopeOf(const control::SandboxRecord& r) {
  dns::SandboxScope s;
  s.sandbox_id = r.cgroup_id;
  // No known policy: no name is in scope (asks nothing).
  if (r.current.policy) {
    s.names = dns::NameScope(*r.current.policy);
    s.protected_cidrs = r.current.policy->protected_cidrs;
  }
  return s;
}

absl::Status CheckOutsideSandboxes(const std::vector<control::SandboxRecord>& records, const std::string& who) {
  std::ifstream in("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  }
  auto mount = FindCgroup2Mount();
  if (!mount.ok()) return mount.status();
  std::set<uint64_t> sandboxes;
  for (const auto& r : records) sandboxes.insert(r.cgroup_id);
  for (std::string p = path; !p.empty() && p != "/"; p = p.substr(0, p.rfind('/'))) {
    auto id = CgroupIdOf(*mount + p);
    if (id.ok() && sandboxes.count(*id)) {
      return absl::FailedPreconditionError(absl::StrCat(
          who, " runs in cgroup ", path, ", inside sandbox ", *id,
          ": its upstream queries would be judged as the sandbox's; run it outside every sandbox"));
    }
  }
  return absl::OkStatus();
}

RecordWatcher::RecordWatcher(asio::io_context& io, const control::SandboxRecords& records, dns::DnsProxy& proxy,
                             Say say)
    : records_(records), proxy_(proxy), say_(std::move(say)), sd_(io) {}

absl::Status RecordWatcher::Start() {
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "inotify_init1");
  if (inotify_add_watch(fd, records_.dir().c_str(), IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE) < 0) {
    int err = errno;
    close(fd);
    return ErrnoStatus(err, absl::StrCat("watch ", records_.dir()));
  }
  sd_.assign(fd);
  Read();
  return absl::OkStatus();
}

void RecordWatcher::Refresh(uint64_t id) {
  auto r = records_.Load(id);
  if (!r.ok()) {
    spdlog::warn("dns: sandbox record {}: {}", id, r.status().ToString());
    return;
  }
  std::optional<dns::Endpoint> ep = *r ? DnsEndpointOf(**r) : std::nullopt;
  if (!ep) {
    if (proxy_.Serves(id)) {
      proxy_.Stop(id);
      Tell(absl::StrCat("stopped ", id));
    } else if (*r) {
      spdlog::warn("dns: sandbox {} has no DNS endpoint in its record: its DNS fails closed", id);
    }
    return;
  }
  absl::Status s = proxy_.Serve(DnsScopeOf(**r), *ep);
  if (!s.ok()) {
    spdlog::error("dns: {}", s.ToString());
    return;
  }
  Tell(absl::StrCat("serving ", id, " ", ep->ToString()));
}

void RecordWatcher::Read() {
  sd_.async_read_some(asio::buffer(buf_), [this](const boost::system::error_code& ec, size_t n) {
    if (ec) {
      if (ec != asio::error::operation_aborted) spdlog::error("dns: inotify: {}", ec.message());
      return;
    }
    std::set<uint64_t> changed;
    for (size_t off = 0; off + sizeof(inotify_event) <= n;) {
      auto* ev = reinterpret_cast<const inotify_event*>(buf_.data() + off);
      off += sizeof(inotify_event) + ev->len;
      if (ev->mask & IN_Q_OVERFLOW) {
        overflowed_ = true;
        continue;
      }
      std::string name = ev->len ? std::string(ev->name) : std::string();
      // Only "<id>.json": temp files of a write in progress are not records.
      if (name.size() <= 5 || name.compare(name.size() - 5, 5, ".json") != 0) continue;
      uint64_t id = 0;
      if (absl::SimpleAtoi(name.substr(0, name.size() - 5), &id)) changed.insert(id);
    }
    if (overflowed_) {
      overflowed_ = false;
      Rescan();
    }
    for (uint64_t id : changed) Refresh(id);
    Read();
  });
}

void RecordWatcher::Rescan() {
  auto all = records_.List();
  if (!all.ok()) return;
  std::set<uint64_t> seen;
  for (const auto& r : *all) {
    seen.insert(r.cgroup_id);
    Refresh(r.cgroup_id);
  }
  for (uint64_t id : proxy_.Served()) {
    if (!seen.count(id)) Refresh(id);
  }
}

}  // namespace egressd::daemon
